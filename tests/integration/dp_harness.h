/* dp_harness.h: runs a function in N forked ranks that form a communicator through a
 * rendezvous file in a fresh temp dir (each rank binds port 0 itself: no port races). */
#ifndef DP_HARNESS_H
#define DP_HARNESS_H

#include <sys/types.h>

#include "dataplane/yd.h"

struct dp_spawn {
	int world;
	const char *hosts;     /* YARD_HOSTS, or NULL */
	const char *transport; /* YARD_TRANSPORT, or NULL */
	int timeout_ms;        /* communicator deadline */
	int wall_s;            /* kill everything after this long */
	int kill_rank;         /* -1, or the rank SIGKILLed kill_after_ms after every rank is up */
	int kill_after_ms;
	int skip_rank; /* -1, or a rank never started (missing at init) */
};

/* Per-rank body: returns 0 on success; the rank exits with that status. */
typedef int (*dp_rank_fn)(yd_comm *c, void *arg);

/* Forks the ranks, runs fn in each, waits. Returns the number of ranks that failed (exit
 * status != 0, or killed by the harness deadline); status[r] gets rank r's exit code (or
 * -signal). init_fn, when set, replaces comm creation (it gets c = NULL). */
int dp_spawn_run(const struct dp_spawn *sp, dp_rank_fn fn, void *arg, int *status);

/* Runs the ranks expecting communicator creation to fail with an error containing want (a
 * bad environment variable, named with its value); 0 when every rank saw that. */
int dp_spawn_refused(const struct dp_spawn *sp, const char *want, int *status);

/* Milliseconds the last dp_spawn_run took from the kill to the last survivor's exit. */
extern long dp_spawn_last_kill_to_exit_ms;

#define DP_CHECK(cond, ...)                                                                        \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "rank check failed at %s:%d: ", __FILE__, __LINE__);       \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

#endif
