/* eta.c: a waiting job's start, estimated by playing the queue forward (eta.h). */
#include "scheduler/eta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* A placement try costs about this many node visits a node (place_gang orders the nodes,
 * measured against the passes that count free devices) */
#define ETA_TRY_COST 8

/* Devices that come free at a time: a holder's end, or the end of a job started in the
 * estimate (its slots are then owned). */
struct release {
	int64_t at;
	int order; /* ties keep the input's order */
	const char *id;
	const char *basis;
	const struct place_slot *slots;
	int n_slots;
};

static int release_cmp(const void *a, const void *b)
{
	const struct release *x = a, *y = b;
	if (x->at != y->at)
		return x->at < y->at ? -1 : 1;
	return x->order - y->order;
}

/* Frees r's devices; returns how many of them were busy and meet req (NULL: none count). */
static int release_apply(struct place_node *pn, int n_nodes, const struct release *r,
                         const struct place_request *req)
{
	int freed = 0;
	for (int k = 0; k < r->n_slots; k++) {
		const struct place_slot *sl = &r->slots[k];
		if (sl->node < 0 || sl->node >= n_nodes || sl->device < 0 ||
		    sl->device >= PLACE_MAX_DEVICES_PER_NODE)
			continue;
		uint64_t bit = 1ull << sl->device;
		struct place_node *nd = &pn[sl->node];
		if (req != NULL && (nd->busy_mask & bit) && sl->device < nd->n_devices &&
		    place_node_eligible(nd, req))
			freed++;
		nd->busy_mask &= ~bit;
	}
	return freed;
}

/* "A, B, C and 2 more" from the first n ids */
static void name_some(char *out, size_t len, const char *const *ids, int n)
{
	int shown = n < 3 ? n : 3;
	size_t used = 0;
	out[0] = '\0';
	for (int i = 0; i < shown && used < len; i++) {
		int w = snprintf(out + used, len - used, "%s%s",
		                 i == 0                         ? ""
		                 : i == shown - 1 && n == shown ? " and "
		                                                : ", ",
		                 ids[i]);
		used += w > 0 ? (size_t)w : 0;
	}
	if (n > shown && used < len)
		snprintf(out + used, len - used, " and %d more", n - shown);
}

/* Why the estimate stops at a job that would fit once devices nobody is expected to free
 * came free: who holds them (waiter is the job ahead that got stuck, NULL: the job asked
 * about itself). */
static void why_stuck(struct eta_result *out, const char *waiter, const char *const *unknown,
                      int n_unknown)
{
	char names[120];
	name_some(names, sizeof names, unknown, n_unknown);
	char who[64] = "it";
	if (waiter != NULL)
		snprintf(who, sizeof who, "job %s ahead of it", waiter);
	if (n_unknown == 0)
		snprintf(out->why, sizeof out->why,
		         "no estimate: %s needs devices of placements still under way", who);
	else
		snprintf(
		    out->why, sizeof out->why,
		    "no estimate: %s needs devices held by jobs with no expected end (neither a "
		    "time limit nor a step rate yet): %s",
		    who, names);
}

int eta_estimate(const struct place_node *nodes, int n_nodes, const struct eta_holder *holders,
                 int n_holders, const struct eta_waiter *waiters, int n_waiters, int64_t now_ms,
                 int64_t max_work, struct eta_result *out)
{
	out->start_ms = ETA_UNKNOWN;
	out->why[0] = '\0';
	if (n_waiters < 1 || n_nodes < 0 || n_holders < 0)
		return YARD_EINVAL;
	int cap = n_holders + n_waiters;
	struct place_node *pn = malloc((size_t)(n_nodes > 0 ? n_nodes : 1) * sizeof *pn);
	struct release *rel = malloc((size_t)cap * sizeof *rel);
	const char **unknown = malloc((size_t)cap * sizeof *unknown);
	/* slots of the jobs started in the estimate, freed at the end */
	struct place_slot **owned = calloc((size_t)n_waiters, sizeof *owned);
	int rc = YARD_ENOMEM;
	if (pn == NULL || rel == NULL || unknown == NULL || owned == NULL)
		goto out;
	if (n_nodes > 0)
		memcpy(pn, nodes, (size_t)n_nodes * sizeof *pn);
	int n_rel = 0, n_unknown = 0;
	for (int h = 0; h < n_holders; h++) {
		if (holders[h].end_ms == ETA_UNKNOWN) {
			unknown[n_unknown++] = holders[h].id;
			continue;
		}
		rel[n_rel++] =
		    (struct release){.at = holders[h].end_ms < now_ms ? now_ms : holders[h].end_ms,
		                     .order = h,
		                     .id = holders[h].id,
		                     .basis = holders[h].basis,
		                     .slots = holders[h].slots,
		                     .n_slots = holders[h].n_slots};
	}
	qsort(rel, (size_t)n_rel, sizeof *rel, release_cmp);
	int next = 0; /* rel[0 .. next-1] are applied */
	int64_t t = now_ms, work = 0;
	const struct release *last = NULL; /* the latest release applied */
	for (int i = 0; i < n_waiters; i++) {
		const struct eta_waiter *w = &waiters[i];
		int target = i == n_waiters - 1;
		int world = w->req.dp * w->req.tp * w->req.pp;
		if (world <= 0) {
			rc = YARD_EINVAL;
			goto out;
		}
		while (next < n_rel && rel[next].at <= t) {
			work += rel[next].n_slots;
			release_apply(pn, n_nodes, last = &rel[next++], NULL);
		}
		work += n_nodes;
		if (!place_fits_empty(pn, n_nodes, &w->req)) {
			if (target)
				snprintf(
				    out->why, sizeof out->why,
				    "no estimate: it would not fit even with every device free");
			continue; /* a job ahead that can never start holds nothing */
		}
		struct place_slot *slots = malloc((size_t)world * sizeof *slots);
		if (slots == NULL)
			goto out;
		owned[i] = slots;
		char reason[160];
		/* the free devices that meet its request, kept as releases come: a placement is
		 * tried (a pass over the nodes) only once there are enough of them */
		int have = 0;
		for (int n = 0; n < n_nodes; n++)
			have += place_node_free(&pn[n], &w->req);
		work += n_nodes;
		for (;;) {
			if (have >= world) {
				work += ETA_TRY_COST * (n_nodes > 0 ? n_nodes : 1);
				if (work > max_work)
					break;
				if (place_gang(pn, n_nodes, &w->req, slots, reason,
				               (int)sizeof reason) == 0)
					break;
			}
			if (next >= n_rel) {
				why_stuck(out, target ? NULL : w->id, unknown, n_unknown);
				rc = 0;
				goto out;
			}
			t = rel[next].at;
			while (next < n_rel && rel[next].at <= t) {
				work += rel[next].n_slots;
				have += release_apply(pn, n_nodes, last = &rel[next++], &w->req);
			}
		}
		if (work > max_work) {
			snprintf(
			    out->why, sizeof out->why,
			    "no estimate: playing the queue forward to it would take more than "
			    "%lld node visits",
			    (long long)max_work);
			rc = 0;
			goto out;
		}
		if (target) {
			out->start_ms = t;
			if (last == NULL || t <= now_ms)
				snprintf(out->why, sizeof out->why,
				         "devices for it are free now (unless a job ahead of it or "
				         "placed meanwhile takes them)");
			else
				snprintf(out->why, sizeof out->why, "when job %s ends (%s)",
				         last->id, last->basis);
			break;
		}
		if (w->duration_ms <= 0) {
			unknown[n_unknown++] = w->id;
			continue;
		}
		/* keep rel sorted: the new end is after every release applied (they are ≤ t) */
		struct release r = {.at = t + w->duration_ms,
		                    .order = n_holders + i,
		                    .id = w->id,
		                    .basis = "its time limit, from the start estimated for it",
		                    .slots = slots,
		                    .n_slots = world};
		int k = n_rel++;
		while (k > next && release_cmp(&rel[k - 1], &r) > 0) {
			rel[k] = rel[k - 1];
			k--;
		}
		rel[k] = r;
	}
	rc = 0;
out:
	if (owned != NULL)
		for (int i = 0; i < n_waiters; i++)
			free(owned[i]);
	free(owned);
	free(unknown);
	free(rel);
	free(pn);
	return rc;
}
