/* api.c: the routes of docs/api.md: one table (method, path, roles, kind, handler) that the
 * gate in http.c consults, and the handlers. Handlers validate input fully before anything
 * is replicated, so bad input changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/addr.h"
#include "common/common.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "jobs/spec.h"
#include "jobs/timeline.h"
#include "scheduler/autoplan.h"
#include "web/dashboard.h"
#include "web/internal.h"

/* ---- helpers ---- */

static const char *raft_state_name(int state)
{
	switch (state) {
	case RAFT_LEADER:
		return "leader";
	case RAFT_CANDIDATE:
		return "candidate";
	case RAFT_FOLLOWER:
		return "follower";
	default:
		return "unavailable";
	}
}

/* The raft configuration, with API URLs from the replicated members table. */
/* A follower this far behind the leader's log still counts as keeping up (entries in flight). */
#define MEMBER_LAG_OK 256

static json_t *members_json(struct http_server *s)
{
	uint64_t ids[CONSENSUS_MAX_MEMBERS];
	const char *addrs[CONSENSUS_MAX_MEMBERS];
	int roles[CONSENSUS_MAX_MEMBERS];
	int n = consensus_configuration(s->cons, ids, addrs, roles, CONSENSUS_MAX_MEMBERS);
	json_t *list = json_array();
	for (int i = 0; i < n; i++) {
		char url[256] = "";
		fsm_member_api_url(s->fsm, ids[i], url, sizeof url);
		json_t *m = json_pack("{s:I,s:s,s:s,s:s}", "id", (json_int_t)ids[i], "raft_address",
		                      addrs[i], "api_url", url, "role",
		                      roles[i] == RAFT_VOTER   ? "voter"
		                      : roles[i] == RAFT_SPARE ? "spare"
		                                               : "standby");
		/* the leader knows how every member keeps up; other members leave it out */
		uint64_t behind = 0;
		int healthy = 0;
		if (consensus_member_progress(s->cons, ids[i], &behind, &healthy) == 0) {
			char health[96];
			if (ids[i] == s->cons->cfg.id)
				snprintf(health, sizeof health, "ok (leading)");
			else if (!healthy)
				snprintf(health, sizeof health, "no answer for over %u ms",
				         2 * s->cons->cfg.election_timeout_ms);
			else if (behind > MEMBER_LAG_OK)
				snprintf(health, sizeof health, "catching up: %llu entries behind",
				         (unsigned long long)behind);
			else
				snprintf(health, sizeof health, "ok");
			json_object_set_new(m, "health", json_string(health));
			json_object_set_new(m, "entries_behind", json_integer((json_int_t)behind));
		}
		json_array_append_new(list, m);
	}
	return list;
}

/* ---- /healthz, /metrics, /v1/cluster ---- */

static void h_healthz(struct call *call)
{
	struct consensus *c = call->s->cons;
	int state = consensus_state(c);
	call_json(call, state == RAFT_UNAVAILABLE || c->closing ? 503 : 200,
	          json_pack("{s:b,s:I,s:s}", "ok", state != RAFT_UNAVAILABLE && !c->closing, "id",
	                    (json_int_t)c->cfg.id, "state", raft_state_name(state)));
}

static void h_metrics(struct call *call)
{
	size_t len;
	char *text = metrics_render(call->s, &len);
	call_text(call, 200, "text/plain; version=0.0.4", text, len);
}

static void h_cluster(struct call *call)
{
	struct http_server *s = call->s;
	struct consensus *c = s->cons;
	uint64_t leader = 0;
	const char *leader_addr = NULL;
	consensus_leader(c, &leader, &leader_addr);
	json_t *leader_json = json_null();
	if (leader != 0) {
		char url[256] = "";
		fsm_member_api_url(s->fsm, leader, url, sizeof url);
		leader_json = json_pack("{s:I,s:s,s:s}", "id", (json_int_t)leader, "api_url", url,
		                        "raft_address", leader_addr ? leader_addr : "");
	}
	json_t *doc =
	    json_pack("{s:I,s:s,s:I,s:I,s:I,s:o,s:o}", "id", (json_int_t)c->cfg.id, "state",
	              raft_state_name(consensus_state(c)), "term", (json_int_t)c->raft.current_term,
	              "commit_index", (json_int_t)c->raft.commit_index, "applied_index",
	              (json_int_t)raft_last_applied(&c->raft), "leader", leader_json, "members",
	              members_json(s));
	if (leader == 0)
		json_object_set_new(doc, "no_leader_for_ms",
		                    json_integer((json_int_t)consensus_leaderless_ms(c)));
	/* the leader's: how it paces and judges the agents' heartbeats */
	json_t *pace = s->sched != NULL ? sched_heartbeat_pace(s->sched) : NULL;
	if (pace != NULL)
		json_object_set_new(doc, "heartbeats", pace);
	call_json(call, 200, doc);
}

/* ---- membership ---- */

static void member_change_done(void *data, int status, const char *msg)
{
	struct call *call = data;
	if (status != 0) {
		call_error(call, http_status_of(status), NULL, "member %llu: %s",
		           (unsigned long long)call->member_id, msg);
		return;
	}
	call_json(call, 200, json_pack("{s:o}", "members", members_json(call->s)));
}

static void member_recorded(struct call *call, const json_t *result)
{
	struct yard_err err = {0};
	if (json_object_get(result, "error") != NULL) {
		call_answer_result(call, result);
		return;
	}
	if (consensus_add(call->s->cons, call->member_id, call->member_addr, call->member_voter,
	                  member_change_done, call, &err) != 0)
		call_yard_error(call, &err);
}

static void h_members_add(struct call *call)
{
	static const char *const keys[] = {"id", "raft_address", "api_url", "role", NULL};
	struct yard_err err = {0};
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	int64_t id = 0;
	const char *addr = NULL, *url = NULL, *role = "voter";
	if (jsonx_only_keys(body, "", keys, &err) != 0 ||
	    jsonx_get_int(body, "", "id", 1, 1, INT32_MAX, &id, &err) != 0 ||
	    jsonx_get_string(body, "", "raft_address", 1, CONSENSUS_ADDR_MAX - 1, &addr, &err) !=
	        0 ||
	    jsonx_get_string(body, "", "api_url", 1, 255, &url, &err) != 0 ||
	    jsonx_get_string(body, "", "role", 0, 16, &role, &err) != 0) {
		json_decref(body);
		call_yard_error(call, &err);
		return;
	}
	if (yard_addr_parse(addr, NULL, 0, NULL) != 0) {
		call_error(call, 400, "raft_address",
		           "raft_address: '%s' must be a.b.c.d:port (an IPv4 address, a port "
		           "1-65535)",
		           addr);
	} else if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
		call_error(call, 400, "api_url",
		           "api_url: '%s' must start with http:// or https://", url);
	} else if (strcmp(role, "voter") != 0 && strcmp(role, "spare") != 0) {
		call_error(call, 400, "role", "role: '%s' must be voter or spare", role);
	} else {
		call->member_id = (uint64_t)id;
		snprintf(call->member_addr, sizeof call->member_addr, "%s", addr);
		snprintf(call->member_url, sizeof call->member_url, "%s", url);
		call->member_voter = strcmp(role, "voter") == 0;
		/* refuse duplicates before recording anything */
		uint64_t ids[CONSENSUS_MAX_MEMBERS];
		const char *addrs[CONSENSUS_MAX_MEMBERS];
		int roles[CONSENSUS_MAX_MEMBERS];
		int n = consensus_configuration(call->s->cons, ids, addrs, roles,
		                                CONSENSUS_MAX_MEMBERS);
		for (int i = 0; i < n; i++)
			if (ids[i] == (uint64_t)id || strcmp(addrs[i], addr) == 0) {
				json_decref(body);
				call_error(call, 409,
				           ids[i] == (uint64_t)id ? "id" : "raft_address",
				           "member %llu (%s) is already in the configuration",
				           (unsigned long long)ids[i], addrs[i]);
				return;
			}
		if (n >= CONSENSUS_MAX_MEMBERS) {
			json_decref(body);
			call_error(call, 409, NULL, "the cluster already has %d members", n);
			return;
		}
		call_submit(call, "member.set",
		            json_pack("{s:I,s:s,s:s,s:s}", "id", (json_int_t)id, "raft_address",
		                      addr, "api_url", url, "role", role),
		            member_recorded);
	}
	json_decref(body);
}

static void member_forgotten(struct call *call, const json_t *result)
{
	/* 404 from the table only means it never had an API URL; the raft removal stands */
	call_json(call, 200, json_pack("{s:o}", "members", members_json(call->s)));
}

static void member_removed(void *data, int status, const char *msg)
{
	struct call *call = data;
	if (status != 0) {
		call_error(call, http_status_of(status), NULL, "member %llu: %s",
		           (unsigned long long)call->member_id, msg);
		return;
	}
	call->request_id[0] = '\0';
	call_submit(call, "member.remove", json_pack("{s:I}", "id", (json_int_t)call->member_id),
	            member_forgotten);
}

static void h_members_remove(struct call *call)
{
	struct yard_err err = {0};
	char *end;
	unsigned long long id = strtoull(call->params[0], &end, 10);
	if (*end != '\0' || id == 0 || id > INT32_MAX) {
		call_error(call, 400, "id", "id: '%s' is not a member id", call->params[0]);
		return;
	}
	call->member_id = id;
	if (consensus_remove(call->s->cons, id, member_removed, call, &err) != 0)
		call_yard_error(call, &err);
}

static void transfer_done(void *data, int status, const char *msg)
{
	struct call *call = data;
	if (status != 0) {
		call_error(call, http_status_of(status), NULL, "%s", msg);
		return;
	}
	uint64_t leader = 0;
	consensus_leader(call->s->cons, &leader, NULL);
	call_json(call, 200, json_pack("{s:I}", "leader_id", (json_int_t)leader));
}

static void h_transfer(struct call *call)
{
	static const char *const keys[] = {"to", NULL};
	struct yard_err err = {0};
	int64_t to = 0;
	json_t *body = NULL;
	if (call->req->entity.len > 0) {
		if ((body = call_body_object(call)) == NULL)
			return;
		if (jsonx_only_keys(body, "", keys, &err) != 0 ||
		    jsonx_get_int(body, "", "to", 0, 1, INT32_MAX, &to, &err) != 0) {
			json_decref(body);
			call_yard_error(call, &err);
			return;
		}
		json_decref(body);
	}
	if (consensus_transfer(call->s->cons, (uint64_t)to, transfer_done, call, &err) != 0)
		call_yard_error(call, &err);
}

/* ---- jobs ---- */

/* The answer of a write, with the call's warning in "warnings" when it succeeded. */
static void answer_with_warning(struct call *call, const json_t *result)
{
	json_t *body = json_object_get(result, "body");
	if (call->warning[0] != '\0' && json_object_get(result, "error") == NULL &&
	    json_is_object(body)) {
		json_t *copy = json_deep_copy(result);
		json_object_set_new(json_object_get(copy, "body"), "warnings",
		                    json_pack("[s]", call->warning));
		call_answer_result(call, copy);
		json_decref(copy);
		return;
	}
	call_answer_result(call, result);
}

/* Validates the spec with the one job-spec parser (jobs/spec.h): a bad field is a 400 naming
 * it, and what is stored is the normalized spec with every default filled in. A spec that is
 * valid but will not do what it asks on this cluster is stored with a warning: fencing
 * (failure.stop_on_disconnect_s) no shorter than the time after which the leader declares a
 * node down cannot stop a cut-off node's ranks before the job runs again elsewhere. */
static void h_jobs_submit(struct call *call)
{
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	struct jobspec spec;
	struct yard_err err = {0};
	if (jobspec_parse(body, &spec, &err) != 0) {
		json_decref(body);
		call_yard_error(call, &err);
		return;
	}
	json_decref(body);
	char why[320];
	int refused = call->s->sched != NULL ? sched_admit(call->s->sched, why, sizeof why) : 0;
	if (refused != 0) {
		jobspec_free(&spec);
		call_error(call, refused == -2 ? 507 : 429, NULL, "%s", why);
		return;
	}
	uint64_t down_ms = call->s->sched != NULL ? sched_node_down_ms(call->s->sched) : 0;
	if (spec.failure.stop_on_disconnect_s > 0 && down_ms > 0 &&
	    spec.failure.stop_on_disconnect_s * 1000 >= (double)down_ms)
		snprintf(call->warning, sizeof call->warning,
		         "failure.stop_on_disconnect_s %g is not below the %.1f s after which the "
		         "leader declares a silent node down: a node cut off from the controllers "
		         "runs the job's ranks until after it is placed again elsewhere",
		         spec.failure.stop_on_disconnect_s, (double)down_ms / 1000.0);
	json_t *args = json_pack("{s:s,s:i,s:o}", "name", spec.name, "priority", spec.priority,
	                         "spec", jobspec_to_json(&spec));
	/* placed at once when nothing waits (sched_submit_begin): one raft entry for both */
	json_t *ranks = call->s->sched != NULL
	                    ? sched_submit_begin(call->s->sched, &spec, &call->sched_token)
	                    : NULL;
	if (ranks != NULL && args != NULL)
		json_object_set_new(args, "place", json_pack("{s:o}", "ranks", ranks));
	else
		json_decref(ranks);
	jobspec_free(&spec);
	call_submit(call, "job.submit", args, answer_with_warning);
}

/* POST /v1/plan: ranks the layouts of a job spec for the cluster's devices and measured rates
 * (the leader's view, sched_plan); changes nothing. ?limit=N candidates, 0 for all. */
/* The JSON object body of a request to the scheduler (new reference), or NULL once an error
 * was answered: 503 on a controller without one, 400 for a body that is not an object. */
static json_t *scheduler_body(struct call *call, const char *what)
{
	if (call->s->sched == NULL) {
		call_error(call, 503, NULL, "%sthis controller runs no scheduler", what);
		return NULL;
	}
	return call_body_object(call);
}

static void h_plan(struct call *call)
{
	int64_t limit = AUTOPLAN_DEFAULT_LIMIT;
	if (call_query_int(call, "limit", 0, 100000, &limit) != 0)
		return;
	json_t *body = scheduler_body(call, "plan: ");
	if (body == NULL)
		return;
	struct yard_err err = {0};
	json_t *answer = sched_plan(call->s->sched, body, (int)limit, &err);
	json_decref(body);
	if (answer == NULL && err.code == YARD_ENOSPACE) /* the cluster's state, not a retry */
		call_error(call, 409, NULL, "%s", err.msg);
	else if (answer == NULL)
		call_yard_error(call, &err);
	else
		call_json(call, 200, answer);
}

/* Soft state (queue position, pending reason, step, loss, rank pids) is known only to the
 * leader's scheduler; a ?stale=1 read elsewhere shows the committed fields alone. */
static void overlay_job(struct call *call, json_t *job)
{
	if (call->s->sched != NULL)
		sched_overlay_job(call->s->sched, job);
}

static const char *const JOB_STATES[] = {"pending", "running",   "restarting", "succeeded",
                                         "failed",  "cancelled", NULL};

static void h_jobs_list(struct call *call)
{
	char state[32], after[40];
	int64_t limit = 50;
	int has_state = call_query(call, "state", state, sizeof state) == 0;
	int has_after = call_query(call, "after", after, sizeof after) == 0;
	if (call_query_int(call, "limit", 1, 1000, &limit) != 0)
		return;
	if (has_state) {
		int ok = 0;
		for (int i = 0; JOB_STATES[i]; i++)
			ok |= strcmp(JOB_STATES[i], state) == 0;
		if (!ok) {
			call_error(call, 400, "state", "state: '%s' is not a job state", state);
			return;
		}
	}
	struct yard_err err = {0};
	json_t *page = fsm_jobs_list(call->s->fsm, has_state ? state : NULL,
	                             has_after ? after : NULL, (int)limit, &err);
	if (page == NULL) {
		call_yard_error(call, &err);
		return;
	}
	size_t i;
	json_t *job;
	json_array_foreach(json_object_get(page, "jobs"), i, job) overlay_job(call, job);
	call_json(call, 200, page);
}

static void h_jobs_get(struct call *call)
{
	struct yard_err err = {0};
	json_t *job = fsm_job_get(call->s->fsm, call->params[0], &err);
	if (job == NULL) {
		call_yard_error(call, &err);
		return;
	}
	overlay_job(call, job);
	/* the start estimate plays the queue forward (up to ~25 ms): not for ?stale=1, the
	 * cheap read pollers use */
	if (call->s->sched != NULL && !call->stale)
		sched_overlay_estimate(call->s->sched, job);
	call_json(call, 200, job);
}

/* The job's per-step history (loss, step time, per-rank compute time) from the leader's
 * memory: ?after=STEP returns only newer steps, ?limit=N the newest N (default 500). */
static void h_jobs_metrics(struct call *call)
{
	int64_t after = 0, limit = 500;
	if (call_query_int(call, "after", 0, INT64_MAX, &after) != 0 ||
	    call_query_int(call, "limit", 1, 100000, &limit) != 0)
		return;
	struct yard_err err = {0};
	json_t *job = fsm_job_get(call->s->fsm, call->params[0], &err);
	if (job == NULL) {
		call_yard_error(call, &err);
		return;
	}
	json_int_t batch = json_integer_value(
	    json_object_get(json_object_get(json_object_get(job, "spec"), "train"), "batch_size"));
	json_decref(job);
	json_t *doc = call->s->sched != NULL ? sched_job_metrics(call->s->sched, call->params[0],
	                                                         after, (int)limit, batch)
	                                     : NULL;
	if (doc == NULL) {
		call_error(call, 503, NULL,
		           "per-step history is kept in the leader's memory and this member is not "
		           "the leader: ask without ?stale=1");
		return;
	}
	call_json(call, 200, doc);
}

int api_job_known(struct call *call)
{
	struct yard_err err = {0};
	json_t *job = fsm_job_get(call->s->fsm, call->params[0], &err);
	if (job == NULL) {
		call_yard_error(call, &err);
		return 0;
	}
	json_decref(job);
	return 1;
}

#define TIMELINE_PAGES 20 /* pages of 1,000 lifecycle events a timeline reads, at most */

/* GET /v1/jobs/{id}/timeline: the job's life from its lifecycle events (jobs/timeline.h):
 * queue wait, start-up, every interruption phase by phase, the share of time with progress. */
static void h_jobs_timeline(struct call *call)
{
	struct yard_err err = {0};
	if (!api_job_known(call))
		return;
	json_t *events = json_array();
	int64_t after = 0;
	int truncated = 1;
	for (int page = 0; page < TIMELINE_PAGES && events != NULL; page++) {
		json_t *got = fsm_job_story(call->s->fsm, call->params[0], after, 1000, &err);
		if (got == NULL) {
			json_decref(events);
			call_yard_error(call, &err);
			return;
		}
		json_array_extend(events, json_object_get(got, "events"));
		const json_t *next = json_object_get(got, "next");
		after = json_integer_value(next);
		json_decref(got);
		if (!json_is_integer(next)) {
			truncated = 0;
			break;
		}
	}
	json_t *doc = events ? job_timeline(call->params[0], events, yard_now_wall_ms()) : NULL;
	json_decref(events);
	if (doc == NULL) {
		call_error(call, 500, NULL, "timeline: out of memory");
		return;
	}
	/* the oldest TIMELINE_PAGES thousand: what comes after is left out, and said */
	json_object_set_new(doc, "truncated", json_boolean(truncated));
	call_json(call, 200, doc);
}

/* POST /v1/jobs/{id}/checkpoint: the ranks save a checkpoint now (sched_checkpoint_now). */
static void h_jobs_checkpoint(struct call *call)
{
	if (call->s->sched == NULL) {
		call_error(call, 503, NULL, "checkpoint: this controller runs no scheduler");
		return;
	}
	struct yard_err err = {0};
	json_t *answer =
	    sched_checkpoint_now(call->s->sched, call->params[0], call->actor, call->role, &err);
	if (answer == NULL)
		call_yard_error(call, &err);
	else
		call_json(call, 200, answer);
}

static void h_jobs_cancel(struct call *call)
{
	call_submit(call, "job.cancel", json_pack("{s:s}", "id", call->params[0]),
	            call_answer_result);
}

static void h_jobs_delete(struct call *call)
{
	char waiter[FSM_ID_MAX];
	if (call->s->sched != NULL &&
	    sched_job_awaited_by(call->s->sched, call->params[0], waiter, sizeof waiter)) {
		call_error(call, 409, NULL,
		           "job %s is waited for by job %s (its spec's \"after\"): delete it once "
		           "%s has been placed or has ended",
		           call->params[0], waiter, waiter);
		return;
	}
	call_submit(call, "job.delete", json_pack("{s:s}", "id", call->params[0]),
	            call_answer_result);
}

/* GET /v1/jobs/{id}/logs[?rank=R[&generation=G][&offset=O][&max_bytes=N]]: rank output
 * from the leader's memory (scheduler/logstore.h); without rank, the index of what is held. */
static void h_jobs_logs(struct call *call)
{
	struct yard_err err = {0};
	char buf[32];
	int64_t rank = -1, generation = -1, offset = -1, max_bytes = 256 << 10;
	int has_rank = call_query(call, "rank", buf, sizeof buf) == 0;
	if (call_query_int(call, "rank", 0, 65535, &rank) != 0 ||
	    call_query_int(call, "generation", 1, INT32_MAX, &generation) != 0 ||
	    call_query_int(call, "offset", 0, INT64_MAX / 2, &offset) != 0 ||
	    call_query_int(call, "max_bytes", 1, 1 << 20, &max_bytes) != 0)
		return;
	if (!has_rank && (call_query(call, "generation", buf, sizeof buf) == 0 ||
	                  call_query(call, "offset", buf, sizeof buf) == 0)) {
		call_error(call, 400, "rank", "rank: needed with generation and offset");
		return;
	}
	json_t *job = fsm_job_get(call->s->fsm, call->params[0], &err);
	if (job == NULL) {
		call_yard_error(call, &err);
		return;
	}
	json_decref(job);
	if (call->s->sched == NULL) {
		call_error(call, 503, NULL, "this controller runs no scheduler");
		return;
	}
	json_t *out = sched_job_logs(call->s->sched, call->params[0], (int)rank, generation, offset,
	                             (size_t)max_bytes, &err);
	if (out == NULL && err.code == YARD_ENOTLEADER)
		call_error(call, 503, NULL, "%s: ask the leader (without stale=1)", err.msg);
	else if (out == NULL)
		call_yard_error(call, &err);
	else
		call_json(call, 200, out);
}

/* ---- events ---- */

static void h_events(struct call *call)
{
	int64_t after = 0, limit = 100, last = 0;
	char job[40], unused[8];
	int has_job = call_query(call, "job", job, sizeof job) == 0;
	if (call_query_int(call, "after", 0, INT64_MAX, &after) != 0 ||
	    call_query_int(call, "limit", 1, 1000, &limit) != 0 ||
	    call_query_int(call, "last", 1, 1000, &last) != 0)
		return;
	if (last > 0 && call_query(call, "limit", unused, sizeof unused) == 0) {
		call_error(call, 400, "last",
		           "last: not with limit (last=N is the newest N events)");
		return;
	}
	struct yard_err err = {0};
	const char *of = has_job ? job : NULL;
	json_t *page = last > 0 ? fsm_events_newest(call->s->fsm, after, (int)last, of, &err)
	                        : fsm_events_list(call->s->fsm, after, (int)limit, of, &err);
	if (page == NULL)
		call_yard_error(call, &err);
	else
		call_json(call, 200, page);
}

/* ---- tokens ---- */

static void token_created(struct call *call, const json_t *result)
{
	if (json_object_get(result, "error") != NULL) {
		call_answer_result(call, result);
		return;
	}
	/* A retried request id returns the first attempt's token, whose secret we no longer
	 * have: say so rather than hand out a secret that does not work. */
	const char *hash = json_string_value(json_object_get(result, "hash"));
	if (hash == NULL || strcmp(hash, call->hash) != 0) {
		call_error(
		    call, 409, NULL,
		    "this X-Request-Id already created token %s; its secret was shown once",
		    json_string_value(json_object_get(json_object_get(result, "body"), "id")));
		return;
	}
	json_t *body = json_deep_copy(json_object_get(result, "body"));
	json_object_set_new(body, "token", json_string(call->secret));
	call_json(call, 201, body);
}

static void h_tokens_create(struct call *call)
{
	static const char *const keys[] = {"name", "role", "ttl_s", NULL};
	struct yard_err err = {0};
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	const char *name = NULL, *role = NULL;
	int64_t ttl_s = 0;
	if (jsonx_only_keys(body, "", keys, &err) != 0 ||
	    jsonx_get_string(body, "", "name", 1, FSM_NAME_MAX, &name, &err) != 0 ||
	    jsonx_get_string(body, "", "role", 1, 16, &role, &err) != 0 ||
	    jsonx_get_int(body, "", "ttl_s", 0, 1, FSM_TOKEN_TTL_MAX_S, &ttl_s, &err) != 0) {
		json_decref(body);
		call_yard_error(call, &err);
		return;
	}
	if (!fsm_role_valid(role)) {
		call_error(call, 400, "role",
		           "role: '%s' is not one of admin, operator, user, security, agent", role);
		json_decref(body);
		return;
	}
	unsigned char raw[32];
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
		json_decref(body);
		call_error(call, 500, NULL, "no randomness for a token secret");
		return;
	}
	sha256_to_hex(raw, call->secret); /* 64 hex characters of fresh randomness */
	sha256_hex(call->secret, strlen(call->secret), call->hash);
	json_t *args = json_pack("{s:s,s:s,s:s}", "name", name, "role", role, "hash", call->hash);
	if (ttl_s > 0) /* without it, the command older members apply too */
		json_object_set_new(args, "ttl_s", json_integer(ttl_s));
	call_submit(call, "token.create", args, token_created);
	json_decref(body);
}

static void h_tokens_list(struct call *call)
{
	struct yard_err err = {0};
	json_t *list = fsm_tokens_list(call->s->fsm, &err);
	if (list == NULL)
		call_yard_error(call, &err);
	else
		call_json(call, 200, list);
}

static void h_tokens_revoke(struct call *call)
{
	call_submit(call, "token.revoke", json_pack("{s:s}", "id", call->params[0]),
	            call_answer_result);
}

/* ---- agents and nodes ---- */

static void node_registered(struct call *call, const json_t *result)
{
	if (json_object_get(result, "error") != NULL) {
		call_answer_result(call, result);
		return;
	}
	const char *hash = json_string_value(json_object_get(result, "hash"));
	if (hash == NULL || strcmp(hash, call->hash) != 0) {
		call_error(
		    call, 409, NULL,
		    "this X-Request-Id already registered the node; its token was shown once");
		return;
	}
	json_t *body = json_deep_copy(json_object_get(result, "body"));
	json_object_set_new(body, "node_token", json_string(call->secret));
	call_json(call, 200, body);
}

/* POST /v1/agents/register with a join token: the node's record (replicated) and a fresh
 * node token, stored only as its hash. Registering the same name again keeps the node and
 * replaces its token, unless the node's agent is live (heard within node_suspect_ms): then
 * a second agent runs under that name, and replacing the token would make the two take
 * turns shutting each other out; it is refused (409) instead, and the agent that lost its
 * token gets in once the old one has gone quiet. The state machine re-validates every
 * field (fsm_cluster.c). */
static void h_agents_register(struct call *call)
{
	static const char *const keys[] = {"name",    "host",   "port_base", "version",
	                                   "devices", "labels", NULL};
	struct yard_err err = {0};
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	const char *name = NULL, *host = NULL, *version = "";
	int64_t port_base = 0;
	if (jsonx_only_keys(body, "", keys, &err) != 0 ||
	    jsonx_get_string(body, "", "name", 1, FSM_NAME_MAX, &name, &err) != 0 ||
	    jsonx_get_string(body, "", "host", 1, 63, &host, &err) != 0 ||
	    jsonx_get_int(body, "", "port_base", 1, 1, 65535 - 64, &port_base, &err) != 0 ||
	    jsonx_get_string(body, "", "version", 0, 31, &version, &err) != 0) {
		json_decref(body);
		call_yard_error(call, &err);
		return;
	}
	int64_t ago_ms = 0;
	if (call->s->sched != NULL && sched_node_live(call->s->sched, name, &ago_ms)) {
		log_warn("registration of node %s refused: its agent heartbeated %lld ms ago", name,
		         (long long)ago_ms);
		call_error(
		    call, 409, "name",
		    "name: node %s is live (its agent heartbeated %lld ms ago): another agent "
		    "already runs under this name; stop it or give this agent another --name "
		    "(a node silent for the node-suspect time can register again)",
		    name, (long long)ago_ms);
		json_decref(body);
		return;
	}
	unsigned char raw[32];
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
		json_decref(body);
		call_error(call, 500, NULL, "no randomness for a node token");
		return;
	}
	sha256_to_hex(raw, call->secret);
	sha256_hex(call->secret, strlen(call->secret), call->hash);
	json_t *args = json_pack("{s:s,s:s,s:I,s:s,s:O,s:s}", "name", name, "host", host,
	                         "port_base", (json_int_t)port_base, "version", version, "devices",
	                         json_object_get(body, "devices") ? json_object_get(body, "devices")
	                                                          : json_null(),
	                         "token_hash", call->hash);
	if (json_object_get(body, "labels") != NULL)
		json_object_set(args, "labels", json_object_get(body, "labels"));
	json_decref(body);
	call_submit(call, "node.register", args, node_registered);
}

/* POST /v1/agents/heartbeat with a node token: soft state only, nothing replicated; the
 * answer is the node's complete desired set, computed from committed placements. */
static void h_agents_heartbeat(struct call *call)
{
	struct yard_err err = {0};
	json_t *body = scheduler_body(call, "");
	if (body == NULL)
		return;
	size_t len = 0;
	char *answer = sched_heartbeat_text(call->s->sched, call->actor, body, &len, &err);
	json_decref(body);
	if (answer == NULL)
		call_yard_error(call, &err);
	else
		call_text(call, 200, "application/json", answer, len);
}

/* In its turn among the deferred requests: the desired set as of now (a leadership lost
 * meanwhile is a 503 like any other). */
static void watch_desired_answer(struct call *call)
{
	struct yard_err err = {0};
	size_t len = 0;
	char *text = sched_watch_desired_text(call->s->sched, call->actor,
	                                      call->watch_tag[0] ? call->watch_tag : NULL,
	                                      call->watch_shared, &len, &err);
	if (text == NULL)
		call_yard_error(call, &err);
	else
		call_text(call, 200, "application/json", text, len);
}

static void watch_answered(void *data, int status, uint64_t version)
{
	struct call *call = data;
	if (status != 0)
		call_error(call, 503, NULL, "this controller stopped leading; watch at the leader");
	else if (call->watch_desired &&
	         (call->watch_version < 0 || (uint64_t)call->watch_version != version))
		http_defer(call, watch_desired_answer); /* not in the apply that brought the news */
	else if (sched_node_nudged(call->s->sched, call->actor))
		call_json(call, 200,
		          json_pack("{s:I,s:b}", "version", (json_int_t)version, "heartbeat", 1));
	else
		call_json(call, 200, json_pack("{s:I}", "version", (json_int_t)version));
}

/* POST /v1/agents/watch with a node token: {"version": V, "wait_ms": W} is answered
 * {"version": V'} as soon as the node's desired set may have changed since V (at once when
 * V is not the current version, e.g. -1), or after W ms with V unchanged. An agent keeps
 * one watch waiting and heartbeats whenever the version changes, so a placed rank starts
 * within a round trip instead of at the node's next regular heartbeat. With "desired": true
 * (and the optional "desired_tag" and "desired_shared" of a heartbeat) an answer with a new
 * version carries the node's desired set, as a heartbeat answer does, and the agent needs
 * no heartbeat to fetch it; it is built among the deferred heartbeats, as of its turn.
 * "heartbeat": true in an answer asks the agent to heartbeat now: its answer brings what a
 * watch does not carry (a drain command, a rollout's upgrade or rollback offer).
 * Soft state of the leader: nothing is replicated. */
#define WATCH_MAX_WAIT_MS 60000
static void h_agents_watch(struct call *call)
{
	static const char *const keys[] = {"version",     "wait_ms",        "desired",
	                                   "desired_tag", "desired_shared", NULL};
	struct yard_err err = {0};
	json_t *body = scheduler_body(call, "");
	if (body == NULL)
		return;
	int64_t version = -1, wait_ms = 0;
	const char *tag = "";
	if (jsonx_only_keys(body, "", keys, &err) != 0 ||
	    jsonx_get_int(body, "", "version", 1, -1, INT64_MAX, &version, &err) != 0 ||
	    jsonx_get_int(body, "", "wait_ms", 1, 0, WATCH_MAX_WAIT_MS, &wait_ms, &err) != 0 ||
	    jsonx_get_bool(body, "", "desired", 0, &call->watch_desired, &err) != 0 ||
	    jsonx_get_bool(body, "", "desired_shared", 0, &call->watch_shared, &err) != 0 ||
	    jsonx_get_string(body, "", "desired_tag", 0, 16, &tag, &err) != 0) {
		json_decref(body);
		call_yard_error(call, &err);
		return;
	}
	yard_strcopy(call->watch_tag, sizeof call->watch_tag, tag);
	call->watch_version = version;
	json_decref(body);
	if (sched_node_watch(call->s->sched, call->actor, version, (uint64_t)wait_ms,
	                     watch_answered, call, &err) != 0)
		call_yard_error(call, &err);
}

static void h_nodes_list(struct call *call)
{
	struct yard_err err = {0};
	json_t *nodes = fsm_nodes_list(call->s->fsm, &err);
	if (nodes == NULL) {
		call_yard_error(call, &err);
		return;
	}
	size_t i;
	json_t *node;
	json_array_foreach(nodes, i, node) if (call->s->sched != NULL)
	    sched_overlay_node(call->s->sched, node);
	call_json(call, 200, json_pack("{s:o}", "nodes", nodes));
}

static void h_nodes_get(struct call *call)
{
	struct yard_err err = {0};
	json_t *node = fsm_node_get(call->s->fsm, call->params[0], &err);
	if (node == NULL) {
		call_yard_error(call, &err);
		return;
	}
	if (call->s->sched != NULL)
		sched_overlay_node(call->s->sched, node);
	call_json(call, 200, node);
}

static void h_nodes_cordon(struct call *call)
{
	call_submit(call, "node.cordon",
	            json_pack("{s:s,s:b}", "id", call->params[0], "cordoned", 1),
	            call_answer_result);
}

static void h_nodes_uncordon(struct call *call)
{
	call_submit(call, "node.cordon",
	            json_pack("{s:s,s:b}", "id", call->params[0], "cordoned", 0),
	            call_answer_result);
}

/* Asks the node's agent to measure its rates again (sched_node_probe): answered by the leader
 * at once, 202; the new rates show in GET /v1/nodes/ID's "perf" once the agent reports them. */
static void h_nodes_probe(struct call *call)
{
	struct yard_err err = {0};
	int64_t request = 0;
	if (call->s->sched == NULL) {
		call_error(call, 503, NULL, "this member runs no scheduler");
		return;
	}
	if (sched_node_probe(call->s->sched, call->params[0], &request, &err) != 0) {
		call_yard_error(call, &err);
		return;
	}
	call_json(call, 202,
	          json_pack("{s:s,s:I,s:s}", "node", call->params[0], "request",
	                    (json_int_t)request, "message",
	                    "its agent measures the node again as soon as no rank runs there; the "
	                    "leader plans with the new rates once its heartbeat brings them"));
}

static void h_nodes_drain(struct call *call)
{
	call_submit(call, "node.drain", json_pack("{s:s}", "id", call->params[0]),
	            call_answer_result);
}

/* ---- debug ---- */

static void h_digest(struct call *call)
{
	struct yard_err err = {0};
	char hex[SHA256_HEX_LEN + 1];
	if (fsm_digest(call->s->fsm, hex, &err) != 0) {
		call_yard_error(call, &err);
		return;
	}
	struct consensus *c = call->s->cons;
	call_json(call, 200,
	          json_pack("{s:I,s:s,s:I,s:I}", "id", (json_int_t)c->cfg.id, "digest", hex,
	                    "applied_index", (json_int_t)raft_last_applied(&c->raft),
	                    "commit_index", (json_int_t)c->raft.commit_index));
}

/* The authorisation table: every route, its roles, and how it is routed. */
const struct route api_routes[] = {
    {"GET", "/healthz", 0, ROUTE_LOCAL, h_healthz, NULL, BODY_HANDLER},
    {"GET", "/", 0, ROUTE_LOCAL, dashboard_serve, "*", BODY_HANDLER}, /* static files, no data */
    {"GET", "/assets/*", 0, ROUTE_LOCAL, dashboard_serve, "*", BODY_HANDLER},
    {"GET", "/metrics", ROLES_ANY, ROUTE_LOCAL, h_metrics, NULL, BODY_HANDLER},
    {"GET", "/v1/cluster", ROLES_ANY, ROUTE_LOCAL, h_cluster, NULL, BODY_HANDLER},
    {"POST", "/v1/cluster/members", ROLE_ADMIN, ROUTE_WRITE, h_members_add, NULL, BODY_HANDLER},
    {"DELETE", "/v1/cluster/members/*", ROLE_ADMIN, ROUTE_WRITE, h_members_remove, NULL, BODY_NONE},
    {"POST", "/v1/cluster/transfer", ROLE_ADMIN, ROUTE_WRITE, h_transfer, NULL, BODY_HANDLER},
    {"POST", "/v1/jobs", ROLES_JOBS, ROUTE_WRITE, h_jobs_submit, NULL, BODY_HANDLER},
    {"GET", "/v1/jobs", ROLES_JOBS, ROUTE_READ, h_jobs_list, "state after limit", BODY_HANDLER},
    {"GET", "/v1/jobs/*", ROLES_JOBS, ROUTE_READ, h_jobs_get, NULL, BODY_HANDLER},
    {"DELETE", "/v1/jobs/*", ROLES_JOBS, ROUTE_WRITE, h_jobs_delete, NULL, BODY_NONE},
    {"POST", "/v1/jobs/*/cancel", ROLES_JOBS, ROUTE_WRITE, h_jobs_cancel, NULL, BODY_NONE},
    {"POST", "/v1/jobs/*/checkpoint", ROLES_JOBS, ROUTE_WRITE, h_jobs_checkpoint, NULL, BODY_NONE},
    {"GET", "/v1/jobs/*/metrics", ROLES_JOBS, ROUTE_READ, h_jobs_metrics, "after limit",
     BODY_HANDLER},
    {"GET", "/v1/jobs/*/timeline", ROLES_JOBS, ROUTE_READ, h_jobs_timeline, NULL, BODY_HANDLER},
    {"GET", "/v1/jobs/*/logs", ROLES_JOBS, ROUTE_READ, h_jobs_logs,
     "rank generation offset max_bytes", BODY_HANDLER},
    /* checkpoints of the "controller" store (api_ckpt.c): a node uploads the shards of the
     * ranks it runs (the state machine checks which) */
    {"GET", "/v1/jobs/*/checkpoints", ROLES_JOBS, ROUTE_READ, h_checkpoints_list, NULL,
     BODY_HANDLER},
    {"POST", "/v1/jobs/*/checkpoints/*/shards/*", ROLE_NODE, ROUTE_WRITE,
     h_checkpoint_shard_declare, NULL, BODY_HANDLER},
    {"PUT", "/v1/jobs/*/checkpoints/*/shards/*/chunks/*", ROLE_NODE, ROUTE_WRITE,
     h_checkpoint_shard_chunk, NULL, BODY_HANDLER},
    {"POST", "/v1/jobs/*/checkpoints/*/shards/*/commit", ROLE_NODE, ROUTE_WRITE,
     h_checkpoint_shard_commit, NULL, BODY_NONE},
    {"GET", "/v1/jobs/*/checkpoints/*/shards/*", ROLES_JOBS | ROLE_NODE, ROUTE_READ,
     h_checkpoint_shard_get, NULL, BODY_HANDLER},
    {"POST", "/v1/plan", ROLES_JOBS, ROUTE_WRITE, h_plan, "limit",
     BODY_HANDLER}, /* leader: measured rates */
    {"GET", "/v1/events", ROLE_ADMIN | ROLE_OPERATOR | ROLE_SECURITY, ROUTE_READ, h_events,
     "job after limit last", BODY_HANDLER},
    {"POST", "/v1/tokens", ROLE_ADMIN, ROUTE_WRITE, h_tokens_create, NULL, BODY_HANDLER},
    {"GET", "/v1/tokens", ROLE_ADMIN, ROUTE_READ, h_tokens_list, NULL, BODY_HANDLER},
    {"DELETE", "/v1/tokens/*", ROLE_ADMIN, ROUTE_WRITE, h_tokens_revoke, NULL, BODY_NONE},
    {"GET", "/v1/debug/digest", ROLE_ADMIN, ROUTE_LOCAL, h_digest, NULL, BODY_HANDLER},
    {"GET", "/v1/debug/database", ROLE_ADMIN, ROUTE_READ, h_database, NULL, BODY_HANDLER},
    {"POST", "/v1/agents/register", ROLE_AGENT, ROUTE_WRITE, h_agents_register, NULL, BODY_HANDLER},
    {"POST", "/v1/agents/heartbeat", ROLE_NODE, ROUTE_DEFERRED_WRITE, h_agents_heartbeat, NULL,
     BODY_HANDLER},
    {"POST", "/v1/agents/watch", ROLE_NODE, ROUTE_WRITE, h_agents_watch, NULL, BODY_HANDLER},
    {"GET", "/v1/nodes", ROLES_ANY, ROUTE_READ, h_nodes_list, NULL, BODY_HANDLER},
    {"GET", "/v1/nodes/*", ROLES_ANY, ROUTE_READ, h_nodes_get, NULL, BODY_HANDLER},
    {"POST", "/v1/nodes/*/cordon", ROLE_ADMIN | ROLE_OPERATOR, ROUTE_WRITE, h_nodes_cordon, NULL,
     BODY_NONE},
    {"POST", "/v1/nodes/*/uncordon", ROLE_ADMIN | ROLE_OPERATOR, ROUTE_WRITE, h_nodes_uncordon,
     NULL, BODY_NONE},
    /* builds, advisories, audit (api_store.c): the roles here let a principal in; what an
     * embargo hides from it is decided there */
    {"POST", "/v1/builds", ROLE_ADMIN | ROLE_SECURITY, ROUTE_WRITE, h_builds_create, NULL,
     BODY_HANDLER},
    {"PUT", "/v1/builds/*/chunks/*", ROLE_ADMIN | ROLE_SECURITY, ROUTE_WRITE, h_builds_chunk, NULL,
     BODY_HANDLER},
    {"POST", "/v1/builds/*/commit", ROLE_ADMIN | ROLE_SECURITY, ROUTE_WRITE, h_builds_commit, NULL,
     BODY_NONE},
    {"DELETE", "/v1/builds/*", ROLE_ADMIN | ROLE_SECURITY, ROUTE_WRITE, h_builds_delete, NULL,
     BODY_NONE},
    {"GET", "/v1/builds", ROLES_ANY, ROUTE_READ, h_builds_list, NULL, BODY_HANDLER},
    {"GET", "/v1/builds/*", ROLES_ANY | ROLE_NODE, ROUTE_READ, h_builds_get, NULL, BODY_HANDLER},
    {"GET", "/v1/builds/*/binary", ROLES_ANY | ROLE_NODE, ROUTE_READ, h_builds_binary, NULL,
     BODY_HANDLER},
    {"POST", "/v1/advisories", ROLE_ADMIN | ROLE_SECURITY, ROUTE_WRITE, h_advisories_create, NULL,
     BODY_HANDLER},
    {"GET", "/v1/advisories", ROLES_ANY, ROUTE_READ, h_advisories_list, NULL, BODY_HANDLER},
    {"GET", "/v1/advisories/*", ROLES_ANY, ROUTE_READ, h_advisories_get, NULL, BODY_HANDLER},
    {"POST", "/v1/advisories/*/embargo", ROLE_SECURITY, ROUTE_WRITE, h_advisories_embargo, NULL,
     BODY_HANDLER},
    {"POST", "/v1/advisories/*/share", ROLE_SECURITY, ROUTE_WRITE, h_advisories_share, NULL,
     BODY_HANDLER},
    {"POST", "/v1/advisories/*/publish", ROLE_SECURITY, ROUTE_WRITE, h_advisories_publish, NULL,
     BODY_NONE},
    {"GET", "/v1/audit", ROLE_ADMIN | ROLE_SECURITY, ROUTE_READ, h_audit, "after limit reads",
     BODY_HANDLER},
    {"GET", "/v1/events/verify", ROLE_ADMIN | ROLE_SECURITY, ROUTE_READ, h_events_verify, NULL,
     BODY_HANDLER},
    {"POST", "/v1/nodes/*/drain", ROLE_ADMIN | ROLE_OPERATOR, ROUTE_WRITE, h_nodes_drain, NULL,
     BODY_NONE},
    {"POST", "/v1/nodes/*/probe", ROLE_ADMIN | ROLE_OPERATOR, ROUTE_WRITE, h_nodes_probe, NULL,
     BODY_NONE},
    {"POST", "/v1/rollouts", ROLES_ROLLOUT, ROUTE_WRITE, h_rollouts_start, NULL, BODY_HANDLER},
    {"GET", "/v1/rollouts", ROLES_ROLLOUT, ROUTE_READ, h_rollouts_list, NULL, BODY_HANDLER},
    {"GET", "/v1/rollouts/*", ROLES_ROLLOUT, ROUTE_READ, h_rollouts_get, NULL, BODY_HANDLER},
    {"POST", "/v1/rollouts/*/pause", ROLES_ROLLOUT, ROUTE_WRITE, h_rollouts_pause, NULL,
     BODY_HANDLER},
    {"POST", "/v1/rollouts/*/resume", ROLES_ROLLOUT, ROUTE_WRITE, h_rollouts_resume, NULL,
     BODY_HANDLER},
    {"POST", "/v1/rollouts/*/abort", ROLES_ROLLOUT, ROUTE_WRITE, h_rollouts_abort, NULL,
     BODY_HANDLER},
    {"POST", "/v1/rollouts/*/rollback", ROLES_ROLLOUT, ROUTE_WRITE, h_rollouts_rollback, NULL,
     BODY_HANDLER},
};
const int api_routes_count = (int)(sizeof api_routes / sizeof api_routes[0]);
