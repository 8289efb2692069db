/* yd_harness.h: runs a function as N real ranks (forked processes on 127.0.0.1) that meet
 * through a rendezvous file in a fresh mkdtemp directory, so parallel tests never share a
 * port. A rank passes by returning 0; it explains a failure on stderr. */
#ifndef YD_HARNESS_H
#define YD_HARNESS_H

#include "dataplane/yd.h"

struct harness_rank {
	int rank, world;
	yd_comm *comm;
	void *arg;
};

typedef int (*harness_fn)(struct harness_rank *h);

struct harness_opts {
	int world;
	const char *hosts;     /* YARD_HOSTS (comma-separated labels) or NULL */
	const char *transport; /* YARD_TRANSPORT or NULL */
	int timeout_ms;        /* YARD_TIMEOUT_MS; 0 = 2000 */
	int wall_limit_s; /* the whole world is killed (a hang = failure) after this; 0 = 120 */
	int skip_init;    /* fn calls yd_comm_init_env itself (h->comm is NULL) */
	int absent_rank;  /* this rank is never started (-1: none) */
};

/* Forks opts->world ranks running fn; returns the number of ranks that failed (a rank that
 * dies by SIGKILL counts as passed when fn raised it on purpose: see harness_expect_kill). */
int harness_run(const struct harness_opts *opts, harness_fn fn, void *arg);

/* Called by a rank about to kill itself, so the parent does not count it as a failure. */
void harness_expect_kill(void);

/* Deterministic small integer test value for (rank, index, salt) in [-5, 5]. */
int harness_value(int rank, size_t i, int salt);

#endif
