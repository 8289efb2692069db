/* fuzz_heartbeat.c: heartbeats as the leader's scheduler takes them from an agent (after
 * authentication, so as node-a). The input is a sequence of heartbeat bodies, one per line;
 * each is parsed with the API's bounds and handed to sched_heartbeat or, every other line,
 * sched_heartbeat_text, with a scheduler pass 100 ms later. The world is fresh for every
 * input: a real in-memory state machine with node-a and node-b (4 CPU devices each), a
 * 2-rank command job placed on them and a fixed-layout trainer job, and proposals applied at
 * once as test_leader's fake raft does. Properties: a refused heartbeat names a field or the
 * node; an answer as text parses; afterwards the planner, fed whatever rates the heartbeats
 * carried, answers or refuses (a NaN or infinite rate must not crash it), and the jobs and
 * nodes show with the leader's soft state overlaid. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "jobs/fsm.h"
#include "scheduler/leader.h"
#include "tests/fuzz/fuzz.h"

#define BODY_MAX (1u << 20) /* web/http.h's HTTP_MAX_BODY */
#define DEPTH_MAX 32        /* and HTTP_MAX_DEPTH */
#define HEARTBEATS_MAX 64

struct world {
	struct fsm fsm;
	uint64_t mono, applied;
	int64_t wall;
	uv_loop_t loop;
	struct sched *sched;
};

static const json_t *apply_text(struct world *w, const char *op, json_t *args)
{
	size_t len = 0;
	char *cmd = fsm_command_encode(op, args, NULL, w->wall, "fuzz", "admin", &len);
	const json_t *r = fsm_apply(&w->fsm, cmd, len);
	free(cmd);
	w->applied++;
	return r;
}

static int propose(void *data, const char *op, json_t *args, sched_done_cb done, void *cb_data)
{
	done(cb_data, 0, apply_text(data, op, args));
	return 0;
}
static int ready(void *data)
{
	return 1;
}
static uint64_t applied(void *data)
{
	return ((struct world *)data)->applied;
}
static uint64_t mono(void *data)
{
	return ((struct world *)data)->mono;
}
static int64_t wall(void *data)
{
	return ((struct world *)data)->wall;
}

static void apply(struct world *w, const char *op, const char *args)
{
	json_t *a = json_loads(args, 0, NULL);
	if (a == NULL)
		fuzz_fail("bad world command %s %s", op, args);
	const json_t *r = apply_text(w, op, a);
	int64_t status = json_integer_value(json_object_get(r, "status"));
	if (status < 200 || status > 299)
		fuzz_fail("world command %s: status %lld", op, (long long)status);
}

static void tick(struct world *w)
{
	w->mono += 100;
	w->wall += 100;
	sched_tick(w->sched);
}

static void world_init(struct world *w)
{
	struct yard_err err = {0};
	struct sched_config cfg;
	memset(w, 0, sizeof *w);
	if (fsm_init(&w->fsm, &err) != 0)
		fuzz_fail("fsm_init: %s", err.msg);
	uv_loop_init(&w->loop);
	w->mono = 1000000;
	w->wall = 1763740000000LL;
	sched_config_defaults(&cfg);
	cfg.tick_ms = 0;
	struct sched_io io = {.data = w,
	                      .propose = propose,
	                      .is_ready = ready,
	                      .applied_index = applied,
	                      .mono_ms = mono,
	                      .wall_ms = wall};
	w->sched = sched_create(&w->loop, &w->fsm, &cfg, &io);
	for (int n = 0; n < 2; n++) {
		char args[512];
		snprintf(
		    args, sizeof args,
		    "{\"name\":\"node-%c\",\"host\":\"10.0.0.%d\",\"port_base\":%d,\"devices\":"
		    "[{\"index\":0,\"kind\":\"cpu\"},{\"index\":1,\"kind\":\"cpu\"},"
		    "{\"index\":2,\"kind\":\"cpu\"},{\"index\":3,\"kind\":\"cpu\"}],"
		    "\"token_hash\":\"%064d\"}",
		    'a' + n, n + 1, 29500 + 100 * n, n);
		apply(w, "node.register", args);
	}
	sched_leader_up(w->sched);
	apply(w, "job.submit",
	      "{\"name\":\"cmd\",\"spec\":{\"name\":\"cmd\",\"ranks\":2,\"command\":[\"sleep\","
	      "\"9\"],\"failure\":{\"straggler\":{\"policy\":\"replace\"}}}}");
	apply(w, "job.submit",
	      "{\"name\":\"train\",\"spec\":{\"name\":\"train\",\"model\":{\"d_in\":8,"
	      "\"d_model\":16,\"d_ff\":32,\"layers\":4,\"classes\":4},\"train\":{\"steps\":100,"
	      "\"batch_size\":16},\"parallel\":{\"dp\":2,\"pp\":2,\"schedule\":\"1f1b\","
	      "\"micro_batches\":2},\"checkpoint\":{\"every_steps\":10,\"store\":"
	      "\"controller\"}}}");
	tick(w);
}

static void world_free(struct world *w)
{
	sched_destroy(w->sched);
	uv_run(&w->loop, UV_RUN_NOWAIT);
	uv_loop_close(&w->loop);
	fsm_close(&w->fsm);
}

static void beat(struct world *w, const char *line, size_t len, int as_text)
{
	struct yard_err err = {0};
	json_t *body = jsonx_parse(line, len, BODY_MAX, DEPTH_MAX, &err);
	if (body == NULL)
		return;
	if (as_text) {
		size_t out_len = 0;
		char *text = sched_heartbeat_text(w->sched, "node-a", body, &out_len, &err);
		if (text != NULL) {
			json_t *answer = jsonx_parse(text, out_len, 1u << 30, 64, &err);
			if (answer == NULL)
				fuzz_fail("a heartbeat answer as text does not parse: %s", err.msg);
			json_decref(answer);
			free(text);
		} else if (err.msg[0] == '\0') {
			fuzz_fail("a refused heartbeat says nothing");
		}
	} else {
		json_t *answer = sched_heartbeat(w->sched, "node-a", body, &err);
		if (answer == NULL && err.msg[0] == '\0')
			fuzz_fail("a refused heartbeat says nothing");
		json_decref(answer);
	}
	json_decref(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct world w;
	world_init(&w);
	size_t at = 0;
	for (int k = 0; at < size && k < HEARTBEATS_MAX; k++) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
		beat(&w, (const char *)data + at, len, k % 2);
		tick(&w);
		at += len + 1;
	}
	struct yard_err err = {0};
	json_t *spec = json_loads("{\"name\":\"auto\",\"model\":{\"d_in\":32,\"d_model\":64,"
	                          "\"d_ff\":128,\"layers\":4,\"classes\":10},\"train\":{\"steps\":"
	                          "10,\"batch_size\":64},\"parallel\":\"auto\"}",
	                          0, NULL);
	json_decref(sched_plan(w.sched, spec, 0, &err));
	json_decref(spec);
	json_t *jobs = fsm_jobs_list(&w.fsm, NULL, NULL, 10, &err);
	size_t i;
	json_t *j;
	json_array_foreach(json_object_get(jobs, "jobs"), i, j) sched_overlay_job(w.sched, j);
	json_decref(jobs);
	json_t *nodes = fsm_nodes_list(&w.fsm, &err);
	json_array_foreach(nodes, i, j) sched_overlay_node(w.sched, j);
	json_decref(nodes);
	world_free(&w);
	return 0;
}
