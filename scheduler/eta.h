/* eta.h: when a waiting job may start, estimated by playing the queue forward on the
 * placement view (research/orchestrators.md G12: queue position and an ETA estimate; Slurm's
 * `squeue --start`).
 *
 * Pure function over plain arrays, like place.h and queue.h. The input is the cluster as the
 * leader sees it now: the nodes with their busy devices, the holders of devices (running
 * jobs) each with the time it is expected to end (its time limit, or its steps left at its
 * measured step rate; ETA_UNKNOWN: no expected end, its devices never come back in the
 * estimate), and the waiting jobs in queue order, the one asked about last. Each waiting job
 * starts, in order, at the earliest expected end (not before the job ahead of it started) at
 * which place_gang fits it, so gangs and tensor-parallel groups count exactly as the
 * scheduler counts them; a job started in the estimate with a time limit frees its devices
 * again at its end, one without holds them for good.
 *
 * What an estimate leaves out, and why it is one: backfill (a smaller job behind may start
 * first, or a job ahead that does not fit yet may be passed), preemption, jobs submitted
 * later with a higher priority, nodes that come, go or are cordoned, restarts, and ends that
 * come earlier or later than expected.
 */
#ifndef YARD_SCHED_ETA_H
#define YARD_SCHED_ETA_H

#include <stdint.h>

#include "scheduler/place.h"

#define ETA_UNKNOWN INT64_MAX
#define ETA_WHY_MAX 240
#define ETA_BASIS_MAX 80

/* Devices held until end_ms (wall clock ms; ETA_UNKNOWN: no expected end). */
struct eta_holder {
	const char *id;                 /* a job id, named in the explanation */
	int64_t end_ms;                 /* before now: ends now */
	char basis[ETA_BASIS_MAX];      /* how end_ms was found: "its time limit" */
	const struct place_slot *slots; /* node index, device on that node */
	int n_slots;
};

struct eta_waiter {
	const char *id;
	struct place_request req;
	int64_t duration_ms; /* how long it runs at most once started (its time limit); 0: none */
};

struct eta_result {
	int64_t start_ms; /* ETA_UNKNOWN: no estimate (why says why) */
	char why[ETA_WHY_MAX];
};

/* Estimates when waiters[n_waiters - 1] starts; waiters[0 .. n_waiters - 2] are ahead of it.
 * nodes are not changed. max_work bounds the work in node visits (a pass over the nodes
 * counts n_nodes, a placement try 8 times that, a release its devices); past it the answer is no
 * estimate, saying so. Returns 0, or YARD_ENOMEM / YARD_EINVAL. */
int eta_estimate(const struct place_node *nodes, int n_nodes, const struct eta_holder *holders,
                 int n_holders, const struct eta_waiter *waiters, int n_waiters, int64_t now_ms,
                 int64_t max_work, struct eta_result *out);

#endif
