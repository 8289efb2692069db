/* perf.c: the node's measured rates for the planner. At start the agent runs
 * `yard-worker --probe --devices N` (dataplane/probe.h: matmul rate through the trainer's own
 * matmul, two-process shared-memory and TCP allreduce through libyd) on the loop, bounded by a
 * kill timer, and keeps the answer with what it cannot measure alone added: the inter-node
 * link (configured --link-gbps, else the TCP loopback figure labelled "tcp-loopback" until
 * linkprobe.c has measured the link to a peer the leader named: "measured:PEER") and each
 * device's memory. Heartbeats carry the result as "perf" once it exists; a failed probe is
 * logged, heartbeats go on without it (the planner then names the node as unmeasured) and it
 * runs again (below). With --reprobe-s, rates that old are measured again when no rank runs
 * on the node (perf_tick): a node whose load or clocks changed is planned for with what it
 * does now, and no training is disturbed by the probe; a re-probe during which a rank
 * started is discarded (the two disturbed each other), and a failed one keeps the rates it
 * had. The first rates are kept even when a rank started while they were measured (a node
 * without rates is not planned for), but both were disturbed: such rates are measured again
 * as soon as no rank runs, whatever --reprobe-s says (at most once per --probe-retry-ms).
 * The next heartbeat carries the new rates, which replace the leader's. The leader's "probe"
 * command (yardctl node probe) asks for a re-probe now, whatever --reprobe-s says, taken as
 * soon as no rank runs (perf_ask); one a rank disturbed is taken again once none runs.
 * A probe the agent has no rates for (a retry after a failed probe or refused figures, or a
 * restart that found no saved rates) waits while ranks run as long as the leader has rates
 * for the node (its heartbeat answers say so: want_perf), which it plans with meanwhile: on
 * a machine busy enough to fail a probe, retries next to training ranks slowed them, and
 * failed again, for as long as the ranks ran. When the leader has none (a new node, a new
 * leader, refused figures), the probe runs whatever the node does: a node without rates is
 * not planned for, the devices its ranks leave free included.
 * Every rate kept is saved in the data dir (perf.json, with when it was measured). An agent
 * that restarts while its node trains (it re-adopted ranks: an upgrade, a crash) takes the
 * saved rates instead of probing: a probe would share the node's devices with the running
 * ranks for seconds, slowing the training (on every node of a rollout's wave) and measuring
 * a busy node. The saved rates age as if the agent had never stopped, and are measured again
 * as above once no rank runs and they are --reprobe-s old. Saved rates that do not fit (the
 * file unreadable, another device count or kind, a clock that went back) are set aside with
 * a warning, and the node is probed (as above: once no rank runs, if the leader has rates). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/common.h"

#define PERF_BUDGET_MS 1200
#define PERF_OUTPUT_MAX 8192
/* A probe that fails (on a machine busy with other work it may not finish in time) runs
 * again after a pause, PERF_ATTEMPTS times, each allowed twice the time of the one before (up
 * to 4x --probe-timeout-ms, 5 s by default); then every --probe-retry-ms for as long as the agent
 * runs: a node that gave up would never be planned for. */
#define PERF_ATTEMPTS 3
#define PERF_RETRY_MS 2000
#define PERF_SAVED "perf.json"

struct perf_run {
	struct agent *agent;
	uv_process_t process;
	uv_pipe_t out;
	uv_timer_t timer;
	char buf[PERF_OUTPUT_MAX];
	size_t len;
	int exited, closed_handles;
	int64_t exit_status;
	uint64_t started_ms;
};

static void handle_closed(uv_handle_t *h)
{
	struct perf_run *p = h->data;
	if (++p->closed_handles == 3)
		free(p);
}

/* A probe for an agent without rates: now, or, while ranks run and the leader has rates for
 * the node (or has not said yet), once none does or the leader has none (perf_tick); why:
 * what it is for. */
static void probe_when_idle(struct agent *a, const char *why)
{
	int running = ranks_running(a);
	if (running == 0 || a->leader_has_perf == 0) {
		if (running > 0)
			log_info(
			    "node probe (%s) while %d rank(s) run: the leader has no rates for "
			    "this node and does not plan for it without them",
			    why, running);
		else if (a->perf_idle_wait)
			log_info("node probe: no rank runs any more: probing the node");
		a->perf_idle_wait = 0;
		perf_start(a);
		return;
	}
	if (!a->perf_idle_wait)
		log_info("node probe (%s) waits: %d rank(s) run, and a probe would slow them and "
		         "measure a busy node; it starts once none does (the leader plans with the "
		         "rates it has meanwhile%s)",
		         why, running, a->leader_has_perf < 0 ? ", if it has any" : "");
	a->perf_idle_wait = 1;
}

static void on_retry(uv_timer_t *t)
{
	probe_when_idle(t->data, "again");
}

/* What the probe cannot measure alone: the inter-node link (configured, else the TCP loopback
 * figure; a link measured to a peer and saved stays, unless one is configured now) and each
 * device's memory. */
static void node_figures(struct agent *a, json_t *o)
{
	const char *source = json_string_value(json_object_get(o, "inter_source"));
	double tcp_bw = json_real_value(json_object_get(o, "tcp_bw_bytes_per_s"));
	double tcp_lat = json_real_value(json_object_get(o, "tcp_latency_s"));
	if (a->cfg.link_gbps > 0) {
		json_object_set_new(o, "inter_bw_bytes_per_s",
		                    json_real(a->cfg.link_gbps * 1e9 / 8));
		json_object_set_new(o, "inter_latency_s", json_real(tcp_lat));
		json_object_set_new(o, "inter_source", json_string("configured"));
	} else if (source == NULL || strncmp(source, "measured:", 9) != 0) {
		json_object_set_new(o, "inter_bw_bytes_per_s", json_real(tcp_bw));
		json_object_set_new(o, "inter_latency_s", json_real(tcp_lat));
		json_object_set_new(o, "inter_source", json_string("tcp-loopback"));
	}
	json_object_set_new(o, "device_memory_mb", json_integer(agent_device_memory_mb(&a->cfg)));
}

static void finish(struct perf_run *p)
{
	struct agent *a = p->agent;
	json_error_t jerr;
	json_t *o = NULL;
	p->buf[p->len] = '\0';
	if (p->exit_status == 0)
		o = json_loads(p->buf, 0, &jerr);
	/* a re-probe whose rates were refused meanwhile (perf_refused) counts as a first probe */
	int reprobe = a->perf_reprobe && a->perf != NULL;
	int answering = a->perf_answering;
	a->perf_running = 0;
	a->perf_reprobe = 0;
	a->perf_answering = 0;
	a->perf_at_mono_ms = yard_now_mono_ms();
	int valid = json_is_object(o) && json_real_value(json_object_get(o, "flops_per_s")) > 0;
	int disturbed = a->ranks_started != a->perf_ranks_started;
	if (reprobe && (!valid || disturbed)) {
		/* the leader's request is answered by a probe no rank disturbed */
		a->perf_asked = answering && valid;
		log_info(
		    "node probe again: %s; the rates of the last probe stand%s",
		    !valid ? "failed" : "a rank started meanwhile, so its figures are discarded",
		    a->perf_asked ? " (the leader's request is answered once no rank runs)" : "");
		json_decref(o);
	} else if (!valid) {
		int soon = a->perf_attempts < PERF_ATTEMPTS;
		uint64_t retry_ms = soon ? PERF_RETRY_MS : (uint64_t)a->cfg.probe_retry_ms;
		log_warn("node probe (%s --probe, attempt %d) failed (exit %lld): %s; trying again "
		         "in %llu ms%s",
		         a->worker.path, a->perf_attempts, (long long)p->exit_status,
		         p->len ? p->buf : "no output", (unsigned long long)retry_ms,
		         soon ? ""
		              : " (until then heartbeats carry no perf and the planner does not "
		                "plan for this node)");
		json_decref(o);
		uv_timer_start(&a->perf_retry, on_retry, retry_ms, 0);
	} else {
		json_object_del(o, "inter_source"); /* whatever it says: no link is measured yet */
		node_figures(a, o);
		json_decref(a->perf);
		a->perf = o;
		a->perf_disturbed = disturbed;
		a->perf_measured_wall_ms = yard_now_wall_ms();
		perf_changed(a);      /* the next heartbeat carries it, new rates for the leader */
		linkprobe_apply(a);   /* a link measured before this probe answered */
		perf_save(a);
		log_info("node probe%s: %.1f GFLOP/s per device (%.0f%% when all %d compute), "
		         "shm %.2f GB/s, inter-node %.2f GB/s (%s), in %lld ms%s",
		         reprobe ? " again (no rank runs)" : "",
		         json_real_value(json_object_get(o, "flops_per_s")) / 1e9,
		         json_real_value(json_object_get(o, "parallel_efficiency")) * 100,
		         a->cfg.n_devices,
		         json_real_value(json_object_get(o, "intra_bw_bytes_per_s")) / 1e9,
		         json_real_value(json_object_get(o, "inter_bw_bytes_per_s")) / 1e9,
		         json_string_value(json_object_get(o, "inter_source")),
		         (long long)(yard_now_mono_ms() - p->started_ms),
		         disturbed ? "; a rank started meanwhile, so the node is measured again as "
		                     "soon as no rank runs"
		                   : "");
	}
	uv_close((uv_handle_t *)&p->process, handle_closed);
	uv_close((uv_handle_t *)&p->timer, handle_closed);
	if (!uv_is_closing((uv_handle_t *)&p->out))
		uv_close((uv_handle_t *)&p->out, handle_closed);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct perf_run *p = s->data;
	(void)buf;
	if (n > 0) {
		p->len += (size_t)n;
		return;
	}
	if (n < 0) {
		uv_close((uv_handle_t *)&p->out, handle_closed);
		if (p->exited)
			finish(p);
	}
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct perf_run *p = h->data;
	(void)suggested;
	*buf = uv_buf_init(p->buf + p->len, (unsigned)(sizeof p->buf - 1 - p->len));
}

static void on_exit_cb(uv_process_t *proc, int64_t status, int sig)
{
	struct perf_run *p = proc->data;
	p->exited = 1;
	p->exit_status = sig ? 128 + sig : status;
	uv_timer_stop(&p->timer);
	if (uv_is_closing((uv_handle_t *)&p->out))
		finish(p);
}

/* attempt 1: --probe-timeout-ms, then twice the time of the attempt before, at most 4x */
static uint64_t kill_ms(const struct agent *a, int attempt)
{
	return (uint64_t)a->cfg.probe_timeout_ms << (attempt < 3 ? attempt - 1 : 2);
}

static void on_timeout(uv_timer_t *t)
{
	struct perf_run *p = t->data;
	log_warn("node probe still running after %llu ms: killing it",
	         (unsigned long long)kill_ms(p->agent, p->agent->perf_attempts));
	uv_process_kill(&p->process, SIGKILL);
}

int64_t agent_device_memory_mb(const struct agent_config *cfg)
{
	if (cfg->device_memory_mb > 0)
		return cfg->device_memory_mb;
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || page <= 0)
		return 0;
	/* CPU devices share the host's memory */
	return (int64_t)pages * page / (1 << 20) / cfg->n_devices;
}

static void retry_timer_init(struct agent *a)
{
	if (a->perf_timer_ready)
		return;
	uv_timer_init(a->loop, &a->perf_retry);
	a->perf_retry.data = a;
	a->perf_timer_ready = 1;
}

void perf_save(struct agent *a)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	if (a->perf == NULL)
		return;
	snprintf(path, sizeof path, "%s/" PERF_SAVED, a->cfg.data_dir);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	json_t *saved = json_pack("{s:I,s:i,s:s,s:b,s:O}", "measured_unix_ms",
	                          (json_int_t)a->perf_measured_wall_ms, "devices", a->cfg.n_devices,
	                          "kind", a->cfg.cuda ? "cuda" : "cpu", "disturbed",
	                          a->perf_disturbed, "perf", a->perf);
	if (saved == NULL || json_dump_file(saved, tmp, JSON_COMPACT) != 0 ||
	    rename(tmp, path) != 0)
		log_warn("cannot save the node's rates to %s: %s (a restart while ranks run probes "
		         "the node again)",
		         path, strerror(errno));
	json_decref(saved);
}

/* The rates saved in the data dir, if they fit this agent (else NULL and why says why not);
 * *age_ms: how long ago they were measured, *disturbed: the flag they were saved with. */
static json_t *saved_rates(struct agent *a, int64_t *age_ms, int *disturbed, char *why,
                           size_t why_len)
{
	char path[PATH_MAX];
	json_error_t jerr;
	snprintf(path, sizeof path, "%s/" PERF_SAVED, a->cfg.data_dir);
	json_t *saved = json_load_file(path, 0, &jerr);
	json_t *perf = NULL;
	if (saved == NULL) {
		snprintf(why, why_len, "%s: %s", path, jerr.text);
		return NULL;
	}
	json_t *measured = json_object_get(saved, "measured_unix_ms");
	json_t *devices = json_object_get(saved, "devices");
	const char *kind = json_string_value(json_object_get(saved, "kind"));
	json_t *o = json_object_get(saved, "perf");
	const char *want_kind = a->cfg.cuda ? "cuda" : "cpu";
	*age_ms =
	    json_is_integer(measured) ? yard_now_wall_ms() - json_integer_value(measured) : -1;
	if (!json_is_integer(measured) || !json_is_integer(devices) || kind == NULL ||
	    !json_is_object(o))
		snprintf(why, why_len, "%s: not the rates this agent saves", path);
	else if (json_integer_value(devices) != a->cfg.n_devices || strcmp(kind, want_kind) != 0)
		snprintf(why, why_len, "%s: rates of %lld %s device(s), this node has %d %s", path,
		         (long long)json_integer_value(devices), kind, a->cfg.n_devices, want_kind);
	else if (!(json_real_value(json_object_get(o, "flops_per_s")) > 0))
		snprintf(why, why_len, "%s: no flops_per_s", path);
	else if (*age_ms < 0)
		snprintf(why, why_len, "%s: measured in the future (the clock went back)", path);
	else {
		perf = json_deep_copy(o);
		*disturbed = json_is_true(json_object_get(saved, "disturbed"));
		if (perf != NULL)
			node_figures(a, perf);
	}
	json_decref(saved);
	return perf;
}

void perf_begin(struct agent *a, int adopted)
{
	char why[PATH_MAX + 128];
	int64_t age_ms = 0;
	int disturbed = 0;
	if (adopted == 0) {
		perf_start(a);
		return;
	}
	json_t *o = saved_rates(a, &age_ms, &disturbed, why, sizeof why);
	retry_timer_init(a);
	if (o == NULL) {
		log_warn("node probe: %d rank(s) re-adopted, but no saved rates to use (%s)",
		         adopted, why);
		probe_when_idle(a, "no saved rates");
		return;
	}
	uint64_t now = yard_now_mono_ms();
	a->perf = o;
	a->perf_disturbed = disturbed;
	a->perf_measured_wall_ms = yard_now_wall_ms() - age_ms;
	a->perf_at_mono_ms = (uint64_t)age_ms < now ? now - (uint64_t)age_ms : 0;
	perf_changed(a);
	char again[96];
	if (disturbed)
		snprintf(again, sizeof again, "as soon as no rank runs (they were disturbed)");
	else if (a->cfg.reprobe_s > 0)
		snprintf(again, sizeof again, "once no rank runs and they are %lld s old",
		         (long long)a->cfg.reprobe_s);
	else
		snprintf(again, sizeof again, "never (--reprobe-s 0)");
	log_info("node probe: %d rank(s) re-adopted: using the rates measured %lld s ago "
	         "(%.1f GFLOP/s per device) instead of probing a node that trains; measured "
	         "again %s",
	         adopted, (long long)(age_ms / 1000),
	         json_real_value(json_object_get(o, "flops_per_s")) / 1e9, again);
}

void perf_start(struct agent *a)
{
	struct perf_run *p = calloc(1, sizeof *p);
	char devices[16], budget[16];
	if (p == NULL)
		return;
	a->perf_attempts++;
	retry_timer_init(a);
	p->agent = a;
	p->started_ms = yard_now_mono_ms();
	a->perf_running = 1;
	a->perf_ranks_started = a->ranks_started;
	snprintf(devices, sizeof devices, "%d", a->cfg.n_devices);
	snprintf(budget, sizeof budget, "%d", PERF_BUDGET_MS);
	char *args[] = {a->worker.path, "--probe", "--devices", devices,
	                "--budget-ms",  budget,    NULL};
	uv_stdio_container_t stdio[3] = {
	    {.flags = UV_IGNORE},
	    {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&p->out},
	    {.flags = UV_INHERIT_FD, .data.fd = 2}};
	uv_process_options_t opts = {
	    .file = args[0], .args = args, .exit_cb = on_exit_cb, .stdio_count = 3, .stdio = stdio};
	uv_pipe_init(a->loop, &p->out, 0);
	uv_timer_init(a->loop, &p->timer);
	p->out.data = p->timer.data = p->process.data = p;
	int rc = uv_spawn(a->loop, &p->process, &opts);
	if (rc != 0) {
		log_warn("node probe: cannot start %s: %s; heartbeats carry no perf",
		         a->worker.path, uv_strerror(rc));
		a->perf_running = a->perf_reprobe = a->perf_answering = 0;
		a->perf_at_mono_ms = yard_now_mono_ms();
		uv_close((uv_handle_t *)&p->process, handle_closed); /* libuv: close it anyway */
		uv_close((uv_handle_t *)&p->out, handle_closed);
		uv_close((uv_handle_t *)&p->timer, handle_closed);
		return;
	}
	uv_read_start((uv_stream_t *)&p->out, on_alloc, on_read);
	uv_timer_start(&p->timer, on_timeout, kill_ms(a, a->perf_attempts), 0);
}

void perf_changed(struct agent *a)
{
	a->perf_version++;
	a->perf_unwanted = 0;
}

void perf_refused(struct agent *a, const char *why)
{
	if (a->perf == NULL)
		return;
	char next[96];
	if (a->perf_running) /* finish() takes a re-probe for a first probe now */
		snprintf(next, sizeof next, "the probe that runs now takes their place");
	else
		snprintf(next, sizeof next, "probing again in %d ms", a->cfg.probe_retry_ms);
	log_warn("the leader refused this node's probe figures (%s): heartbeats go without them; "
	         "%s",
	         why, next);
	json_decref(a->perf);
	a->perf = NULL;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/" PERF_SAVED, a->cfg.data_dir);
	unlink(path); /* not for a restart either */
	if (!a->perf_running)
		uv_timer_start(&a->perf_retry, on_retry, (uint64_t)a->cfg.probe_retry_ms, 0);
}

void perf_ask(struct agent *a, int64_t request)
{
	if (request <= a->perf_request)
		return;
	a->perf_request = request;
	int busy = ranks_running(a);
	log_info("the leader asked for this node's rates to be measured again (request %lld, "
	         "yardctl node probe): %s",
	         (long long)request,
	         a->perf_running ? "a probe runs now; its rates answer it"
	         : a->perf == NULL
	             ? "its first probe has not measured them yet; that one answers it"
	         : busy > 0 ? "the probe waits until no rank runs here"
	                    : "probing now");
	if (a->perf_running || a->perf == NULL)
		return;
	a->perf_asked = 1;
	perf_tick(a);
}

void perf_tick(struct agent *a)
{
	if (a->perf_running)
		return;
	if (a->perf_asked && a->perf != NULL && ranks_running(a) == 0) {
		a->perf_asked = 0;
		a->perf_reprobe = 1;
		a->perf_answering = 1;
		perf_start(a);
		return;
	}
	if (a->perf == NULL) {
		if (a->perf_idle_wait) /* a probe waits: for the ranks, or for the leader's word */
			probe_when_idle(a, "deferred");
		return;
	}
	/* the rank scan last: on most ticks the rates are neither disturbed nor old yet */
	/* disturbed rates: again once per --probe-retry-ms at most (a re-probe that fails or is
	 * disturbed in turn does not repeat every few seconds) */
	uint64_t age_ms = yard_now_mono_ms() - a->perf_at_mono_ms;
	if (a->perf_disturbed ? age_ms < (uint64_t)a->cfg.probe_retry_ms
	                      : a->cfg.reprobe_s <= 0 || age_ms < (uint64_t)a->cfg.reprobe_s * 1000)
		return;
	if (ranks_running(a) > 0)
		return;
	a->perf_reprobe = 1;
	perf_start(a);
}
