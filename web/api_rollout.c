/* api_rollout.c: the rollout routes of docs/api.md (POST/GET /v1/rollouts, control actions).
 * The route table and its role check stay in api.c. A start request is checked here field
 * by field, turned into the replicated rollout.start (seconds become milliseconds, "1,50%"
 * becomes ["1","50%"], "k=v,k2=v2" becomes {"k":"v","k2":"v2"}), and the state machine
 * checks the rest (the build, the targets, another active rollout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "web/internal.h"

/* 0 when no wave is at or below an earlier one of its kind; -1 with a 400 sent. Waves are
 * cumulative targets, so "50%,10%" (meant as increments) or "2,2" is a mistake; a count and
 * a percentage compare only once the targets are known (the state machine then drops a wave
 * that adds no node), and what does not parse is left to the state machine to name. Checked
 * here, before the command is proposed, so that entries already in a log apply as before. */
static int waves_in_order(struct call *call, const json_t *waves)
{
	int64_t last[2] = {0, 0};
	size_t last_at[2] = {0, 0}, i;
	json_t *v;
	json_array_foreach(waves, i, v)
	{
		int64_t count;
		int percent;
		if (!json_is_string(v) ||
		    fsm_wave_target_parse(json_string_value(v), &count, &percent) != 0)
			continue;
		if (count <= last[percent]) {
			call_error(call, 400, "waves",
			           "waves[%zu]: '%s' is not above waves[%zu] '%s': waves are "
			           "cumulative (1,10%%,100%%: one node, then up to a tenth, then "
			           "every node)",
			           i, json_string_value(v), last_at[percent],
			           json_string_value(json_array_get(waves, last_at[percent])));
			return -1;
		}
		last[percent] = count;
		last_at[percent] = i;
	}
	return 0;
}

/* "1,10%,100%" or ["1","10%","100%"] → a new array of strings; NULL with a 400 sent. */
static json_t *waves_arg(struct call *call, const json_t *v)
{
	if (json_is_array(v))
		return waves_in_order(call, v) == 0 ? json_incref((json_t *)v) : NULL;
	if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 200) {
		call_error(call, 400, "waves",
		           "waves: must be a list like \"1,10%%,100%%\" or an array of strings");
		return NULL;
	}
	char text[201], *save = NULL;
	snprintf(text, sizeof text, "%s", json_string_value(v));
	json_t *out = json_array();
	for (char *tok = strtok_r(text, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
		json_array_append_new(out, json_string(tok));
	if (waves_in_order(call, out) != 0) {
		json_decref(out);
		return NULL;
	}
	return out;
}

/* "k=v,k2=v2" or {"k":"v"} → a new object; NULL with a 400 sent. */
static json_t *selector_arg(struct call *call, const json_t *v)
{
	if (json_is_object(v))
		return json_incref((json_t *)v);
	if (!json_is_string(v) || json_string_length(v) > 1000) {
		call_error(call, 400, "selector",
		           "selector: must be \"label=value[,label=value]\" or an object");
		return NULL;
	}
	char text[1001], *save = NULL;
	snprintf(text, sizeof text, "%s", json_string_value(v));
	json_t *out = json_object();
	for (char *tok = strtok_r(text, ",", &save); tok != NULL;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (eq == NULL || eq == tok) {
			call_error(call, 400, "selector", "selector: '%s' is not label=value", tok);
			json_decref(out);
			return NULL;
		}
		*eq = '\0';
		json_object_set_new(out, tok, json_string(eq + 1));
	}
	return out;
}

void h_rollouts_start(struct call *call)
{
	static const char *const keys[] = {
	    "build",    "waves",          "soak_s", "gate_timeout_s",
	    "selector", "failure_budget", "policy", "step_time_regression_pct",
	    NULL};
	struct yard_err err = {0};
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	const char *build = NULL, *policy = NULL;
	double soak_s = 0, gate_s = 60;
	int64_t budget = 0, regression = 0;
	if (jsonx_only_keys(body, "", keys, &err) != 0 ||
	    jsonx_get_string(body, "", "build", 1, 31, &build, &err) != 0 ||
	    jsonx_get_double(body, "", "soak_s", 0, 0, 7 * 24 * 3600, &soak_s, &err) != 0 ||
	    jsonx_get_double(body, "", "gate_timeout_s", 0, 1, 3600, &gate_s, &err) != 0 ||
	    jsonx_get_int(body, "", "failure_budget", 0, 0, 4096, &budget, &err) != 0 ||
	    jsonx_get_string(body, "", "policy", 0, 16, &policy, &err) != 0 ||
	    jsonx_get_int(body, "", "step_time_regression_pct", 0, 0, 1000, &regression, &err) !=
	        0) {
		json_decref(body);
		call_yard_error(call, &err);
		return;
	}
	json_t *args = json_pack("{s:s,s:I,s:I,s:I,s:I}", "build", build, "soak_ms",
	                         (json_int_t)(soak_s * 1000), "gate_timeout_ms",
	                         (json_int_t)(gate_s * 1000), "failure_budget", (json_int_t)budget,
	                         "step_time_regression_pct", (json_int_t)regression);
	if (policy != NULL) /* the default depends on the build's component */
		json_object_set_new(args, "policy", json_string(policy));
	json_t *v;
	if ((v = json_object_get(body, "waves")) != NULL) {
		json_t *waves = waves_arg(call, v);
		if (waves == NULL) {
			json_decref(args);
			json_decref(body);
			return;
		}
		json_object_set_new(args, "waves", waves);
	}
	if ((v = json_object_get(body, "selector")) != NULL && !json_is_null(v)) {
		json_t *selector = selector_arg(call, v);
		if (selector == NULL) {
			json_decref(args);
			json_decref(body);
			return;
		}
		json_object_set_new(args, "selector", selector);
	}
	json_decref(body);
	call_submit(call, "rollout.start", args, call_answer_result);
}

static void overlay(struct call *call, json_t *rollout)
{
	if (call->s->sched != NULL)
		sched_overlay_rollout(call->s->sched, rollout);
}

void h_rollouts_list(struct call *call)
{
	struct yard_err err = {0};
	json_t *list = fsm_rollouts_list(call->s->fsm, &err);
	if (list == NULL) {
		call_yard_error(call, &err);
		return;
	}
	size_t i;
	json_t *r;
	json_array_foreach(list, i, r) overlay(call, r);
	call_json(call, 200, json_pack("{s:o}", "rollouts", list));
}

void h_rollouts_get(struct call *call)
{
	struct yard_err err = {0};
	json_t *r = fsm_rollout_get(call->s->fsm, call->params[0], &err);
	if (r == NULL) {
		call_yard_error(call, &err);
		return;
	}
	overlay(call, r);
	call_json(call, 200, r);
}

/* POST /v1/rollouts/ID/ACTION with an optional {"reason": "..."}. */
static void control(struct call *call, const char *action)
{
	static const char *const keys[] = {"reason", NULL};
	struct yard_err err = {0};
	const char *reason = NULL;
	json_t *args = json_pack("{s:s,s:s}", "id", call->params[0], "action", action);
	if (call->req->entity.len > 0) {
		json_t *body = call_body_object(call);
		if (body == NULL) {
			json_decref(args);
			return;
		}
		if (jsonx_only_keys(body, "", keys, &err) != 0 ||
		    jsonx_get_string(body, "", "reason", 0, 300, &reason, &err) != 0) {
			json_decref(body);
			json_decref(args);
			call_yard_error(call, &err);
			return;
		}
		if (reason != NULL)
			json_object_set_new(args, "reason", json_string(reason));
		json_decref(body);
	}
	call_submit(call, "rollout.control", args, call_answer_result);
}

void h_rollouts_pause(struct call *call)
{
	control(call, "pause");
}

void h_rollouts_resume(struct call *call)
{
	control(call, "resume");
}

void h_rollouts_abort(struct call *call)
{
	control(call, "abort");
}

void h_rollouts_rollback(struct call *call)
{
	control(call, "rollback");
}
