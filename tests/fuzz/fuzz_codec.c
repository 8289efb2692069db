/* fuzz_codec.c: a raft entry as a member reads it from its log or a peer: codec_decode_entry.
 * Properties of an accepted frame: it encodes back to the same bytes (version 1 through
 * codec_encode, version 2 through codec_batch_encode), and a version-1 frame decodes the same
 * through codec_decode. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "jobs/codec.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const void *payloads[CODEC_BATCH_MAX];
	static size_t lens[CODEC_BATCH_MAX];
	int n = 0, is_batch = 0;
	struct yard_err err = {0};
	if (codec_decode_entry(data, size, payloads, lens, CODEC_BATCH_MAX, &n, &is_batch, &err) !=
	    0)
		return 0;
	if (n < 1 || n > CODEC_BATCH_MAX || (!is_batch && n != 1))
		fuzz_fail("accepted %d payload(s), batch %d", n, is_batch);
	for (int i = 0; i < n; i++)
		if ((const uint8_t *)payloads[i] < data ||
		    (const uint8_t *)payloads[i] + lens[i] > data + size)
			fuzz_fail("payload %d points outside the frame", i);
	size_t want = is_batch ? codec_batch_len(lens, n) : codec_frame_len(lens[0]);
	if (want != size)
		fuzz_fail("accepted %zu bytes, its encoding has %zu", size, want);
	uint8_t *again = malloc(want);
	if (is_batch)
		codec_batch_encode(again, payloads, lens, n);
	else
		codec_encode(again, payloads[0], lens[0]);
	if (memcmp(again, data, size) != 0)
		fuzz_fail("an accepted frame of %zu bytes encodes to other bytes", size);
	free(again);
	if (!is_batch) {
		const void *p;
		size_t len;
		if (codec_decode(data, size, &p, &len, &err) != 0 || p != payloads[0] ||
		    len != lens[0])
			fuzz_fail("codec_decode disagrees with codec_decode_entry");
	}
	return 0;
}
