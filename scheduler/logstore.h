/* logstore.h: the leader's copy of what ranks print (`yardctl job logs`).
 *
 * A stream is the output of one rank in one generation (job, rank, generation), numbered as
 * the agent that runs it numbers its bytes: offset 0 is the first byte that generation of the
 * rank wrote. Agents send pieces of streams with their offsets in heartbeats; the store keeps
 * per stream a sorted list of non-overlapping byte ranges, so a piece that arrives twice (a
 * heartbeat retried, the tail every agent resends to a new leader) is stored once, and bytes
 * that never arrived are a gap that a reader is told about ("skipped"), never papered over.
 *
 * Bounds: per (job, rank), every generation together, at most rank_max_bytes (the oldest
 * generation loses its oldest bytes first); all streams together at most total_max_bytes
 * (the stream written least recently loses bytes first); at most LOGSTORE_MAX_STREAMS
 * streams. Bytes below what a stream has dropped are not taken again.
 *
 * This is soft state: nothing is replicated, and a new leader starts empty. Not thread-safe.
 */
#ifndef YARD_SCHED_LOGSTORE_H
#define YARD_SCHED_LOGSTORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define LOGSTORE_MAX_STREAMS 4096
#define LOGSTORE_JOB_MAX 31
#define LOGSTORE_NODE_MAX 63

struct logstore_limits {
	size_t rank_max_bytes;  /* default 1 MiB */
	size_t total_max_bytes; /* default 64 MiB */
};

struct logstore;

struct logstore *logstore_create(const struct logstore_limits *limits);
void logstore_destroy(struct logstore *ls);
/* Drops every stream (leadership lost). */
void logstore_clear(struct logstore *ls);

/* Adds len bytes that start at offset of stream (job, rank, generation), sent by node
 * (copied). Bytes the stream already holds, or below what it dropped, are ignored. Returns
 * how many bytes were newly stored, or a negative YARD_E* code (YARD_EINVAL for a negative
 * offset or an over-long job id, YARD_ENOMEM). */
long logstore_add(struct logstore *ls, const char *job, int rank, int64_t generation,
                  const char *node, int64_t offset, const void *data, size_t len);

struct logstore_read {
	int64_t offset;       /* where data starts: the offset asked for, or the next byte held */
	int64_t skipped;      /* bytes between the offset asked for and offset that are not held */
	int64_t next_offset;  /* offset + len: where to read next */
	int64_t first_offset; /* the lowest offset held (or dropped up to, when nothing is held) */
	int64_t end_offset;   /* one past the highest byte held */
	char node[LOGSTORE_NODE_MAX + 1];
	char *data; /* len bytes, malloc'd (caller frees; NULL when len is 0) */
	size_t len;
};

/* Reads at most max bytes of stream (job, rank, generation) at or after offset: from the
 * first range held that ends after offset, up to the next gap. Reading past the end gives
 * no data and next_offset = offset. Returns 0, or YARD_ENOTFOUND for an unknown stream,
 * YARD_ENOMEM. */
int logstore_read(struct logstore *ls, const char *job, int rank, int64_t generation,
                  int64_t offset, size_t max, struct logstore_read *out);

/* The streams of a job: [{"rank", "generation", "node", "first_offset", "end_offset",
 * "bytes"}], by rank then generation (new reference). */
json_t *logstore_streams(const struct logstore *ls, const char *job);

/* The newest generation held for (job, rank), -1 when none. */
int64_t logstore_latest_generation(const struct logstore *ls, const char *job, int rank);

/* Bytes held by every stream together. */
size_t logstore_bytes(const struct logstore *ls);

/* Raw bytes as a JSON string: invalid UTF-8 becomes U+FFFD; a multi-byte character cut at
 * the end is left out (*used < len) so the next read starts with it, unless nothing else
 * is there. *used: how many input bytes the string covers. New reference. */
json_t *logstore_text(const char *data, size_t len, size_t *used);

#endif
