/* fuzz_timeline.c: a job's timeline (jobs/timeline.h) from an event list as GET /v1/events
 * gives it: {"now": N, "events": [...]} through jsonx_parse, then job_timeline. The messages
 * are read for numbers and causes, and they carry what users wrote (a job's name, a rank's
 * exit), so any text must give a sound timeline. Properties: one is made (the input is a
 * list); every interruption's down_ms, undetected_ms and lost_steps are non-negative, and the
 * top level's sums are theirs; progress_fraction is null or within [0, 1]; the cause is a
 * part of its event's message. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "common/jsonx.h"
#include "jobs/timeline.h"
#include "tests/fuzz/fuzz.h"

static json_int_t int_or(const json_t *o, const char *key, json_int_t dflt)
{
	const json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* a + b, saturating as the timeline's sums do */
static json_int_t sum(json_int_t a, json_int_t b)
{
	return b > INT64_MAX - a ? INT64_MAX : a + b;
}

/* Whether cause is a part of some event's message. */
static int from_a_message(const json_t *events, const char *cause)
{
	size_t i;
	const json_t *e;
	json_array_foreach(events, i, e)
	{
		const char *m = json_string_value(json_object_get(e, "message"));
		if (m != NULL && strstr(m, cause) != NULL)
			return 1;
	}
	return cause[0] == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct yard_err err = {0};
	json_t *in = jsonx_parse((const char *)data, size, 1u << 20, 32, &err);
	if (in == NULL)
		return 0;
	const json_t *events = json_object_get(in, "events");
	json_int_t now = int_or(in, "now", 0);
	if (!json_is_array(events)) {
		json_decref(in);
		return 0;
	}
	json_t *t = job_timeline("j-000001", events, now);
	if (t == NULL)
		fuzz_fail("no timeline for a list of %zu events", json_array_size(events));
	json_int_t down = 0, undetected = 0, lost = 0;
	size_t i;
	const json_t *x;
	json_array_foreach(json_object_get(t, "interruptions"), i, x)
	{
		json_int_t d = int_or(x, "down_ms", -1), u = int_or(x, "undetected_ms", 0),
		           l = int_or(x, "lost_steps", 0);
		if (d < 0 || u < 0 || l < 0)
			fuzz_fail("interruption %zu: down_ms %lld, undetected_ms %lld, lost_steps %lld", i,
			          (long long)d, (long long)u, (long long)l);
		const char *cause = json_string_value(json_object_get(x, "cause"));
		if (cause == NULL || !from_a_message(events, cause))
			fuzz_fail("interruption %zu: a cause from no message: %s", i,
			          cause != NULL ? cause : "(none)");
		down = sum(down, d), undetected = sum(undetected, u), lost = sum(lost, l);
	}
	if (int_or(t, "down_ms", -1) != down || int_or(t, "undetected_ms", -1) != undetected ||
	    int_or(t, "lost_steps", -1) != lost)
		fuzz_fail("the sums (down %lld, undetected %lld, lost %lld) are not the interruptions' "
		          "(%lld, %lld, %lld)",
		          (long long)int_or(t, "down_ms", -1), (long long)int_or(t, "undetected_ms", -1),
		          (long long)int_or(t, "lost_steps", -1), (long long)down,
		          (long long)undetected, (long long)lost);
	const json_t *f = json_object_get(t, "progress_fraction");
	if (!json_is_null(f) && !(json_is_real(f) && json_real_value(f) >= 0 &&
	                          json_real_value(f) <= 1))
		fuzz_fail("progress_fraction out of [0, 1]");
	json_decref(t);
	json_decref(in);
	return 0;
}
