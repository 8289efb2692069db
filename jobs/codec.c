/* codec.c: 8-byte-padded command frames with a length/version header (see codec.h). */
#include "jobs/codec.h"

#include <string.h>

static void put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16),
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

size_t codec_frame_len(size_t payload_len)
{
	return CODEC_HEADER_LEN + ((payload_len + 7) & ~(size_t)7);
}

void codec_encode(void *out, const void *payload, size_t payload_len)
{
	uint8_t *p = out;
	size_t total = codec_frame_len(payload_len);
	memset(p, 0, CODEC_HEADER_LEN);
	put_u32(p, CODEC_MAGIC);
	p[4] = CODEC_VERSION & 0xff, p[5] = CODEC_VERSION >> 8;
	put_u32(p + 8, (uint32_t)payload_len);
	if (payload_len > 0)
		memcpy(p + CODEC_HEADER_LEN, payload, payload_len);
	memset(p + CODEC_HEADER_LEN + payload_len, 0, total - CODEC_HEADER_LEN - payload_len);
}

int codec_decode(const void *frame, size_t frame_len, const void **payload, size_t *payload_len,
                 struct yard_err *err)
{
	const uint8_t *p = frame;
	if (frame_len < CODEC_HEADER_LEN)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "command frame of %zu bytes is shorter than its %d-byte header",
		                    frame_len, CODEC_HEADER_LEN);
	if (frame_len % 8 != 0)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "command frame of %zu bytes is not padded to 8 bytes",
		                    frame_len);
	if (get_u32(p) != CODEC_MAGIC)
		return yard_err_set(err, YARD_ECORRUPT, "command frame has bad magic 0x%08x",
		                    get_u32(p));
	unsigned version = p[4] | (unsigned)p[5] << 8;
	if (version != CODEC_VERSION)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "command frame version %u is not supported (want %d)", version,
		                    CODEC_VERSION);
	/* a flag or field this build does not know would change what the payload means */
	if (p[6] != 0 || p[7] != 0)
		return yard_err_set(err, YARD_ECORRUPT, "command frame has flags 0x%02x%02x", p[7],
		                    p[6]);
	if (get_u32(p + 12) != 0)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "command frame has non-zero reserved bytes (0x%08x)",
		                    get_u32(p + 12));
	uint32_t len = get_u32(p + 8);
	if (len > CODEC_MAX_PAYLOAD || codec_frame_len(len) != frame_len)
		return yard_err_set(
		    err, YARD_ECORRUPT,
		    "command frame header says %u payload bytes but the frame has %zu", len,
		    frame_len);
	for (size_t i = CODEC_HEADER_LEN + len; i < frame_len; i++)
		if (p[i] != 0)
			return yard_err_set(err, YARD_ECORRUPT,
			                    "command frame padding byte %zu is not zero", i);
	*payload = p + CODEC_HEADER_LEN;
	*payload_len = len;
	return 0;
}

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

size_t codec_batch_len(const size_t *lens, int n)
{
	size_t total = CODEC_HEADER_LEN;
	for (int i = 0; i < n; i++)
		total += CODEC_BATCH_RECORD_LEN + pad8(lens[i]);
	return total;
}

void codec_batch_encode(void *out, const void *const *payloads, const size_t *lens, int n)
{
	uint8_t *p = out;
	size_t total = codec_batch_len(lens, n);
	memset(p, 0, total);
	put_u32(p, CODEC_MAGIC);
	p[4] = CODEC_VERSION_BATCH & 0xff, p[5] = CODEC_VERSION_BATCH >> 8;
	put_u32(p + 8, (uint32_t)(total - CODEC_HEADER_LEN));
	put_u32(p + 12, (uint32_t)n);
	uint8_t *rec = p + CODEC_HEADER_LEN;
	for (int i = 0; i < n; i++) {
		put_u32(rec, (uint32_t)lens[i]);
		if (lens[i] > 0)
			memcpy(rec + CODEC_BATCH_RECORD_LEN, payloads[i], lens[i]);
		rec += CODEC_BATCH_RECORD_LEN + pad8(lens[i]);
	}
}

static int all_zero(const uint8_t *p, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (p[i] != 0)
			return 0;
	return 1;
}

int codec_decode_entry(const void *frame, size_t frame_len, const void **payloads, size_t *lens,
                       int max, int *n, int *is_batch, struct yard_err *err)
{
	const uint8_t *p = frame;
	*is_batch = 0;
	if (frame_len >= CODEC_HEADER_LEN && get_u32(p) == CODEC_MAGIC &&
	    (p[4] | (unsigned)p[5] << 8) != CODEC_VERSION_BATCH) {
		if (max < 1)
			return yard_err_set(err, YARD_EINVAL, "no room for a command");
		*n = 1;
		return codec_decode(frame, frame_len, &payloads[0], &lens[0], err);
	}
	if (frame_len < CODEC_HEADER_LEN || frame_len % 8 != 0 || get_u32(p) != CODEC_MAGIC)
		return codec_decode(frame, frame_len, &payloads[0], &lens[0], err); /* says why */
	uint32_t body = get_u32(p + 8), count = get_u32(p + 12);
	if (p[6] != 0 || p[7] != 0)
		return yard_err_set(err, YARD_ECORRUPT, "batch frame has flags 0x%02x%02x", p[7],
		                    p[6]);
	if ((size_t)body + CODEC_HEADER_LEN != frame_len)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "batch frame header says %u body bytes but the frame has %zu",
		                    body, frame_len);
	if (count == 0 || count > CODEC_BATCH_MAX || (int)count > max)
		return yard_err_set(err, YARD_ECORRUPT, "batch frame of %u commands (want 1..%d)",
		                    count, max < CODEC_BATCH_MAX ? max : CODEC_BATCH_MAX);
	size_t off = CODEC_HEADER_LEN;
	for (uint32_t i = 0; i < count; i++) {
		if (frame_len - off < CODEC_BATCH_RECORD_LEN)
			return yard_err_set(err, YARD_ECORRUPT,
			                    "batch command %u of %u starts past the frame's end",
			                    i + 1, count);
		uint32_t len = get_u32(p + off);
		if (!all_zero(p, off + 4, off + CODEC_BATCH_RECORD_LEN))
			return yard_err_set(err, YARD_ECORRUPT,
			                    "batch command %u has non-zero reserved bytes", i + 1);
		off += CODEC_BATCH_RECORD_LEN;
		if (len > CODEC_MAX_PAYLOAD || pad8(len) > frame_len - off)
			return yard_err_set(
			    err, YARD_ECORRUPT,
			    "batch command %u says %u bytes, more than the frame holds", i + 1,
			    len);
		if (!all_zero(p, off + len, off + pad8(len)))
			return yard_err_set(err, YARD_ECORRUPT,
			                    "batch command %u padding is not zero", i + 1);
		payloads[i] = p + off;
		lens[i] = len;
		off += pad8(len);
	}
	if (off != frame_len)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "batch frame has %zu bytes after its %u commands",
		                    frame_len - off, count);
	*n = (int)count;
	*is_batch = 1;
	return 0;
}
