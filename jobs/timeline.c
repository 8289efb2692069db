/* timeline.c: a job's life told from its events (timeline.h). */
#include "jobs/timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNSET INT64_MIN
/* The largest time (ms since the epoch, year 33,658) and step or generation believed: their
 * differences cannot overflow, and the sums saturate (sum_add). */
#define BELIEVED_MAX 1000000000000000LL

static void sum_add(int64_t *sum, int64_t v)
{
	*sum = v > INT64_MAX - *sum ? INT64_MAX : *sum + v;
}

struct interruption {
	int64_t generation;
	const char *kind;
	const char *cause;
	int cause_len; /* the cause is its first cause_len characters */
	int64_t detected, stopped, placed, running, first_step, reached_step, restored_step;
	int64_t
	    undetected; /* before detected, the time the leader heard nothing (UNSET: not said) */
};

static json_t *ms_or_null(int64_t v)
{
	return v == UNSET ? json_null() : json_integer(v);
}

/* The number after `key` in text ("(generation 2)": key "(generation "), or UNSET. */
static int64_t number_after(const char *text, const char *key)
{
	const char *p = text != NULL ? strstr(text, key) : NULL;
	if (p == NULL)
		return UNSET;
	char *end;
	long long v = strtoll(p + strlen(key), &end, 10);
	return end == p + strlen(key) || v < 0 || v > BELIEVED_MAX ? UNSET : (int64_t)v;
}

/* What an interruption's message says (jobs/fsm_cluster.c: "job J restarting (restart 1 of
 * 3): CAUSE; reached step N"): x's cause, what follows the first "): " (else the whole
 * message) up to JOB_REACHED, and its step reached (UNSET when the message names none). */
static void cause_of(const char *message, struct interruption *x)
{
	if (message == NULL)
		message = "";
	const char *p = strstr(message, "): ");
	x->cause = p != NULL ? p + 3 : message;
	const char *end = NULL;
	for (const char *q = x->cause; (q = strstr(q, JOB_REACHED)) != NULL; q++)
		end = q; /* the last: a cause may quote another message */
	x->reached_step = UNSET;
	if (end != NULL) {
		char *tail;
		long long v = strtoll(end + strlen(JOB_REACHED), &tail, 10);
		if (tail != end + strlen(JOB_REACHED) && *tail == '\0' && v >= 0 &&
		    v <= BELIEVED_MAX)
			x->reached_step = v;
		else
			end = NULL;
	}
	size_t len = end != NULL ? (size_t)(end - x->cause) : strlen(x->cause);
	x->cause_len = len > INT32_MAX ? INT32_MAX : (int)len;
}

/* The silence a cause names (scheduler/leader.c: "node down (no heartbeat for 3.1 s)", "made
 * no step progress for 61.0 s"), in ms, or UNSET. */
static int64_t silence_of(const struct interruption *x)
{
	static const char *const keys[] = {"(no heartbeat for ", "made no step progress for "};
	char cause[512];
	snprintf(cause, sizeof cause, "%.*s", x->cause_len, x->cause);
	for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
		const char *p = strstr(cause, keys[k]);
		if (p == NULL)
			continue;
		p += strlen(keys[k]);
		char *end;
		double secs = strtod(p, &end);
		if (end != p && strncmp(end, " s", 2) == 0 && secs >= 0 && secs < 1e9)
			return (int64_t)(secs * 1000 + 0.5);
	}
	return UNSET;
}

/* The steps done again after x: null unless both ends are known. */
static json_t *lost_steps(const struct interruption *x)
{
	if (x->reached_step == UNSET || x->restored_step == UNSET)
		return json_null();
	return json_integer(x->reached_step > x->restored_step ? x->reached_step - x->restored_step
	                                                       : 0);
}

struct totals {
	int64_t down, lost, undetected;
};

static int interruption_add(json_t *list, const struct interruption *x, int64_t until,
                            int recovered, int ongoing, struct totals *t)
{
	int64_t down = until - x->detected;
	if (down < 0)
		down = 0;
	sum_add(&t->down, down);
	if (x->undetected != UNSET)
		sum_add(&t->undetected, x->undetected);
	json_t *lost = lost_steps(x);
	sum_add(&t->lost, json_integer_value(lost)); /* 0 for null */
	return json_array_append_new(
	    list,
	    json_pack("{s:o,s:s,s:s#,s:o,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I,s:b,s:b}",
	              "generation", ms_or_null(x->generation), "kind", x->kind, "cause", x->cause,
	              (size_t)x->cause_len, "undetected_ms", ms_or_null(x->undetected),
	              "detected_ms", (json_int_t)x->detected, "stopped_ms", ms_or_null(x->stopped),
	              "placed_ms", ms_or_null(x->placed), "running_ms", ms_or_null(x->running),
	              "first_step_ms", ms_or_null(x->first_step), "reached_step",
	              ms_or_null(x->reached_step), "restored_step", ms_or_null(x->restored_step),
	              "lost_steps", lost, "down_ms", (json_int_t)down, "recovered", recovered,
	              "ongoing", ongoing));
}

json_t *job_timeline(const char *id, const json_t *events, int64_t now_ms)
{
	now_ms = now_ms < 0 ? 0 : now_ms > BELIEVED_MAX ? BELIEVED_MAX : now_ms;
	int64_t submitted = UNSET, placed = UNSET, running = UNSET, first_step = UNSET;
	int64_t ended = UNSET, generation = 0;
	struct totals totals = {0, 0, 0};
	int64_t progressing_from = UNSET; /* the job's first step since its last interruption */
	const char *end = NULL, *end_reason = NULL;
	int complete = 0, open = 0, rc = 0, seen = 0;
	struct interruption cur = {0};
	json_t *list = json_array();
	if (list == NULL)
		return NULL;
	size_t i;
	const json_t *e;
	json_array_foreach(events, i, e)
	{
		const char *type = json_string_value(json_object_get(e, "type"));
		const char *message = json_string_value(json_object_get(e, "message"));
		const json_t *ts_v = json_object_get(e, "ts_ms");
		if (type == NULL || strncmp(type, "job.", 4) != 0 || !json_is_integer(ts_v))
			continue;
		int64_t ts = json_integer_value(ts_v);
		if (ts < 0 || ts > BELIEVED_MAX)
			continue; /* not a time this project writes */
		type += 4;
		if (!seen++) /* the job's first event is its submission unless older were pruned */
			complete = strcmp(type, "submitted") == 0;
		if (strcmp(type, "submitted") == 0) {
			submitted = ts;
		} else if (strcmp(type, "restarting") == 0 || strcmp(type, "replacing") == 0) {
			if (open) /* interrupted again before a step: that one ends here */
				rc |= interruption_add(list, &cur, ts, 0, 0, &totals);
			cur = (struct interruption){
			    .generation = generation > 0 ? generation : UNSET,
			    .kind = strcmp(type, "replacing") == 0 ? "straggler"
			            : message != NULL && strstr(message, "not counted") != NULL
			                ? "move"
			                : "failure",
			    .detected = ts,
			    .stopped = UNSET,
			    .placed = UNSET,
			    .running = UNSET,
			    .first_step = UNSET,
			    .restored_step = UNSET};
			cause_of(message, &cur);
			/* the silence before the detection, as far as the job was progressing: not
			 * before its first step since the last interruption, not into one counted
			 */
			cur.undetected = silence_of(&cur);
			if (cur.undetected != UNSET) {
				int64_t most =
				    open || progressing_from == UNSET ? 0 : ts - progressing_from;
				cur.undetected = cur.undetected < most ? cur.undetected
				                 : most > 0            ? most
				                                       : 0;
			}
			progressing_from = UNSET;
			open = 1;
		} else if (strcmp(type, "stopped") == 0) {
			if (open && cur.stopped == UNSET)
				cur.stopped = ts;
		} else if (strcmp(type, "placed") == 0) {
			int64_t g = number_after(message, "(generation ");
			generation = g != UNSET ? g : generation + 1;
			if (placed == UNSET)
				placed = ts;
			if (open && cur.placed == UNSET) {
				cur.placed = ts;
				if (cur.generation == UNSET && g != UNSET) /* older events pruned */
					cur.generation = g - 1;
				cur.restored_step = number_after(message, "from checkpoint step ");
			}
		} else if (strcmp(type, "running") == 0) {
			if (running == UNSET)
				running = ts;
			if (open && cur.running == UNSET)
				cur.running = ts;
		} else if (strcmp(type, "progress") == 0) {
			if (first_step == UNSET)
				first_step = ts;
			if (progressing_from == UNSET)
				progressing_from = ts;
			if (open) {
				cur.first_step = ts;
				rc |= interruption_add(list, &cur, ts, 1, 0, &totals);
				open = 0;
			}
		} else if (strcmp(type, "succeeded") == 0 || strcmp(type, "failed") == 0 ||
		           strcmp(type, "cancelled") == 0) {
			ended = ts;
			end = type;
			end_reason = message;
			/* success after an interruption whose first step was never reported (the
			 * ranks finished before a heartbeat told one): it recovered once they ran
			 */
			int ok = strcmp(type, "succeeded") == 0;
			if (open)
				rc |= interruption_add(
				    list, &cur, ok && cur.running != UNSET ? cur.running : ts, ok,
				    0, &totals);
			open = 0;
		}
	}
	if (open)
		rc |= interruption_add(list, &cur, now_ms, 0, 1, &totals);
	int64_t until = ended != UNSET ? ended : now_ms;
	int64_t span = placed != UNSET ? until - placed : UNSET;
	int64_t startup =
	    placed == UNSET ? UNSET : (first_step != UNSET ? first_step : until) - placed;
	/* the first generation's start-up is counted once: an interruption before the first
	 * step ever (first_step after it) already holds the time after its detection */
	if (startup != UNSET && json_array_size(list) > 0) {
		int64_t first_detected =
		    json_integer_value(json_object_get(json_array_get(list, 0), "detected_ms"));
		if (first_step == UNSET || first_detected < first_step)
			startup = first_detected - placed;
	}
	json_t *fraction = json_null();
	if (span != UNSET && span > 0 && startup != UNSET) {
		double f = ((double)span - (double)startup - (double)totals.down -
		            (double)totals.undetected) /
		           (double)span;
		fraction = json_real(f < 0 ? 0 : f > 1 ? 1 : f);
	}
	json_t *doc = json_pack(
	    "{s:s,s:b,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I,s:I,s:I,s:o,s:o}", "job", id,
	    "complete", complete, "submitted_ms", ms_or_null(submitted), "placed_ms",
	    ms_or_null(placed), "running_ms", ms_or_null(running), "first_step_ms",
	    ms_or_null(first_step), "ended_ms", ms_or_null(ended), "end",
	    end != NULL ? json_string(end) : json_null(), "end_reason",
	    end_reason != NULL ? json_string(end_reason) : json_null(), "queued_ms",
	    submitted != UNSET && placed != UNSET ? json_integer(placed - submitted) : json_null(),
	    "startup_ms", ms_or_null(startup), "interruptions", list, "down_ms",
	    (json_int_t)totals.down, "undetected_ms", (json_int_t)totals.undetected, "lost_steps",
	    (json_int_t)totals.lost, "span_ms", ms_or_null(span), "progress_fraction", fraction);
	if (doc == NULL || rc != 0) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}
