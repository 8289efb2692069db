/* fuzz_heartbeat.c: heartbeats as the leader's scheduler takes them from an agent (after
 * authentication, so as node-a). The input is a sequence of heartbeat bodies, one per line;
 * each is parsed with the API's bounds and handed to sched_heartbeat or, every other line,
 * sched_heartbeat_text, with a scheduler pass 100 ms later. The world is fresh for every
 * input: test_leader's (tests/unit/sched_world.h: a real in-memory state machine, node-a and
 * node-b with 4 CPU devices each, proposals applied at once) with a 2-rank command job and a
 * fixed-layout trainer job placed. Properties: a refused heartbeat names a field or the
 * node; an answer as text parses; afterwards the planner, fed whatever rates the heartbeats
 * carried, answers or refuses (a NaN or infinite rate must not crash it), and the jobs and
 * nodes show with the leader's soft state overlaid. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/log.h"
#include "jobs/fsm.h"
#include "scheduler/leader.h"
#include "tests/fuzz/fuzz.h"
#include "tests/unit/sched_world.h"

#define BODY_MAX (1u << 20) /* web/http.h's HTTP_MAX_BODY */
#define DEPTH_MAX 32        /* and HTTP_MAX_DEPTH */
#define HEARTBEATS_MAX 64

static void apply(struct sched_world *w, const char *op, const char *args)
{
	int status = sched_world_apply(w, op, args);
	if (status < 200 || status > 299)
		fuzz_fail("world command %s: status %d", op, status);
}

static void tick(struct sched_world *w)
{
	w->mono += 100;
	w->wall += 100;
	sched_tick(w->sched);
}

/* the world of every input: sched_world (node-a, node-b) and two placed jobs */
static void world_init(struct sched_world *w)
{
	char why[256] = "";
	if (sched_world_init(w, 100, why, sizeof why) != 0)
		fuzz_fail("%s", why);
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

static void beat(struct sched_world *w, const char *line, size_t len, int as_text)
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

FUZZ_LOG_LEVEL(YARD_LOG_ERROR) /* a line per refused report or new leader: noise */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sched_world w;
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
	sched_world_close(&w);
	return 0;
}
