/* heartbeat.c: registration and the heartbeat cycle. The loop builds the request from the
 * rank table, a thread-pool worker does the HTTP round trip, and the answer (the complete
 * set of ranks this node must run) is applied back on the loop. One call is in flight at a
 * time; a slow controller delays heartbeats, it never piles them up. Heartbeats also carry
 * the next piece of every rank's log; a piece counts as sent only once a heartbeat carrying
 * it was answered 200, and a new leader (a changed "leader_id") gets every log's tail again.
 * Heartbeats go every --heartbeat-ms, or further apart when the leader asks for it
 * (heartbeat_min_ms: a large cluster); the timer ticks every --heartbeat-ms either way. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/common.h"
#include "scheduler/desired.h"

enum call_kind { CALL_REGISTER, CALL_HEARTBEAT };

struct call {
	uv_work_t work;
	struct agent *agent;
	enum call_kind kind;
	char token[256];
	json_t *body;
	long status;
	json_t *resp;
	int rc;
	struct yard_err err;
	int announces; /* the body says the agent execs a new build next (upgrade.c) */
	unsigned perf_version; /* the agent's perf_version when the body was written */
};

static void call_run(uv_work_t *w)
{
	struct call *c = (struct call *)w;
	const char *path =
	    c->kind == CALL_REGISTER ? "/v1/agents/register" : "/v1/agents/heartbeat";
	c->rc = agent_http_post(c->agent->cfg.controllers, c->agent->leader_url,
	                        sizeof c->agent->leader_url, c->token, path, c->body, &c->status,
	                        &c->resp, &c->err);
}

static const char *resp_error(const json_t *resp)
{
	const char *e = json_string_value(json_object_get(resp, "error"));
	return e != NULL ? e : "(no error message)";
}

static void save_node_token(struct agent *a)
{
	char path[PATH_MAX + 16];
	int fd;
	snprintf(path, sizeof path, "%s/node.token", a->cfg.data_dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, a->node_token, strlen(a->node_token)) < 0)
		log_error("cannot save the node token to %s", path);
	if (fd >= 0)
		close(fd);
}

static void save_registered_labels(struct agent *a)
{
	char path[PATH_MAX + 16];
	json_t *labels = agent_labels(a);
	snprintf(path, sizeof path, "%s/node.labels", a->cfg.data_dir);
	if (json_dump_file(labels, path, JSON_COMPACT | JSON_SORT_KEYS) != 0)
		log_error("cannot save the node's labels to %s", path);
	json_decref(labels);
}

char *agent_registered_labels(const struct agent *a)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/node.labels", a->cfg.data_dir);
	json_t *saved = json_load_file(path, 0, NULL);
	if (!json_is_object(saved)) {
		json_decref(saved);
		saved = json_object();
	}
	char *text = json_dumps(saved, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(saved);
	return text;
}

/* Whether the device of desired rank `d` is still held by a rank that has not exited (a
 * rank of another job, or of another generation, stopping within its grace): the two would
 * share the device's memory and its rank port (port_base + device), so the new one waits
 * for the old one's exit, which brings the next heartbeat at once. */
static int device_held(struct agent *a, const char *job, int rank, const json_t *d)
{
	const json_t *device = json_object_get(d, "device");
	struct agent_rank *holder =
	    json_is_integer(device) ? ranks_on_device(a, (int)json_integer_value(device)) : NULL;
	if (holder == NULL)
		return 0;
	char note[sizeof a->device_wait_note];
	snprintf(note, sizeof note, "rank %d of %s waits for device %d: rank %d of %s (pid %d) %s",
	         rank, job, (int)json_integer_value(device), holder->rank, holder->job,
	         (int)holder->pid, holder->stopping ? "is stopping" : "still runs there");
	if (strcmp(note, a->device_wait_note) != 0) {
		if (holder->stopping)
			log_info("%s", note);
		else
			log_warn("%s", note);
		snprintf(a->device_wait_note, sizeof a->device_wait_note, "%s", note);
	}
	return 1;
}

void heartbeat_reconcile(struct agent *a, const json_t *desired)
{
	size_t i;
	json_t *d;

	if (!json_is_array(desired)) {
		log_warn("heartbeat answer without a desired array: ignored");
		return;
	}
	ranks_forget_exited(a, desired);
	/* stop what is running but no longer wanted (or wanted in a newer generation) */
	for (int k = 0; k < AGENT_MAX_RANKS; k++) {
		struct agent_rank *r = &a->ranks[k];
		int wanted = 0;
		if (!r->in_use || r->exited)
			continue;
		json_array_foreach(desired, i, d)
		{
			const char *job = json_string_value(json_object_get(d, "job"));
			if (job != NULL && strcmp(job, r->job) == 0 &&
			    json_integer_value(json_object_get(d, "rank")) == r->rank &&
			    json_integer_value(json_object_get(d, "generation")) == r->generation)
				wanted = 1;
		}
		if (!wanted)
			ranks_stop(a, r, "no longer assigned to this node");
	}
	/* start what is missing; a rank of the same job and number that is still stopping
	 * holds its port, so its successor starts on a later heartbeat */
	json_array_foreach(desired, i, d)
	{
		const char *job = json_string_value(json_object_get(d, "job"));
		int rank = (int)json_integer_value(json_object_get(d, "rank"));
		struct agent_rank *r;
		struct yard_err err = {0};
		if (job == NULL)
			continue;
		r = ranks_find(a, job, rank);
		if (r != NULL) {
			/* an adopted rank learns its window size and fencing here */
			if (r->generation == json_integer_value(json_object_get(d, "generation"))) {
				metrics_set_window(r, json_object_get(d, "spec"));
				ranks_set_spec(r, json_object_get(d, "spec"));
			}
			continue;
		}
		if (device_held(a, job, rank, d))
			continue; /* started once the rank on its device has exited */
		if (!ckpt_ready(a, desired, d))
			continue; /* its checkpoint is still being downloaded */
		if (ranks_start(a, d, &err) != 0)
			log_error("%s", err.msg);
	}
}

/* A leader that did not answer before holds none of the logs: send their tails again. */
static void apply_leader_id(struct agent *a, const char *leader_id)
{
	if (leader_id == NULL || strcmp(leader_id, a->leader_id) == 0)
		return;
	if (a->leader_id[0] != '\0') {
		log_info("leader changed (%s -> %s): sending the last %lld bytes of every rank log "
		         "again",
		         a->leader_id, leader_id, (long long)a->cfg.log_resend_bytes);
		ranks_logs_rewind(a);
	}
	snprintf(a->leader_id, sizeof a->leader_id, "%s", leader_id);
}

/* Commands ride on heartbeat answers; "drain" says the node is being drained (its ranks
 * move elsewhere through the desired set: nothing else to do here but say so); "checkpoint"
 * {job, generation, request} asks the ranks of a job's generation for a checkpoint before the
 * controller restarts them on purpose (ranks_request_checkpoint); "probe" {request} asks for
 * the node's rates to be measured again (perf_ask). */
static void apply_commands(struct agent *a, const json_t *commands)
{
	size_t i;
	json_t *cmd;
	int draining = 0;
	json_array_foreach(commands, i, cmd)
	{
		const char *op = json_string_value(json_object_get(cmd, "op"));
		const char *job = json_string_value(json_object_get(cmd, "job"));
		const json_t *gen = json_object_get(cmd, "generation");
		const json_t *req = json_object_get(cmd, "request");
		const json_t *after = json_object_get(cmd, "after"); /* absent from older leaders */
		if (op != NULL && strcmp(op, "drain") == 0)
			draining = 1;
		else if (op != NULL && strcmp(op, "probe") == 0 && json_is_integer(req))
			perf_ask(a, json_integer_value(req));
		else if (op != NULL && strcmp(op, "checkpoint") == 0 && job != NULL &&
		         json_is_integer(gen) && json_is_integer(req))
			ranks_request_checkpoint(
			    a, job, json_integer_value(gen), json_integer_value(req),
			    json_is_integer(after) ? json_integer_value(after) : INT64_MAX);
		else
			log_warn("heartbeat answer: unknown command '%s' ignored", op ? op : "?");
	}
	if (draining != a->draining)
		log_info("%s", draining
		                   ? "this node is being drained: its ranks move to other nodes"
		                   : "this node is no longer being drained");
	a->draining = draining;
}

/* The desired set an answer gives: its "desired" (made whole, kept with its "desired_tag" for
 * the answers that follow), or the kept set when it says "desired_unchanged"; NULL when it
 * has neither (heartbeat_reconcile then changes nothing and says so). */
static const json_t *desired_of(struct agent *a, const json_t *resp)
{
	const json_t *given = json_object_get(resp, "desired");
	const char *tag = json_string_value(json_object_get(resp, "desired_tag"));
	char why[200] = "";
	json_t *desired =
	    json_is_array(given)
	        ? desired_whole(given, json_object_get(resp, "desired_shared"), why, sizeof why)
	        : NULL;
	if (why[0] != '\0')
		log_warn("heartbeat answer ignored: %s", why);
	if (desired != NULL) {
		json_decref(a->desired);
		a->desired = desired;
		snprintf(a->desired_tag, sizeof a->desired_tag, "%s",
		         tag != NULL && strlen(tag) < sizeof a->desired_tag ? tag : "");
		return desired;
	}
	if (json_is_true(json_object_get(resp, "desired_unchanged")) && a->desired != NULL &&
	    tag != NULL && strcmp(tag, a->desired_tag) == 0)
		return a->desired;
	a->desired_tag[0] = '\0'; /* the next answer carries the set */
	return NULL;
}

int heartbeat_apply_answer(struct agent *a, const json_t *resp, const char *version_key)
{
	const char *leader = json_string_value(json_object_get(resp, "leader_id"));
	const json_t *v = json_object_get(resp, version_key);
	int64_t version = json_is_integer(v) ? json_integer_value(v) : -1;
	if (desired_stale(a->desired_leader, a->desired_version, leader, version)) {
		log_debug("an answer's desired set of version %lld is older than the one applied "
		          "(%lld): ignored",
		          (long long)version, (long long)a->desired_version);
		return 0;
	}
	const json_t *desired = desired_of(a, resp);
	if (desired != NULL) {
		snprintf(a->desired_leader, sizeof a->desired_leader, "%s",
		         leader != NULL && strlen(leader) < sizeof a->desired_leader ? leader : "");
		a->desired_version = version;
	}
	heartbeat_reconcile(a, desired);
	return 1;
}

/* The longest interval between heartbeats a leader may ask for (its answers beyond it are
 * refused with a warning): the suspect and down times grow with it. */
#define HEARTBEAT_MIN_MAX_MS 60000

/* The leader asks every agent to leave at least heartbeat_min_ms between heartbeats, more
 * as its cluster grows (yardd --max-heartbeats-per-s); --heartbeat-ms stays the shortest.
 * An answer without it (an older leader, or none asked) brings back --heartbeat-ms. */
static void heartbeat_follow_leader(struct agent *a, const json_t *asked)
{
	uint64_t every = (uint64_t)a->cfg.heartbeat_ms;
	if (asked != NULL && (!json_is_integer(asked) || json_integer_value(asked) < 0 ||
	                      json_integer_value(asked) > HEARTBEAT_MIN_MAX_MS)) {
		if (!a->heartbeat_min_refused)
			log_warn("heartbeat answer: heartbeat_min_ms is not an integer in 0..%d: "
			         "ignored (heartbeats stay %llu ms apart)",
			         HEARTBEAT_MIN_MAX_MS, (unsigned long long)a->heartbeat_every_ms);
		a->heartbeat_min_refused = 1;
		return;
	}
	a->heartbeat_min_refused = 0;
	if (asked != NULL && (uint64_t)json_integer_value(asked) > every)
		every = (uint64_t)json_integer_value(asked);
	if (every == a->heartbeat_every_ms)
		return;
	if (asked != NULL)
		log_info("heartbeats %llu ms apart from now (the leader asks for at least %lld ms, "
		         "--heartbeat-ms %d)",
		         (unsigned long long)every, (long long)json_integer_value(asked),
		         a->cfg.heartbeat_ms);
	else
		log_info("heartbeats %llu ms apart from now (--heartbeat-ms: the leader asks for "
		         "no longer interval)",
		         (unsigned long long)every);
	/* The next regular one follows the new pace (one brought forward stays). Going over to
	 * a longer interval, it waits a random part of the difference once: agents whose
	 * heartbeats were spread over the shorter interval then spread over the longer one
	 * instead of coming in bursts. */
	uint64_t gap = every;
	if (every > a->heartbeat_every_ms) {
		uint64_t r = 0;
		if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
			r = yard_now_mono_ms() * 2654435761u ^ (uint64_t)getpid();
		gap = a->heartbeat_every_ms + r % (every - a->heartbeat_every_ms + 1);
	}
	if (a->heartbeat_due_mono_ms >= a->heartbeat_sent_mono_ms + a->heartbeat_every_ms)
		a->heartbeat_due_mono_ms = a->heartbeat_sent_mono_ms + gap;
	a->heartbeat_every_ms = every;
}

#define UNAVAILABLE_LOG_EVERY_MS 60000

/* A call that reached no controller (all of them down, a partition) or one without a leader
 * (503: quorum lost): logged at once, then once a minute while it lasts rather than at every
 * heartbeat, and once when the controllers answer again. */
static void unavailable_note(struct agent *a, const char *msg)
{
	uint64_t now = yard_now_mono_ms();
	if (a->unavailable_calls++ == 0) {
		a->unavailable_since_mono_ms = a->unavailable_logged_mono_ms = now;
		log_warn("%s", msg);
	} else if (now - a->unavailable_logged_mono_ms >= UNAVAILABLE_LOG_EVERY_MS) {
		a->unavailable_logged_mono_ms = now;
		log_warn("%s (%u calls in a row over %.0f s)", msg, a->unavailable_calls,
		         (double)(now - a->unavailable_since_mono_ms) / 1000);
	}
}

static void unavailable_over(struct agent *a)
{
	if (a->unavailable_calls == 0)
		return;
	log_info("%s answers again, after %u call(s) that reached no controller or no leader "
	         "over %.1f s",
	         a->leader_url, a->unavailable_calls,
	         (double)(yard_now_mono_ms() - a->unavailable_since_mono_ms) / 1000);
	a->unavailable_calls = 0;
}

static void after_call(uv_work_t *w, int status)
{
	struct call *c = (struct call *)w;
	struct agent *a = c->agent;

	a->heartbeat_in_flight = 0;
	int again = a->heartbeat_again;
	a->heartbeat_again = 0;
	if (again == 2)
		heartbeat_now(a);
	else if (again)
		heartbeat_soon(a);
	if (c->kind == CALL_HEARTBEAT && (c->rc != 0 || c->status != 200))
		ranks_logs_done(a, 0); /* the pieces go again with the next heartbeat */
	int unavailable = c->rc != 0 || c->status == 503;
	if (!unavailable)
		unavailable_over(a);
	if (unavailable) {
		char msg[sizeof c->err.msg + 64];
		if (c->rc != 0)
			snprintf(msg, sizeof msg, "%s", c->err.msg);
		else
			snprintf(msg, sizeof msg, "%s to %s: HTTP 503: %s",
			         c->kind == CALL_REGISTER ? "registration" : "heartbeat",
			         a->leader_url, resp_error(c->resp));
		unavailable_note(a, msg); /* the next call goes at the tick */
	} else if (c->kind == CALL_REGISTER) {
		const char *token = json_string_value(json_object_get(c->resp, "node_token"));
		if (c->status == 200 && token != NULL) {
			snprintf(a->node_token, sizeof a->node_token, "%s", token);
			save_node_token(a);
			save_registered_labels(a);
			a->registered = 1;
			a->register_refusals = 0;
			a->last_ok_mono_ms = yard_now_mono_ms();
			a->desired_tag[0] = '\0';
			a->heartbeat_answered = 0; /* the watch waits for what the leader offers */
			log_info("registered as %s with %s", a->cfg.name, a->leader_url);
			heartbeat_now(a); /* whose answer says it, and starts the watch */
		} else {
			/* a 4xx (a wrong join token, a refused name) does not go away by asking
			 * again at once: back off; a 5xx (no leader yet) goes again at the tick */
			int refusal = c->status >= 400 && c->status < 500;
			int shift = a->register_refusals < 8 ? a->register_refusals : 8;
			uint64_t wait_ms = YARD_MIN((uint64_t)a->cfg.heartbeat_ms << shift, 5000);
			if (!refusal)
				wait_ms = (uint64_t)a->cfg.heartbeat_ms;
			a->register_refusals += refusal;
			a->register_retry_mono_ms = yard_now_mono_ms() + (refusal ? wait_ms : 0);
			log_error(
			    "registration refused by %s: HTTP %ld: %s (trying again in %.1f s)",
			    a->leader_url, c->status, resp_error(c->resp), (double)wait_ms / 1000);
		}
	} else if (c->status == 200) {
		a->last_ok_mono_ms = yard_now_mono_ms();
		upgrade_heartbeat_ok(a);
		/* pieces count as sent only when a leading scheduler kept them */
		const char *leader_id = json_string_value(json_object_get(c->resp, "leader_id"));
		ranks_logs_done(a, leader_id != NULL);
		apply_leader_id(a, leader_id);
		apply_commands(a, json_object_get(c->resp, "commands"));
		a->leader_offers_shared = json_is_true(json_object_get(c->resp, "offers_shared"));
		a->leader_offers_watch_desired =
		    json_is_true(json_object_get(c->resp, "offers_watch_desired"));
		if (leader_id != NULL) /* a leading scheduler's answer says what it asks */
			heartbeat_follow_leader(a, json_object_get(c->resp, "heartbeat_min_ms"));
		const json_t *want_perf = json_object_get(c->resp, "want_perf");
		if (want_perf != NULL) {
			a->leader_has_perf = json_is_false(want_perf);
			/* rates measured while this heartbeat was on its way still go */
			if (c->perf_version == a->perf_version)
				a->perf_unwanted = a->leader_has_perf;
		}
		heartbeat_apply_answer(a, c->resp, "desired_version");
		if (json_object_get(c->resp, "upgrade") != NULL)
			upgrade_offer(a, json_object_get(c->resp, "upgrade"));
		if (json_object_get(c->resp, "worker_upgrade") != NULL)
			workerup_offer(a, json_object_get(c->resp, "worker_upgrade"));
		if (json_object_get(c->resp, "link_probe") != NULL)
			linkprobe_offer(a, json_object_get(c->resp, "link_probe"));
		a->heartbeat_answered = 1;
		watch_tick(a);
	} else if (c->status == 401 || c->status == 404) {
		log_warn("heartbeat refused (HTTP %ld: %s): registering again", c->status,
		         resp_error(c->resp));
		a->registered = 0;
		a->desired_tag[0] = '\0';
	} else {
		log_warn("heartbeat to %s: HTTP %ld: %s", a->leader_url, c->status,
		         resp_error(c->resp));
		const char *field = json_string_value(json_object_get(c->resp, "field"));
		/* a figure the leader will not take, unless the rates changed since it was sent */
		if (c->status == 400 && field != NULL && strncmp(field, "perf", 4) == 0) {
			if (c->perf_version == a->perf_version)
				perf_refused(a, resp_error(c->resp));
		} else if (c->status == 400)
			a->leader_offers_shared = 0; /* the next one without the optional field */
	}
	/* answered by a leading scheduler (leader_id), which keeps what the heartbeat said */
	int exec_next = c->announces && c->rc == 0 && c->status == 200 &&
	                json_string_value(json_object_get(c->resp, "leader_id")) != NULL;
	json_decref(c->body);
	json_decref(c->resp);
	free(c);
	if (exec_next)
		upgrade_announced(a); /* the leader heard it: exec the new build */
}

static json_t *register_body(const struct agent *a)
{
	json_t *devices = json_array();
	for (int d = 0; d < a->cfg.n_devices; d++)
		json_array_append_new(devices, json_pack("{s:i, s:s, s:I}", "index", d, "kind",
		                                         a->cfg.cuda ? "cuda" : "cpu", "memory_mb",
		                                         (json_int_t)a->cfg.device_memory_mb));
	return json_pack("{s:s, s:s, s:i, s:s, s:o, s:o}", "name", a->cfg.name, "host", a->cfg.host,
	                 "port_base", a->cfg.port_base, "version", a->cfg.version, "devices",
	                 devices, "labels", agent_labels(a));
}

static json_t *heartbeat_body(struct agent *a)
{
	struct statvfs vfs;
	json_int_t free_mb = -1;
	if (statvfs(a->cfg.data_dir, &vfs) == 0)
		free_mb = (json_int_t)((uint64_t)vfs.f_bavail * vfs.f_frsize >> 20);
	ckpt_hold_exits(a);
	json_t *body = json_pack("{s:s, s:s, s:I, s:b, s:o, s:o}", "node", a->cfg.name, "version",
	                         a->cfg.version, "free_disk_mb", free_mb, "draining", a->draining,
	                         "ranks", ranks_report(a), "logs", ranks_logs(a));
	json_t *upgrade = upgrade_report(a);
	if (upgrade != NULL)
		json_object_set_new(body, "upgrade", upgrade);
	json_object_set_new(body, "worker_version", json_string(a->worker.version));
	json_t *worker_upgrade = workerup_report(a);
	if (worker_upgrade != NULL)
		json_object_set_new(body, "worker_upgrade", worker_upgrade);
	if (a->perf != NULL && !a->perf_unwanted)
		json_object_set(body, "perf", a->perf);
	if (a->probe_listening)
		json_object_set_new(body, "probe_port", json_integer(a->cfg.probe_port));
	if (a->desired_tag[0] != '\0' && a->desired != NULL)
		json_object_set_new(body, "desired_tag", json_string(a->desired_tag));
	/* each job's shared variables and spec once per answer, not once per rank, from a
	 * leader that said it sends them */
	if (a->leader_offers_shared)
		json_object_set_new(body, "desired_shared", json_true());
	return body;
}

static void on_tick(uv_timer_t *t)
{
	struct agent *a = t->data;
	struct call *c;

	ranks_tick(a);
	if (!a->stopping) {
		ckpt_tick(a);
		perf_tick(a);
	}
	watch_tick(a);
	upgrade_tick(a);
	if (a->heartbeat_in_flight || a->stopping ||
	    buildinfo_fault(a->cfg.name) == BUILD_FAULT_NO_HEARTBEAT)
		return;
	/* not due: a tick comes every --heartbeat-ms, a heartbeat every heartbeat_every_ms
	 * (a quarter tick early counts as on time: the timer and this clock differ a little) */
	uint64_t now = yard_now_mono_ms();
	if (a->registered && now + (uint64_t)a->cfg.heartbeat_ms / 4 < a->heartbeat_due_mono_ms) {
		if (a->heartbeat_due_mono_ms - now < (uint64_t)a->cfg.heartbeat_ms)
			uv_timer_start(&a->heartbeat_timer, on_tick, a->heartbeat_due_mono_ms - now,
			               (uint64_t)a->cfg.heartbeat_ms);
		return;
	}
	if (!a->registered && now < a->register_retry_mono_ms)
		return; /* refused: the tick after the back-off sends it */
	c = calloc(1, sizeof *c);
	if (c == NULL)
		return;
	c->agent = a;
	if (!a->registered) {
		c->kind = CALL_REGISTER;
		snprintf(c->token, sizeof c->token, "%s", a->cfg.join_token);
		c->body = register_body(a);
	} else {
		c->kind = CALL_HEARTBEAT;
		snprintf(c->token, sizeof c->token, "%s", a->node_token);
		c->body = heartbeat_body(a);
		c->perf_version = a->perf_version;
		c->announces = upgrade_announcing(a);
		a->heartbeat_sent_mono_ms = now;
		a->heartbeat_due_mono_ms = now + a->heartbeat_every_ms;
	}
	a->heartbeat_in_flight = 1;
	if (uv_queue_work(a->loop, &c->work, call_run, after_call) != 0) {
		a->heartbeat_in_flight = 0;
		json_decref(c->body);
		free(c);
	}
}

/* A rank's exit reaches the controller with a heartbeat sent HEARTBEAT_SOON_MS later
 * (exits close together go in one), not up to a whole interval later: a finished gang's
 * devices are free, and a failed rank's restart begins, that much sooner. Early heartbeats
 * come at most every quarter interval, so a crash-looping rank cannot flood the controller
 * (a node of 8 ranks adds at most 3 heartbeats per interval). */
#define HEARTBEAT_SOON_MS 20

/* Brings the next heartbeat forward to delay_ms from now, but no sooner than min_gap_ms after
 * the previous one; while one is in flight, another follows it (again: 1 with
 * heartbeat_soon's spacing, 2 with heartbeat_now's). */
static void heartbeat_forward(struct agent *a, uint64_t delay_ms, uint64_t min_gap_ms,
                              int again)
{
	if (a->heartbeat_in_flight) {
		if (a->heartbeat_again < again) /* its answer may predate the exit or the news */
			a->heartbeat_again = again;
		return;
	}
	if (!uv_is_active((uv_handle_t *)&a->heartbeat_timer) || !a->registered)
		return;
	uint64_t now = yard_now_mono_ms();
	uint64_t at = YARD_MAX(now + delay_ms, a->heartbeat_sent_mono_ms + min_gap_ms);
	uint64_t tick_at = now + uv_timer_get_due_in(&a->heartbeat_timer);
	if (at >= YARD_MAX(a->heartbeat_due_mono_ms, tick_at))
		return; /* the regular one comes first */
	a->heartbeat_due_mono_ms = at;
	if (at < tick_at) /* else the tick before it sets the timer for it (on_tick) */
		uv_timer_start(&a->heartbeat_timer, on_tick, at - now,
		               (uint64_t)a->cfg.heartbeat_ms);
}

void heartbeat_soon(struct agent *a)
{
	heartbeat_forward(a, HEARTBEAT_SOON_MS, a->heartbeat_every_ms / 4, 1);
}

void heartbeat_now(struct agent *a)
{
	heartbeat_forward(a, 0, HEARTBEAT_SOON_MS, 2);
}

void heartbeat_start(struct agent *a)
{
	uv_timer_init(a->loop, &a->heartbeat_timer);
	a->heartbeat_timer.data = a;
	a->rank_exited = heartbeat_soon;
	a->heartbeat_every_ms = (uint64_t)a->cfg.heartbeat_ms;
	a->heartbeat_due_mono_ms = 0;
	uv_timer_start(&a->heartbeat_timer, on_tick, 0, (uint64_t)a->cfg.heartbeat_ms);
}
