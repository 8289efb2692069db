/* queue.c: the scheduling pass (see queue.h). */
#include "scheduler/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

static int queue_cmp(const void *a, const void *b)
{
	const struct queue_job *x = a, *y = b;
	if (x->priority != y->priority)
		return y->priority - x->priority;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return strcmp(x->id, y->id);
}

/* One gang through the pass's index, or node by node without one. */
static int try_place(struct place_index *index, struct place_node *nodes, int n_nodes,
                     const struct place_request *req, struct place_slot *slots,
                     char reason[QUEUE_REASON_MAX])
{
	return index != NULL ? place_index_gang(index, req, slots, reason, QUEUE_REASON_MAX)
	                     : place_gang(nodes, n_nodes, req, slots, reason, QUEUE_REASON_MAX);
}

/* Requests that failed in this pass since its last placement. A failed try leaves the
 * nodes as they were and a placement only takes devices, so until the next placement the
 * same request fails again, for the same reason: a queue of many identical jobs that do
 * not fit costs one try (and one whole-cluster check for the reservation), not one per
 * job. Cleared at each placement, since the reason's figures change. */
#define FAILED_MAX 8

struct failed {
	struct place_request req;
	int rc;
	int fits_empty; /* place_fits_empty for req; -1: not computed yet */
	char reason[QUEUE_REASON_MAX];
};

/* After a job's turn: a job that was tried and not placed keeps its held devices (hold) from
 * the jobs after it. Whether it holds any. */
static int hold_devices(struct place_index *index, struct place_node *nodes, int n_nodes,
                        const struct queue_job *job)
{
	if (!job->tried || job->placed || job->n_hold == 0)
		return 0;
	for (int k = 0; k < job->n_hold; k++) {
		int node = job->hold[k].node, device = job->hold[k].device;
		if (node < 0 || node >= n_nodes || device < 0 ||
		    device >= PLACE_MAX_DEVICES_PER_NODE)
			continue;
		if (index != NULL)
			place_index_hold(index, node, device);
		else if (device < nodes[node].n_devices)
			nodes[node].busy_mask |= 1ull << device;
	}
	return 1;
}

static int same_request(const struct place_request *a, const struct place_request *b)
{
	return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp &&
	       a->require_cuda == b->require_cuda && a->require_cpu == b->require_cpu &&
	       a->memory_mb == b->memory_mb;
}

static struct failed *failed_find(struct failed *f, int n, const struct place_request *req)
{
	for (int i = 0; i < n; i++)
		if (same_request(&f[i].req, req))
			return &f[i];
	return NULL;
}

int queue_pass(struct queue_job *jobs, int n_jobs, struct place_node *nodes, int n_nodes,
               const struct queue_policy *policy, int64_t now_ms)
{
	int placed = 0;
	const struct queue_job *reserving = NULL;
	struct failed failed[FAILED_MAX];
	int n_failed = 0, next_failed = 0;

	/* one index for the whole pass (place.h); without memory for it, node by node */
	struct place_index *index = place_index_build(nodes, n_nodes);
	/* callers usually hand the queue over in order already: check before sorting */
	int sorted = 1;
	for (int i = 1; i < n_jobs && sorted; i++)
		sorted = queue_cmp(&jobs[i - 1], &jobs[i]) <= 0;
	if (!sorted)
		qsort(jobs, (size_t)n_jobs, sizeof *jobs, queue_cmp);
	int attempts = 0;
	const char *held_for = NULL; /* the last job ahead that holds devices */
	for (int i = 0; i < n_jobs; i++) {
		struct queue_job *job = &jobs[i];
		if (i > 0 && hold_devices(index, nodes, n_nodes, &jobs[i - 1]))
			held_for = jobs[i - 1].id;
		job->position = i + 1;
		job->placed = 0;
		job->tried = 0;
		if ((policy->max_attempts > 0 && attempts >= policy->max_attempts) ||
		    (policy->max_placed > 0 && placed >= policy->max_placed))
			continue; /* beyond the depth: only its position is new */
		attempts++;
		job->tried = 1;
		job->repeated = 0;
		job->reason[0] = '\0';
		if (reserving != NULL) {
			snprintf(job->reason, sizeof job->reason,
			         "waiting behind %s, which holds the free devices after waiting "
			         "too long",
			         reserving->id);
			continue;
		}
		/* a job that may shrink tries its other sizes too: not repeated */
		struct failed *seen =
		    job->n_shrink_dp == 0 ? failed_find(failed, n_failed, &job->req) : NULL;
		if (seen != NULL) {
			job->repeated = 1;
			job->dp = job->req.dp;
			memcpy(job->reason, seen->reason, strlen(seen->reason) + 1);
			if (policy->reserve_after_ms > 0 &&
			    now_ms - job->pending_since_ms >= policy->reserve_after_ms) {
				if (seen->fits_empty < 0)
					seen->fits_empty =
					    place_fits_empty(nodes, n_nodes, &job->req);
				if (seen->fits_empty)
					reserving = job;
			}
			continue;
		}
		int world = job->req.dp * job->req.tp * job->req.pp;
		if (job->slots == NULL && world > 0 &&
		    (job->slots = calloc((size_t)world, sizeof *job->slots)) == NULL) {
			snprintf(job->reason, sizeof job->reason,
			         "out of memory for the placement of %d ranks", world);
			continue;
		}
		int rc = try_place(index, nodes, n_nodes, &job->req, job->slots, job->reason);
		job->dp = job->req.dp;
		for (int k = 0; rc == YARD_ENOSPACE && k < job->n_shrink_dp; k++) {
			struct place_request smaller = job->req;
			char why[QUEUE_REASON_MAX];
			smaller.dp = job->shrink_dp[k];
			rc = try_place(index, nodes, n_nodes, &smaller, job->slots, why);
			if (rc == 0)
				job->dp = smaller.dp;
			else if (k == job->n_shrink_dp - 1)
				snprintf(job->reason + strlen(job->reason),
				         sizeof job->reason - strlen(job->reason),
				         "; with dp %d (allow_shrink_dp): %s", smaller.dp, why);
		}
		if (rc == 0) {
			job->placed = 1;
			placed++;
			n_failed = next_failed = 0;
			continue;
		}
		if (held_for != NULL)
			snprintf(job->reason + strlen(job->reason),
			         sizeof job->reason - strlen(job->reason),
			         "; devices are held for job %s, which preempts for them",
			         held_for);
		struct failed *f = NULL;
		/* not a failure for memory: that one may not come again */
		if (job->n_shrink_dp == 0 && (rc == YARD_ENOSPACE || rc == YARD_EINVAL)) {
			f = &failed[next_failed];
			next_failed = (next_failed + 1) % FAILED_MAX;
			if (n_failed < FAILED_MAX)
				n_failed++;
			f->req = job->req;
			f->rc = rc;
			f->fits_empty = -1;
			memcpy(f->reason, job->reason, strlen(job->reason) + 1);
		}
		/* a gang larger than the whole cluster would hold the free devices forever */
		if (policy->reserve_after_ms > 0 &&
		    now_ms - job->pending_since_ms >= policy->reserve_after_ms) {
			int fits = place_fits_empty(nodes, n_nodes, &job->req);
			if (f != NULL)
				f->fits_empty = fits;
			if (fits)
				reserving = job;
		}
	}
	place_index_free(index);
	return placed;
}
