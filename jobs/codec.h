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
 * look inside it. The codec writes into caller memory so raft can own the buffer.
 *
 * Version 2 frames a batch: several commands in one raft entry, applied in order, each on
 * its own (the leader packs the commands that arrive within one loop iteration):
 *
 *   offset 0  u32 magic, u16 version 2, u16 flags (0)
 *   offset 8  u32 body length in bytes (a multiple of 8)
 *   offset 12 u32 command count (1..CODEC_BATCH_MAX)
 *   offset 16 body: per command, u32 payload length, u32 reserved (0), the payload, then
 *             zero bytes up to the next multiple of 8
 *
 * A single command always goes out as version 1, so a log written before batching existed
 * applies unchanged and a lone command costs no extra bytes. */
#ifndef YARD_JOBS_CODEC_H
#define YARD_JOBS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define CODEC_MAGIC 0x444d4359u
#define CODEC_VERSION 1
#define CODEC_VERSION_BATCH 2
#define CODEC_BATCH_MAX 1024
#define CODEC_BATCH_RECORD_LEN 8
#define CODEC_HEADER_LEN 16
#define CODEC_MAX_PAYLOAD (16u << 20)

/* Bytes a frame for a payload of payload_len bytes occupies: always a multiple of 8. */
size_t codec_frame_len(size_t payload_len);
/* Writes the frame into out[0..codec_frame_len(payload_len)). */
void codec_encode(void *out, const void *payload, size_t payload_len);
/* Checks a frame and points *payload into it. Rejects a wrong magic, version or length,
 * a length that is not a multiple of 8, non-zero flags, reserved bytes or padding, with err
 * naming the fault. */
int codec_decode(const void *frame, size_t frame_len, const void **payload, size_t *payload_len,
                 struct yard_err *err);

/* Bytes a version-2 frame for n payloads of lens[i] bytes occupies (a multiple of 8). */
size_t codec_batch_len(const size_t *lens, int n);
/* Writes a version-2 frame of n (1..CODEC_BATCH_MAX) payloads into
 * out[0..codec_batch_len(lens, n)). */
void codec_batch_encode(void *out, const void *const *payloads, const size_t *lens, int n);
/* Decodes a version-1 or version-2 frame into at most max payloads (pointers into frame):
 * *n is 1 and *is_batch 0 for version 1. Rejects what codec_decode rejects, plus a count of
 * 0 or over max, records that overrun the body, and non-zero reserved or padding bytes. */
int codec_decode_entry(const void *frame, size_t frame_len, const void **payloads, size_t *lens,
                       int max, int *n, int *is_batch, struct yard_err *err);

#endif
