/* sched_world.h: the leader's scheduler (scheduler/leader.h) over a fake raft and fake
 * clocks, for test_leader and the heartbeat fuzz target: a real in-memory state machine,
 * every proposal applied to it at once, time moved by the caller (mono and wall), node-a and
 * node-b registered with 4 CPU devices each, and the scheduler leading. */
#ifndef YARD_TESTS_SCHED_WORLD_H
#define YARD_TESTS_SCHED_WORLD_H

#include <stdint.h>
#include <uv.h>

#include "jobs/fsm.h"
#include "scheduler/leader.h"

struct sched_world {
	struct fsm fsm;
	uint64_t mono;    /* the scheduler's monotonic clock, ms */
	int64_t wall;     /* the clock commands are stamped with, ms */
	uint64_t applied; /* commands applied: the fake raft's applied index */
	uv_loop_t loop;
	struct sched *sched;
	int propose_status; /* nonzero: every proposal fails with this status (a lost leadership) */
	int flushes;        /* io.flush calls, and w->applied at the last one */
	uint64_t applied_at_flush;
	/* hold: proposals wait, in order, until sched_world_release commits them (raft's
	 * commit, late); max_held: the most that waited at once */
	int hold, n_held, cap_held, max_held;
	struct sched_world_held *held;
};

/* Starts w (queue_depth: sched_config.queue_depth, tick_ms 0: the caller ticks). 0, or -1
 * with why set when the state machine does not start or a node does not register. */
int sched_world_init(struct sched_world *w, int queue_depth, char *why, size_t why_len);
void sched_world_close(struct sched_world *w);
/* Registers node-<'a' + n> (host 10.0.0.<n + 1>, 4 CPU devices): the status. */
int sched_world_add_node(struct sched_world *w, int n);
/* The same with labels (a JSON object's text; NULL: none); again for a registered node: a
 * re-registration, which replaces its labels. */
int sched_world_add_node_labelled(struct sched_world *w, int n, const char *labels);
/* Replaces w's scheduler by one with cfg (tick_ms set to 0: the caller ticks), leading. */
void sched_world_restart(struct sched_world *w, struct sched_config *cfg);
/* The fake raft and clocks of w, for another scheduler on the same state machine. */
struct sched_io sched_world_io(struct sched_world *w);
/* Commits the proposals held (w->hold), in order, with the ones they lead to while it runs:
 * how many. */
int sched_world_release(struct sched_world *w);
/* Applies op with args (JSON object text) as admin "test", as raft would: the result's
 * status, or -1 when args do not parse. */
int sched_world_apply(struct sched_world *w, const char *op, const char *args);

#endif
