/* fuzz_jobspec.c: a job spec as POST /v1/jobs receives it: the body through jsonx_parse
 * with the API's bounds, then jobspec_parse. Properties of an accepted spec: its normalised
 * form (what the controller stores) prints, parses and validates again, normalises to
 * itself, and, when it is a fixed-layout trainer job that may shrink, each smaller dp it
 * allows is a valid spec too. */
#include "config.h"

#include <stdlib.h>

#include "common/jsonx.h"
#include "jobs/spec.h"
#include "tests/fuzz/fuzz.h"

/* web/http.h's HTTP_MAX_BODY and HTTP_MAX_DEPTH (that header brings h2o's) */
#define BODY_MAX (1u << 20)
#define DEPTH_MAX 32

static json_t *normalised(const json_t *in, const char *what)
{
	struct jobspec spec;
	struct yard_err err = {0};
	if (jobspec_parse(in, &spec, &err) != 0)
		fuzz_fail("%s no longer validates: %s", what, err.msg);
	json_t *out = jobspec_to_json(&spec);
	jobspec_free(&spec);
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct yard_err err = {0};
	json_t *body = jsonx_parse((const char *)data, size, BODY_MAX, DEPTH_MAX, &err);
	if (body == NULL)
		return 0;
	struct jobspec spec;
	if (jobspec_parse(body, &spec, &err) != 0) {
		json_decref(body);
		return 0;
	}
	json_t *norm = jobspec_to_json(&spec);
	jobspec_free(&spec);
	json_decref(body);
	/* stored as text, read back by every member and by the scheduler */
	size_t len;
	char *text = jsonx_dumps_compact(norm, 1, &len);
	json_t *back = jsonx_parse(text, len, BODY_MAX, DEPTH_MAX, &err);
	if (back == NULL)
		fuzz_fail("the normalised spec does not parse: %s: %s", err.msg, text);
	json_t *again = normalised(back, "the normalised spec");
	if (!json_equal(again, norm))
		fuzz_fail("normalising twice changes the spec: %s", text);
	json_t *dp = json_object_get(json_object_get(norm, "parallel"), "dp");
	for (int64_t d = 1; json_is_integer(dp) && d < json_integer_value(dp) && d <= 4; d++) {
		json_t *shrunk = jobspec_with_dp(norm, (int)d, &err);
		if (shrunk != NULL) {
			json_decref(normalised(shrunk, "a shrunk spec"));
			json_decref(shrunk);
		}
	}
	free(text);
	json_decref(back);
	json_decref(again);
	json_decref(norm);
	return 0;
}
