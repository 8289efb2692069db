/* fuzz_desired.c: a heartbeat answer as yard-agent reads it: the body through jsonx_parse,
 * then desired_whole over its "desired" and "desired_shared" (what the agent acts on:
 * the ranks it must run). Properties: an answer made whole is an array of one entry per
 * "desired" entry, and an entry that named a shared part got that part's spec. */
#include "config.h"

#include <string.h>

#include "common/jsonx.h"
#include "scheduler/desired.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct yard_err err = {0};
	json_t *answer = jsonx_parse((const char *)data, size, 64u << 20, 64, &err);
	if (answer == NULL)
		return 0;
	const json_t *desired = json_object_get(answer, "desired");
	const json_t *parts = json_object_get(answer, "desired_shared");
	char why[256] = "";
	json_t *whole = desired_whole(desired, parts, why, sizeof why);
	if (whole != NULL) {
		if (!json_is_array(whole) || json_array_size(whole) != json_array_size(desired))
			fuzz_fail("%zu desired entries made %zu whole ones",
			          json_array_size(desired), json_array_size(whole));
		size_t i;
		json_t *e;
		json_array_foreach(desired, i, e)
		{
			const json_t *shared = json_object_get(e, "shared");
			if (json_is_string(shared) &&
			    json_object_get(json_array_get(whole, i), "spec") == NULL)
				fuzz_fail("entry %zu named part %s and has no spec", i,
				          json_string_value(shared));
		}
		json_decref(whole);
	} else if (why[0] == '\0') {
		fuzz_fail("desired_whole refused without a reason");
	}
	json_decref(answer);
	return 0;
}
