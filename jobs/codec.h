/* codec.h: the binary frame every replicated command travels in.
 *
 * raft 0.15 corrupts entries whose payload length is not a multiple of 8
 * (shared/research/raft-probe.md §4.1), so a frame is a 16-byte header followed by the
 * payload and zero padding up to the next multiple of 8:
 *
 *   offset 0  u32 magic "YCMD" (little-endian 0x444d4359)
 *   offset 4  u16 version (CODEC_VERSION)
 *   offset 6  u16 flags (0)
 *   offset 8  u32 payload length in bytes
 *   offset 12 u32 reserved (0)
 *   offset 16 payload, then 0..7 zero bytes
 *
 * The payload is the command JSON ({op, args, request_id, ts, actor}); this file does not
 * look inside it. The codec writes into caller memory so raft can own the buffer. */
#ifndef YARD_JOBS_CODEC_H
#define YARD_JOBS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define CODEC_MAGIC 0x444d4359u
#define CODEC_VERSION 1
#define CODEC_HEADER_LEN 16
#define CODEC_MAX_PAYLOAD (16u << 20)

/* Bytes a frame for a payload of payload_len bytes occupies: always a multiple of 8. */
size_t codec_frame_len(size_t payload_len);
/* Writes the frame into out[0..codec_frame_len(payload_len)). */
void codec_encode(void *out, const void *payload, size_t payload_len);
/* Checks a frame and points *payload into it. Rejects a wrong magic, version or length,
 * a length that is not a multiple of 8 and non-zero padding, with err naming the fault. */
int codec_decode(const void *frame, size_t frame_len, const void **payload, size_t *payload_len,
                 struct yard_err *err);

#endif
