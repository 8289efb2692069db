/* queue.c: the scheduling pass (see queue.h). */
#include "scheduler/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int queue_cmp(const void *a, const void *b)
{
	const struct queue_job *x = a, *y = b;
	if (x->priority != y->priority)
		return y->priority - x->priority;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return strcmp(x->id, y->id);
}

int queue_pass(struct queue_job *jobs, int n_jobs, struct place_node *nodes, int n_nodes,
               const struct queue_policy *policy, int64_t now_ms)
{
	int placed = 0;
	const struct queue_job *reserving = NULL;

	/* one index for the whole pass (place.h); without memory for it, node by node */
	struct place_index *index = place_index_build(nodes, n_nodes);
	qsort(jobs, (size_t)n_jobs, sizeof *jobs, queue_cmp);
	for (int i = 0; i < n_jobs; i++) {
		struct queue_job *job = &jobs[i];
		job->position = i + 1;
		job->placed = 0;
		job->reason[0] = '\0';
		if (reserving != NULL) {
			snprintf(job->reason, sizeof job->reason,
			         "waiting behind %s, which holds the free devices after waiting "
			         "too long",
			         reserving->id);
			continue;
		}
		int rc = index != NULL ? place_index_gang(index, &job->req, job->slots, job->reason,
		                                          (int)sizeof job->reason)
		                       : place_gang(nodes, n_nodes, &job->req, job->slots,
		                                    job->reason, (int)sizeof job->reason);
		if (rc == 0) {
			job->placed = 1;
			placed++;
			continue;
		}
		if (policy->reserve_after_ms > 0 &&
		    now_ms - job->pending_since_ms >= policy->reserve_after_ms)
			reserving = job;
	}
	place_index_free(index);
	return placed;
}
