/* snapbuf.h: memory for snapshot copies, allocated and touched off the loop thread.
 *
 * raft 0.15 with raft_uv takes a snapshot synchronously on the loop (no asynchronous FSM
 * snapshots: raft-probe.md §3), and the copy of the database it needs is mostly page
 * faults when it lands in fresh memory: 200 MB took 550-700 ms here, several election
 * timeouts, against ~20 ms into memory already touched. The consensus module asks for a
 * buffer a little before raft's threshold comes due (snapbuf_prepare); a worker thread
 * allocates and touches it; the snapshot copies into it (snapbuf_take); once raft has
 * written it, the worker frees it (snapbuf_release), so the unmapping is off the loop too.
 *
 * Every function is called from one thread (the loop's); the worker is private. */
#ifndef YARD_RAFT_SNAPBUF_H
#define YARD_RAFT_SNAPBUF_H

#include <pthread.h>
#include <stddef.h>

#define SNAPBUF_FREE_MAX 4

struct snapbuf {
	int inited;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	int started, stop;
	size_t want;   /* a buffer of this size is asked for and not begun (0: none) */
	int preparing; /* the worker is allocating and touching one, of preparing_cap bytes */
	size_t preparing_cap;
	void *ready; /* prepared and touched, not taken */
	size_t ready_cap;
	void *to_free[SNAPBUF_FREE_MAX];
	int n_free;
	/* counters (read on the loop thread under mu, or after destroy) */
	unsigned long prepared, failed;
};

void snapbuf_init(struct snapbuf *b);

/* Asks for a buffer of cap bytes, touched page by page, to be ready for the next take.
 * Does nothing when one at least that big is ready or being prepared. */
void snapbuf_prepare(struct snapbuf *b, size_t cap);

/* The prepared buffer (its size in *cap), waiting for a preparation under way: never
 * longer than allocating on the caller's thread would have taken. NULL when none was asked
 * for or it could not be had. The caller owns it (realloc may grow it: the prepared pages
 * move, only the new ones are touched for the first time); give it back with
 * snapbuf_release. */
void *snapbuf_take(struct snapbuf *b, size_t *cap);

/* Frees p (from snapbuf_take or malloc) on the worker, or here when it cannot. */
void snapbuf_release(struct snapbuf *b, void *p);

/* Stops the worker (after what it is doing) and frees everything it held. */
void snapbuf_destroy(struct snapbuf *b);

#endif
