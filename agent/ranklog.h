/* ranklog.h: one rank's log file on the agent, as a stream of bytes with offsets: rotation
 * (copy-truncate, so the O_APPEND descriptor the rank's shim writes to stays valid) and the next
 * piece to send to the leader. Offsets count every byte the rank wrote since its generation
 * started, across rotations: FILE holds [base, base + size), FILE.1 the bytes rotated out last,
 * [rot_start, rot_start + rot_len). A piece the leader has not acknowledged is sent again;
 * bytes rotated out twice before they could be sent are a gap the leader reports.
 * No libuv here: plain files, so it is tested on its own (tests/unit/test_ranklog.c). */
#ifndef YARD_AGENT_RANKLOG_H
#define YARD_AGENT_RANKLOG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

struct rank_log {
	char path[PATH_MAX];
	int64_t base;
	int64_t rot_start, rot_len;
	int64_t shipped;     /* every byte before this reached the leader */
	int64_t pending_end; /* end of the piece in the heartbeat in flight; -1: none */
};

/* A log at path, nothing written or sent yet. */
void rank_log_init(struct rank_log *l, const char *path);

/* Offset one past the last byte written so far. */
int64_t rank_log_end(const struct rank_log *l);

/* Copies FILE to FILE.1 and truncates FILE when it is over max_bytes. Returns 1 when it
 * rotated, 0 when not needed or when a writer held the lock every time it was tried (the
 * next call tries again), -1 on an I/O error (the log is left as it was). The end of the
 * copy and the truncation happen under an exclusive flock(2) of FILE: a writer that holds
 * a shared one around each write (rank_log_write) loses nothing; bytes that a writer
 * without the lock writes in that window (microseconds) are lost, and the offsets of later
 * bytes stay right. */
int rank_log_rotate(struct rank_log *l, int64_t max_bytes);

/* Writes len bytes to the log open as fd under a shared flock(2), so that a rotation never
 * truncates them away (the rank's shim writes the rank's output this way). Returns 0, or -1
 * when not every byte could be written (errno says why). */
int rank_log_write(int fd, const void *data, size_t len);

/* The next piece to send: at most max bytes from offset *offset (at or after shipped; later
 * when bytes were rotated away) into buf. Returns its length, 0 when everything is sent. */
size_t rank_log_next(const struct rank_log *l, size_t max, int64_t *offset, char *buf);

/* After a leader change: send again at most the last tail bytes (the new leader holds no
 * output). Never moves forward. */
void rank_log_rewind(struct rank_log *l, int64_t tail);

#endif
