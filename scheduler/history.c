/* history.c: see history.h. Each job keeps its steps in a ring ordered by step; a step's
 * per-rank compute times are a float array sized to the job's rank count, with NaN for
 * "not reported". The cells budget bounds a job's memory whatever its rank count. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/history.h"

#define HISTORY_CELLS (256 * 1024) /* compute-time cells per job: 1 MiB of floats */

struct hstep {
	int64_t step, generation;
	int has_loss;
	double loss, step_ms;
	float *compute; /* nranks entries, NaN where unknown */
	int ncompute;
};

struct hjob {
	char id[64];
	int64_t generation;
	uint64_t updated_ms;
	int nranks; /* highest rank seen + 1 */
	struct hstep *ring;
	int head, count; /* ring[head] is the oldest step */
};

struct history {
	struct hjob jobs[HISTORY_JOBS];
	int n;
};

struct history *history_create(void)
{
	return calloc(1, sizeof(struct history));
}

static void job_free(struct hjob *j)
{
	for (int i = 0; i < j->count; i++)
		free(j->ring[(j->head + i) % HISTORY_STEPS].compute);
	free(j->ring);
	memset(j, 0, sizeof *j);
}

void history_clear(struct history *h)
{
	for (int i = 0; i < h->n; i++)
		job_free(&h->jobs[i]);
	h->n = 0;
}

void history_destroy(struct history *h)
{
	if (h == NULL)
		return;
	history_clear(h);
	free(h);
}

static struct hstep *step_at(const struct hjob *j, int i)
{
	return &j->ring[(j->head + i) % HISTORY_STEPS];
}

static struct hjob *job_get(struct history *h, const char *id, uint64_t now_ms)
{
	for (int i = 0; i < h->n; i++)
		if (strcmp(h->jobs[i].id, id) == 0)
			return &h->jobs[i];
	struct hjob *j;
	if (h->n < HISTORY_JOBS) {
		j = &h->jobs[h->n];
	} else { /* evict the least recently updated job */
		j = &h->jobs[0];
		for (int i = 1; i < h->n; i++)
			if (h->jobs[i].updated_ms < j->updated_ms)
				j = &h->jobs[i];
		job_free(j);
	}
	j->ring = calloc(HISTORY_STEPS, sizeof *j->ring);
	if (j->ring == NULL)
		return NULL;
	if (j == &h->jobs[h->n])
		h->n++;
	snprintf(j->id, sizeof j->id, "%s", id);
	j->updated_ms = now_ms;
	return j;
}

static void drop_oldest(struct hjob *j)
{
	free(step_at(j, 0)->compute);
	memset(step_at(j, 0), 0, sizeof(struct hstep));
	j->head = (j->head + 1) % HISTORY_STEPS;
	j->count--;
}

static void drop_newest(struct hjob *j)
{
	struct hstep *e = step_at(j, j->count - 1);
	free(e->compute);
	memset(e, 0, sizeof *e);
	j->count--;
}

/* The entry of step, appending it when it is newer than every entry; NULL when it is older
 * and was never recorded (heartbeats sample) or memory ran out. */
static struct hstep *entry_for(struct hjob *j, int64_t step, int64_t generation)
{
	int lo = 0, hi = j->count - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		int64_t s = step_at(j, mid)->step;
		if (s == step)
			return step_at(j, mid);
		if (s < step)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	if (j->count > 0 && step < step_at(j, j->count - 1)->step)
		return NULL;
	int keep = HISTORY_CELLS / (j->nranks > 0 ? j->nranks : 1);
	if (keep > HISTORY_STEPS)
		keep = HISTORY_STEPS;
	while (j->count >= keep)
		drop_oldest(j);
	struct hstep *e = step_at(j, j->count);
	memset(e, 0, sizeof *e);
	e->step = step;
	e->generation = generation;
	j->count++;
	return e;
}

void history_record(struct history *h, const char *job, int64_t generation, int rank, int64_t step,
                    int has_loss, double loss, double step_ms, double compute_ms, uint64_t now_ms)
{
	if (h == NULL || job == NULL || rank < 0 || rank >= HISTORY_RANKS || step < 1)
		return;
	struct hjob *j = job_get(h, job, now_ms);
	if (j == NULL || generation < j->generation)
		return; /* a rank of a generation already replaced */
	j->generation = generation;
	j->updated_ms = now_ms;
	if (rank + 1 > j->nranks)
		j->nranks = rank + 1;
	/* a restore went back: steps recorded by older generations after this one are gone */
	while (j->count > 0 && step_at(j, j->count - 1)->generation < generation &&
	       step_at(j, j->count - 1)->step >= step)
		drop_newest(j);
	struct hstep *e = entry_for(j, step, generation);
	if (e == NULL)
		return;
	if (has_loss && !e->has_loss && isfinite(loss)) {
		e->has_loss = 1;
		e->loss = loss;
	}
	if (step_ms >= 0 && e->step_ms <= 0)
		e->step_ms = step_ms;
	if (compute_ms < 0 || !isfinite(compute_ms))
		return;
	if (rank >= e->ncompute) {
		int n = j->nranks > rank + 1 ? j->nranks : rank + 1;
		float *grown = realloc(e->compute, (size_t)n * sizeof *grown);
		if (grown == NULL)
			return;
		for (int i = e->ncompute; i < n; i++)
			grown[i] = NAN;
		e->compute = grown;
		e->ncompute = n;
	}
	e->compute[rank] = (float)compute_ms;
}

json_t *history_json(const struct history *h, const char *job, int64_t after_step, int limit,
                     int64_t batch_size)
{
	const struct hjob *j = NULL;
	for (int i = 0; h != NULL && i < h->n; i++)
		if (strcmp(h->jobs[i].id, job) == 0)
			j = &h->jobs[i];
	if (j == NULL)
		return NULL;
	int first = 0;
	while (first < j->count && step_at(j, first)->step <= after_step)
		first++;
	if (limit > 0 && j->count - first > limit)
		first = j->count - limit;
	json_t *steps = json_array();
	for (int i = first; i < j->count; i++) {
		const struct hstep *e = step_at(j, i);
		json_t *compute = json_array();
		for (int r = 0; r < j->nranks; r++)
			json_array_append_new(compute, r < e->ncompute && !isnan(e->compute[r])
			                                   ? json_real(e->compute[r])
			                                   : json_null());
		json_t *o =
		    json_pack("{s:I,s:o,s:o,s:o,s:o}", "step", (json_int_t)e->step, "loss",
		              e->has_loss ? json_real(e->loss) : json_null(), "step_ms",
		              e->step_ms > 0 ? json_real(e->step_ms) : json_null(), "samples_per_s",
		              e->step_ms > 0 && batch_size > 0
		                  ? json_real((double)batch_size * 1000.0 / e->step_ms)
		                  : json_null(),
		              "compute_ms", compute);
		json_array_append_new(steps, o);
	}
	return json_pack("{s:s,s:I,s:o}", "job", j->id, "generation", (json_int_t)j->generation,
	                 "steps", steps);
}
