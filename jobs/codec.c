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
