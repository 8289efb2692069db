/* watch.c: the agent's long-poll for work. While registered, one POST /v1/agents/watch waits
 * at the leader (cfg.watch_ms) for news of this node's desired set: a placement of ranks
 * here, or the end, restart or move of a job with ranks here. An answer with a new version
 * triggers a heartbeat at once, whose answer carries the desired set, so a placed rank
 * starts within a few round trips of the placement instead of at the next regular
 * heartbeat; the next watch goes out right away. A leader that offers it (a heartbeat
 * answer's "offers_watch_desired") is asked to put the desired set in that answer ("desired":
 * true, with the tag and desired_shared a heartbeat sends): it is applied at once, and no
 * heartbeat is needed to fetch it (a third fewer requests per placement for the leader).
 * An answer with "heartbeat": true asks for a heartbeat at once even so: its answer brings
 * what a watch does not (a drain command, a rollout's upgrade or rollback offer), which
 * would otherwise wait for the next regular heartbeat (5 s apart at 10,000 nodes).
 * Heartbeats keep their interval and stay the only way state reaches the controller: a
 * watch carries nothing of the node's state.
 * A failed watch is tried again a heartbeat interval later; a controller without the route
 * (an older build, 404) is asked again after a minute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "common/common.h"

#define WATCH_NO_ROUTE_RETRY_MS 60000
#define WATCH_SLACK_MS 5000 /* the HTTP timeout beyond the wait */
#define WATCH_EARLY_MS 50   /* an answer without news sooner than this did not wait */

struct watch_call {
	uv_work_t work;
	struct agent *agent;
	char token[256];
	char leader_url[512]; /* this thread's own (agent_http_request) */
	char *body;
	int64_t version;
	long wait_ms;
	int desired; /* asked for the desired set */
	uint64_t sent_mono_ms;
	int rc;
	struct agent_response rs;
	struct yard_err err;
};

static void watch_run(uv_work_t *w)
{
	struct watch_call *c = (struct watch_call *)w;
	struct agent_request rq = {.method = "POST",
	                           .path = "/v1/agents/watch",
	                           .token = c->token,
	                           .body = c->body,
	                           .body_len = strlen(c->body),
	                           .max_response = c->desired ? 0 : 4096, /* 0: a heartbeat's */
	                           .timeout_ms = c->wait_ms + WATCH_SLACK_MS,
	                           .abort = &c->agent->watch_abort};
	c->rc = agent_http_request(c->agent->cfg.controllers, c->leader_url, sizeof c->leader_url,
	                           &rq, &c->rs, &c->err);
}

static void retry_later(struct agent *a, uint64_t ms)
{
	a->watch_retry_mono_ms = yard_now_mono_ms() + ms;
}

static void watch_done(uv_work_t *w, int status)
{
	struct watch_call *c = (struct watch_call *)w;
	struct agent *a = c->agent;
	a->watch_in_flight = 0;
	json_t *resp = c->rc == 0 && c->rs.body != NULL ? jsonx_loads(c->rs.body) : NULL;
	if (c->rc == 0 && c->rs.status != 503)
		a->watch_unreachable = 0;
	const json_t *v = json_object_get(resp, "version");
	if (status != 0 || a->watch_abort) {
		/* cancelled, or the agent is stopping */
	} else if (c->rc != 0) {
		/* once: while it lasts the heartbeats say so, a line a minute */
		if (a->watch_unreachable++ == 0)
			log_warn("watch: %s", c->err.msg);
		retry_later(a, (uint64_t)a->cfg.heartbeat_ms);
	} else if (c->rs.status == 200 && json_is_integer(v)) {
		a->watch_retry_mono_ms = 0;
		if (json_integer_value(v) != a->watch_version) {
			a->watch_version = json_integer_value(v);
			a->watch_news++;
			if (c->desired && (json_object_get(resp, "desired") != NULL ||
			                   json_object_get(resp, "desired_unchanged") != NULL)) {
				log_info("desired set of version %lld from the watch's answer%s",
				         (long long)a->watch_version,
				         heartbeat_apply_answer(a, resp, "version")
				             ? ""
				             : " (older than the one applied: ignored)");
				if (json_is_true(json_object_get(resp, "heartbeat"))) {
					log_info("the watch's answer asks for a heartbeat now (a "
					         "command or an offer rides on it)");
					heartbeat_now(a);
				}
			} else {
				heartbeat_now(a);
			}
		} else if (c->wait_ms > 0 &&
		           yard_now_mono_ms() - c->sent_mono_ms < WATCH_EARLY_MS) {
			/* nothing new, and no wait: a controller that does not hold watches must
			 * not be asked in a tight loop */
			retry_later(a, (uint64_t)a->cfg.heartbeat_ms);
		}
	} else if (c->rs.status == 404) {
		log_warn("watch: %s has no watch route (an older controller?): placements reach "
		         "this node with its heartbeats; asking again in %d s",
		         c->leader_url, WATCH_NO_ROUTE_RETRY_MS / 1000);
		retry_later(a, WATCH_NO_ROUTE_RETRY_MS);
	} else if (c->rs.status == 400 && c->desired) {
		/* a leader that does not know "desired" (an older build after a failover): the
		 * next watch goes without it, until a heartbeat answer offers it again */
		log_warn("watch: HTTP 400 from %s asking for the desired set: watching without it",
		         c->leader_url);
		a->leader_offers_watch_desired = 0;
	} else {
		/* 401 (the heartbeat registers again), 503 (no leader: logged once while it
		 * lasts, as above), anything else */
		const char *e = json_string_value(json_object_get(resp, "error"));
		if (c->rs.status != 503 || a->watch_unreachable++ == 0)
			log_warn("watch: HTTP %ld from %s: %s", c->rs.status, c->leader_url,
			         e != NULL ? e : "(no error message)");
		retry_later(a, (uint64_t)a->cfg.heartbeat_ms);
	}
	json_decref(resp);
	free(c->rs.body);
	free(c->body);
	free(c);
	watch_tick(a);
}

void watch_tick(struct agent *a)
{
	if (a->cfg.watch_ms <= 0 || a->watch_in_flight || !a->registered ||
	    !a->heartbeat_answered || a->stopping || a->watch_abort ||
	    yard_now_mono_ms() < a->watch_retry_mono_ms)
		return;
	struct watch_call *c = calloc(1, sizeof *c);
	if (c == NULL)
		return;
	c->agent = a;
	snprintf(c->token, sizeof c->token, "%s", a->node_token);
	snprintf(c->leader_url, sizeof c->leader_url, "%s", a->leader_url);
	c->version = a->watch_version;
	c->wait_ms = a->cfg.watch_ms;
	c->sent_mono_ms = yard_now_mono_ms();
	c->desired = a->leader_offers_watch_desired;
	json_t *body = json_pack("{s:I,s:I}", "version", (json_int_t)c->version, "wait_ms",
	                         (json_int_t)c->wait_ms);
	if (body != NULL && c->desired) {
		json_object_set_new(body, "desired", json_true());
		if (a->leader_offers_shared)
			json_object_set_new(body, "desired_shared", json_true());
		if (a->desired_tag[0] != '\0' && a->desired != NULL)
			json_object_set_new(body, "desired_tag", json_string(a->desired_tag));
	}
	c->body = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (c->body == NULL) {
		free(c);
		return;
	}
	a->watch_in_flight = 1;
	if (uv_queue_work(a->loop, &c->work, watch_run, watch_done) != 0) {
		a->watch_in_flight = 0;
		free(c->body);
		free(c);
	}
}
