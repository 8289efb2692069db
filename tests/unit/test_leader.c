/* test_leader.c: the leader's scheduler (scheduler/leader.h) driven tick by tick with fake
 * clocks and a fake raft that applies every proposal to a real in-memory state machine at
 * once: the grace period after an election, suspect/down thresholds, gang placement and the
 * desired set with its environment, restarts on exits and hangs with back-off, success,
 * drains, rank output carried by heartbeats, stragglers (report, recovery, replace with its
 * cap), a worker build's rollout driven by the nodes' worker versions and reports, and what a
 * heartbeat may not do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/err.h"
#include "jobs/fsm.h"
#include "jobs/spec.h"
#include "scheduler/desired.h"
#include "scheduler/leader.h"
#include "tests/unit/sched_world.h"

/* a command applied as raft would, by "test": the result's status */
static int apply(struct sched_world *w, const char *op, const char *args)
{
	int status = sched_world_apply(w, op, args);
	assert_int_not_equal(status, -1);
	return status;
}

static void advance(struct sched_world *w, uint64_t ms)
{
	w->mono += ms;
	w->wall += (int64_t)ms;
}

/* Advances time by ms in 100 ms ticks. */
static void run(struct sched_world *w, uint64_t ms)
{
	for (uint64_t t = 0; t < ms; t += 100) {
		advance(w, 100);
		sched_tick(w->sched);
	}
}

static struct sched_world *world_new_depth(int queue_depth)
{
	struct sched_world *w = calloc(1, sizeof *w);
	char why[256] = "";
	if (sched_world_init(w, queue_depth, why, sizeof why) != 0)
		fail_msg("%s", why);
	return w;
}

static struct sched_world *world_new(void)
{
	return world_new_depth(100);
}

static void world_free(struct sched_world *w)
{
	sched_world_close(w);
	free(w);
}

static const char *node_state(struct sched_world *w, const char *id)
{
	static char state[16];
	struct yard_err err = {0};
	json_t *n = fsm_node_get(&w->fsm, id, &err);
	assert_non_null(n);
	snprintf(state, sizeof state, "%s", json_string_value(json_object_get(n, "state")));
	json_decref(n);
	return state;
}

static json_t *job(struct sched_world *w, const char *id)
{
	struct yard_err err = {0};
	json_t *j = fsm_job_get(&w->fsm, id, &err);
	assert_non_null(j);
	return j;
}

/* The node of rank 0 of job id's layout, into out. */
static void first_node(struct sched_world *w, const char *id, char *out, size_t len)
{
	json_t *j = job(w, id);
	snprintf(out, len, "%s",
	         json_string_value(
	             json_object_get(json_array_get(json_object_get(j, "layout"), 0), "node")));
	json_decref(j);
}

static const char *job_state(struct sched_world *w, const char *id)
{
	static char state[16];
	json_t *j = job(w, id);
	snprintf(state, sizeof state, "%s", json_string_value(json_object_get(j, "state")));
	json_decref(j);
	return state;
}

/* the commands of the last answer heartbeat() got */
static json_t *last_commands;

/* A heartbeat from node with the given ranks report (JSON array text); returns desired. */
static json_t *heartbeat(struct sched_world *w, const char *node, const char *ranks)
{
	char body[4096];
	struct yard_err err = {0};
	snprintf(body, sizeof body, "{\"node\":\"%s\",\"ranks\":%s}", node, ranks);
	json_t *b = json_loads(body, 0, NULL);
	json_t *answer = sched_heartbeat(w->sched, node, b, &err);
	json_decref(b);
	assert_non_null(answer);
	json_t *desired = json_incref(json_object_get(answer, "desired"));
	json_decref(last_commands);
	last_commands = json_incref(json_object_get(answer, "commands"));
	json_decref(answer);
	return desired;
}

/* The rank reports of generation `generation` of job j-000001, n ranks running at step 12 (a
 * JSON array for heartbeat). */
static void running_in_generation(char *out, size_t len, int n, int generation)
{
	snprintf(out, len, "[");
	for (int r = 0; r < n; r++)
		snprintf(out + strlen(out), len - strlen(out),
		         "%s{\"job\":\"j-000001\",\"rank\":%d,\"generation\":%d,"
		         "\"state\":\"running\",\"step\":12}",
		         r ? "," : "", r, generation);
	snprintf(out + strlen(out), len - strlen(out), "]");
}

/* running_in_generation of generation 1 */
static void running_at_step_12(char *out, size_t len, int n)
{
	running_in_generation(out, len, n, 1);
}

/* Frees w and removes the test's checkpoint directory dir. */
static void world_free_removing(struct sched_world *w, const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	world_free(w);
}

/* The request number of the "checkpoint" command for job j-000001's generation gen in the last
 * heartbeat answer, 0 when it has none. */
static int64_t checkpoint_asked(int64_t gen)
{
	size_t i;
	json_t *cmd;
	json_array_foreach(last_commands, i, cmd)
	{
		if (strcmp(json_string_value(json_object_get(cmd, "op")), "checkpoint") != 0)
			continue;
		assert_string_equal(json_string_value(json_object_get(cmd, "job")), "j-000001");
		/* every request says which step a checkpoint must be newer than to answer it */
		assert_true(json_is_integer(json_object_get(cmd, "after")));
		if (json_integer_value(json_object_get(cmd, "generation")) == gen)
			return json_integer_value(json_object_get(cmd, "request"));
	}
	return 0;
}

/* The request number of the "probe" command in the last heartbeat answer, 0 when none. */
static int64_t probe_asked(void)
{
	size_t i;
	json_t *cmd;
	json_array_foreach(last_commands, i, cmd)
	{
		if (strcmp(json_string_value(json_object_get(cmd, "op")), "probe") == 0)
			return json_integer_value(json_object_get(cmd, "request"));
	}
	return 0;
}

/* The step generation gen's checkpoint request in the last answer must be newer than. */
static int64_t checkpoint_asked_after(int64_t gen)
{
	size_t i;
	json_t *cmd;
	json_array_foreach(last_commands, i, cmd)
	{
		if (strcmp(json_string_value(json_object_get(cmd, "op")), "checkpoint") == 0 &&
		    json_integer_value(json_object_get(cmd, "generation")) == gen)
			return json_integer_value(json_object_get(cmd, "after"));
	}
	return -2;
}

static const char *env_of(const json_t *desired, size_t i, const char *key)
{
	return json_string_value(
	    json_object_get(json_object_get(json_array_get(desired, i), "env"), key));
}

/* yardctl node probe: the request rides on the node's next 3 heartbeat answers (the agent takes
 * a request number once), its watch is nudged, a second request gets a new number; an unknown
 * node is 404, a down node 409, a member that does not lead refuses (its API redirects). */
static void test_node_probe_request_rides_on_answers(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 100);
	assert_int_equal(probe_asked(), 0);
	struct yard_err err = {0};
	int64_t request = 0, again = 0;
	assert_int_equal(sched_node_probe(w->sched, "node-x", &request, &err), -1);
	assert_int_equal(err.code, YARD_ENOTFOUND);
	assert_string_equal(err.msg, "no node 'node-x'");
	assert_int_equal(sched_node_probe(w->sched, "node-a", &request, &err), 0);
	assert_true(request > 0);
	assert_true(sched_node_nudged(w->sched, "node-a"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(probe_asked(), 0); /* another node's answer */
	for (int k = 0; k < 3; k++) {
		json_decref(heartbeat(w, "node-a", "[]"));
		assert_int_equal(probe_asked(), request);
	}
	json_decref(heartbeat(w, "node-a", "[]"));
	assert_int_equal(probe_asked(), 0);
	assert_int_equal(sched_node_probe(w->sched, "node-a", &again, &err), 0);
	assert_true(again > request);
	json_decref(heartbeat(w, "node-a", "[]"));
	assert_int_equal(probe_asked(), again);
	/* node-b silent until down: refused, naming it */
	for (int k = 0; k < 40; k++) {
		json_decref(heartbeat(w, "node-a", "[]"));
		run(w, 100);
	}
	assert_string_equal(node_state(w, "node-b"), "down");
	memset(&err, 0, sizeof err);
	assert_int_equal(sched_node_probe(w->sched, "node-b", &request, &err), -1);
	assert_int_equal(err.code, YARD_EBUSY);
	assert_non_null(strstr(err.msg, "node node-b is down"));
	/* a follower asks no agent */
	sched_leader_down(w->sched);
	memset(&err, 0, sizeof err);
	assert_int_equal(sched_node_probe(w->sched, "node-a", &request, &err), -1);
	assert_int_equal(err.code, YARD_ENOTLEADER);
	sched_leader_up(w->sched);
	world_free(w);
}

static void test_grace_period_then_suspect_then_down(void **state)
{
	struct sched_world *w = world_new();
	run(w, 1400); /* within the grace period after the election: nothing is judged */
	assert_string_equal(node_state(w, "node-a"), "up");
	json_decref(heartbeat(w, "node-a", "[]"));
	run(w, 200); /* node-b was never heard: suspect once the grace period is over */
	assert_string_equal(node_state(w, "node-a"), "up");
	assert_string_equal(node_state(w, "node-b"), "suspect");
	run(w, 1500); /* 3 s since the election: node-b down; node-a silent for 1.7 s: suspect */
	assert_string_equal(node_state(w, "node-b"), "down");
	assert_string_equal(node_state(w, "node-a"), "suspect");
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 100);
	assert_string_equal(node_state(w, "node-a"), "up");
	assert_string_equal(node_state(w, "node-b"), "up");
	/* a new election starts a new grace period, whatever the old leader had heard */
	sched_leader_down(w->sched);
	run(w, 5000);
	sched_leader_up(w->sched);
	run(w, 1400);
	assert_string_equal(node_state(w, "node-a"), "up");
	world_free(w);
}

/* A controller whose loop stalled (stopped, starved of CPU) heard no heartbeat meanwhile:
 * that silence does not make nodes suspect or down; silence after the stall still does. */
static void test_a_stalled_leader_does_not_blame_the_nodes(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 1000);
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 100);
	advance(w, 5000); /* no tick, no heartbeat processed: the loop stalled */
	sched_tick(w->sched);
	assert_string_equal(node_state(w, "node-a"), "up");
	assert_string_equal(node_state(w, "node-b"), "up");
	json_decref(heartbeat(w, "node-a", "[]"));
	run(w, 1600); /* node-b silent for 1.6 s after the stall: suspect */
	assert_string_equal(node_state(w, "node-a"), "suspect");
	assert_string_equal(node_state(w, "node-b"), "suspect");
	run(w, 1500);
	assert_string_equal(node_state(w, "node-b"), "down");
	world_free(w);
}

/* A pass first sends what was proposed before it on its way (io.flush), so those entries
 * replicate while the pass holds the loop; its own proposals come after. */
static void test_a_pass_flushes_proposals_before_it_runs(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"one\",\"spec\":{\"name\":\"one\",\"command\":[\"x\"],"
	                       "\"ranks\":1}}"),
	                 201);
	uint64_t before = w->applied;
	int flushes = w->flushes;
	sched_tick(w->sched);
	assert_int_equal(w->flushes, flushes + 1);
	assert_int_equal(w->applied_at_flush, before); /* flushed before the pass proposed */
	assert_true(w->applied > before);              /* the pass placed the job */
	assert_string_equal(job_state(w, "j-000001"), "running");
	world_free(w);
}

static void test_gang_placement_env_and_success(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"big\",\"spec\":{\"name\":\"big\",\"command\":[\"x\"],"
	                       "\"ranks\":6,\"env\":{\"A\":\"1\"}}}"),
	                 201);
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"next\",\"spec\":{\"name\":\"next\",\"command\":[\"x\"],"
	                       "\"ranks\":6}}"),
	                 201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_string_equal(job_state(w, "j-000002"), "pending");
	json_t *j2 = job(w, "j-000002");
	sched_overlay_job(w->sched, j2);
	assert_string_equal(json_string_value(json_object_get(j2, "reason")),
	                    "needs 6 devices, 2 free");
	assert_int_equal(json_integer_value(json_object_get(j2, "position")), 1);
	json_decref(j2);

	/* node-a runs ranks 0-3, node-b ranks 4-5 (most free devices first, then by name) */
	json_t *da = heartbeat(w, "node-a", "[]"), *db = heartbeat(w, "node-b", "[]");
	assert_int_equal(json_array_size(da), 4);
	assert_int_equal(json_array_size(db), 2);
	assert_string_equal(env_of(db, 1, "RANK"), "5");
	assert_string_equal(env_of(db, 1, "LOCAL_RANK"), "1");
	assert_string_equal(env_of(db, 1, "LOCAL_WORLD_SIZE"), "2");
	assert_string_equal(env_of(db, 1, "NODE_RANK"), "1");
	assert_string_equal(env_of(db, 1, "WORLD_SIZE"), "6");
	assert_string_equal(env_of(db, 1, "MASTER_ADDR"), "10.0.0.1");
	assert_string_equal(env_of(db, 1, "MASTER_PORT"), "29500");
	assert_string_equal(env_of(db, 1, "YARD_PEERS"),
	                    "10.0.0.1:29500,10.0.0.1:29501,10.0.0.1:29502,10.0.0.1:29503,"
	                    "10.0.0.2:29600,10.0.0.2:29601");
	assert_string_equal(env_of(db, 1, "YARD_HOSTS"),
	                    "node-a,node-a,node-a,node-a,node-b,node-b");
	/* the controller store: the agent picks the node-local directory */
	assert_null(env_of(db, 1, "YARD_CKPT_DIR"));
	json_t *ck = json_object_get(json_array_get(db, 1), "checkpoint");
	assert_string_equal(json_string_value(json_object_get(ck, "store")), "controller");
	assert_int_equal(json_integer_value(json_object_get(ck, "restore_step")), -1);
	assert_string_equal(env_of(db, 1, "A"), "1");
	assert_null(env_of(db, 1, "YARD_RESUME"));
	json_decref(da);
	json_decref(db);

	/* every rank exits 0: succeeded; the waiting job then gets the devices */
	json_decref(
	    heartbeat(w, "node-a",
	              "[{\"job\":\"j-000001\",\"rank\":0,\"generation\":1,\"state\":\"exited\"},"
	              "{\"job\":\"j-000001\",\"rank\":1,\"generation\":1,\"state\":\"exited\"},"
	              "{\"job\":\"j-000001\",\"rank\":2,\"generation\":1,\"state\":\"exited\"},"
	              "{\"job\":\"j-000001\",\"rank\":3,\"generation\":1,\"state\":\"exited\","
	              "\"step\":7}]"));
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running"); /* ranks 4, 5 not heard yet */
	json_decref(
	    heartbeat(w, "node-b",
	              "[{\"job\":\"j-000001\",\"rank\":4,\"generation\":1,\"state\":\"exited\"},"
	              "{\"job\":\"j-000001\",\"rank\":5,\"generation\":1,\"state\":\"exited\"}]"));
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "succeeded");
	json_t *j1 = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j1, "step")), 7);
	json_decref(j1);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000002"), "running");
	world_free(w);
}

/* Fails when one device runs two ranks of running jobs. */
static void assert_no_device_twice(struct sched_world *w, int step)
{
	json_t *slots = fsm_running_slots(&w->fsm);
	for (size_t i = 0; i < json_array_size(slots); i++)
		for (size_t k = i + 1; k < json_array_size(slots); k++) {
			const json_t *x = json_array_get(slots, i), *y = json_array_get(slots, k);
			const char *node = json_string_value(json_object_get(x, "node"));
			json_int_t device = json_integer_value(json_object_get(x, "device"));
			if (strcmp(node, json_string_value(json_object_get(y, "node"))) == 0 &&
			    device == json_integer_value(json_object_get(y, "device")))
				fail_msg("step %d: device %s/%lld runs two ranks", step, node,
				         (long long)device);
		}
	json_decref(slots);
}

/* The leader reuses each running job's desired entries between heartbeats (built once per
 * generation, dropped when a node row or a checkpoint changes). After every random change
 * (submissions, exits, failures, re-registrations with a new address, state changes) its
 * answers must equal those of a scheduler on the same state machine that is not leading and
 * so builds every answer from the committed state. */
static void test_cached_heartbeat_answers_follow_every_change(void **state)
{
	struct sched_world *w = world_new();
	struct sched_config cfg;
	sched_config_defaults(&cfg);
	cfg.tick_ms = 0;
	struct sched_io io = sched_world_io(w);
	struct sched *ref = sched_create(&w->loop, &w->fsm, &cfg, &io);
	const char *nodes[] = {"node-a", "node-b"};
	unsigned seed = 7;
	int submitted = 0, compared_nonempty = 0, unchanged = 0;
	char args[512], ranks[1024];
	json_t *held[2] = {NULL, NULL}; /* the desired set each node's agent holds, its tag */
	char held_tag[2][24] = {"", ""};
	for (int n = 0; n < 2; n++)
		json_decref(heartbeat(w, nodes[n], "[]"));
	for (int step = 0; step < 120; step++) {
		int what = (int)(rand_r(&seed) % 6);
		if (what == 0 && submitted < 40) {
			snprintf(args, sizeof args,
			         "{\"name\":\"r%d\",\"spec\":{\"name\":\"r%d\",\"command\":[\"x\"],"
			         "\"ranks\":%d,\"failure\":{\"max_restarts\":3},"
			         "\"env\":{\"A\":\"1\"}}}",
			         submitted, submitted, 1 + (int)(rand_r(&seed) % 6));
			assert_int_equal(apply(w, "job.submit", args), 201);
			submitted++;
		} else if (what == 1) {
			/* one node reports every rank it runs as exited, with code 0 or 1 */
			const char *node = nodes[rand_r(&seed) % 2];
			int code = (int)(rand_r(&seed) % 2);
			struct yard_err err = {0};
			json_t *b = json_pack("{s:s,s:[]}", "node", node, "ranks");
			json_t *answer = sched_heartbeat(ref, node, b, &err);
			json_decref(b);
			assert_non_null(answer);
			size_t i, used = 0;
			json_t *e;
			used += (size_t)snprintf(ranks, sizeof ranks, "[");
			json_array_foreach(json_object_get(answer, "desired"), i, e)
			{
				if (used + 120 >= sizeof ranks)
					break;
				used += (size_t)snprintf(
				    ranks + used, sizeof ranks - used,
				    "%s{\"job\":\"%s\",\"rank\":%lld,\"generation\":%lld,"
				    "\"state\":\"exited\",\"exit_code\":%d}",
				    i ? "," : "", json_string_value(json_object_get(e, "job")),
				    (long long)json_integer_value(json_object_get(e, "rank")),
				    (long long)json_integer_value(json_object_get(e, "generation")),
				    code);
			}
			snprintf(ranks + used, sizeof ranks - used, "]");
			json_decref(answer);
			json_decref(heartbeat(w, node, ranks));
		} else if (what == 2) {
			/* re-registration with a new address: every peer list naming it changes */
			int n = (int)(rand_r(&seed) % 2);
			snprintf(args, sizeof args,
			         "{\"name\":\"%s\",\"host\":\"10.0.%d.%d\",\"port_base\":%d,"
			         "\"devices\":[{\"index\":0,\"kind\":\"cpu\"},{\"index\":1,"
			         "\"kind\":\"cpu\"},{\"index\":2,\"kind\":\"cpu\"},{\"index\":3,"
			         "\"kind\":\"cpu\"}],\"token_hash\":\"%064d\"}",
			         nodes[n], step, n + 1, 29500 + 100 * n, n);
			assert_int_equal(apply(w, "node.register", args), 200);
		} else if (what == 3) {
			/* a cordon changes the node's row but not its peers' addresses */
			snprintf(args, sizeof args, "{\"id\":\"%s\",\"cordoned\":%s}",
			         nodes[rand_r(&seed) % 2], rand_r(&seed) % 2 ? "true" : "false");
			assert_int_equal(apply(w, "node.cordon", args), 200);
		} else {
			run(w, 100 + 100 * (uint64_t)(rand_r(&seed) % 10));
		}
		/* no device runs two ranks: the busy view followed every change */
		assert_no_device_twice(w, step);
		for (int n = 0; n < 2; n++) {
			/* the leader's answer as the API sends it: text from the cached entries,
			 * or "unchanged" for the tag of the set the agent holds (every other step
			 * sends a wrong tag: the set must come whole) */
			struct yard_err err = {0};
			size_t len = 0;
			json_t *hb = json_pack("{s:s,s:[]}", "node", nodes[n], "ranks");
			/* every other pair of steps as an agent that takes shared parts */
			int shared_ok = step / 2 % 2;
			if (shared_ok)
				json_object_set_new(hb, "desired_shared", json_true());
			if (held[n] != NULL)
				json_object_set_new(
				    hb, "desired_tag",
				    json_string(step % 2 ? held_tag[n] : "0123abcd"));
			char *text = sched_heartbeat_text(w->sched, nodes[n], hb, &len, &err);
			json_decref(hb);
			assert_non_null(text);
			assert_int_equal(len, strlen(text));
			json_t *parsed = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
			free(text);
			assert_non_null(parsed);
			const char *tag = json_string_value(json_object_get(parsed, "desired_tag"));
			assert_non_null(tag); /* a leading scheduler names every set */
			json_t *cached;
			if (json_is_true(json_object_get(parsed, "desired_unchanged"))) {
				assert_true(step % 2 == 1 && held[n] != NULL);
				assert_null(json_object_get(parsed, "desired"));
				assert_string_equal(tag, held_tag[n]);
				cached = json_incref(held[n]);
				unchanged++;
			} else {
				const json_t *parts = json_object_get(parsed, "desired_shared");
				char why[200] = "";
				assert_true(shared_ok == (parts != NULL));
				cached = desired_whole(json_object_get(parsed, "desired"), parts,
				                       why, sizeof why);
				assert_non_null(cached);
				json_decref(held[n]);
				held[n] = json_incref(cached);
				snprintf(held_tag[n], sizeof held_tag[n], "%s", tag);
			}
			assert_non_null(json_object_get(parsed, "commands"));
			assert_true(json_is_true(json_object_get(parsed, "offers_shared")));
			json_decref(parsed);
			json_t *b = json_pack("{s:s,s:[]}", "node", nodes[n], "ranks");
			json_t *answer = sched_heartbeat(ref, nodes[n], b, &err);
			json_decref(b);
			assert_non_null(answer);
			json_t *fresh = json_object_get(answer, "desired");
			if (!json_equal(cached, fresh)) {
				char *a = json_dumps(cached, JSON_COMPACT | JSON_SORT_KEYS);
				char *f = json_dumps(fresh, JSON_COMPACT | JSON_SORT_KEYS);
				fail_msg("step %d, %s: cached answer %s differs from the fresh %s",
				         step, nodes[n], a, f);
			}
			compared_nonempty += json_array_size(fresh) > 0;
			json_decref(answer);
			json_decref(cached);
		}
	}
	assert_true(compared_nonempty > 20); /* the comparison saw running ranks */
	assert_true(unchanged > 10);         /* and unchanged answers */
	json_decref(held[0]);
	json_decref(held[1]);
	sched_destroy(ref);
	world_free(w);
}

/* A pass marks running jobs' devices busy from a per-job cache of (node, device) positions
 * in the placement view; a node that joins and sorts first shifts every position, and the
 * cache must follow: the next gang lands on the free devices only, never on a busy one. */
static void test_busy_devices_survive_a_node_joining(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(
	    apply(w, "job.submit",
	          "{\"name\":\"first\",\"spec\":{\"name\":\"first\",\"command\":[\"x\"],"
	          "\"ranks\":4}}"),
	    201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	/* a job that never fits keeps the passes placing, so the cache is built now */
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"huge\",\"spec\":{\"name\":\"huge\",\"command\":[\"x\"],"
	                       "\"ranks\":100}}"),
	                 201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000002"), "pending");
	assert_int_equal(
	    apply(w, "node.register",
	          "{\"name\":\"node-0\",\"host\":\"10.0.0.9\",\"port_base\":29900,"
	          "\"devices\":[{\"index\":0,\"kind\":\"cpu\"},{\"index\":1,"
	          "\"kind\":\"cpu\"},{\"index\":2,\"kind\":\"cpu\"},{\"index\":3,"
	          "\"kind\":\"cpu\"}],\"token_hash\":"
	          "\"0000000000000000000000000000000000000000000000000000000000000009\"}"),
	    200);
	json_decref(heartbeat(w, "node-0", "[]"));
	assert_int_equal(
	    apply(w, "job.submit",
	          "{\"name\":\"second\",\"spec\":{\"name\":\"second\",\"command\":[\"x\"],"
	          "\"ranks\":8}}"),
	    201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000003"), "running");
	json_t *j1 = job(w, "j-000001"), *j2 = job(w, "j-000003");
	size_t i, k;
	json_t *a, *b;
	json_array_foreach(json_object_get(j1, "layout"), i, a)
	    json_array_foreach(json_object_get(j2, "layout"), k,
	                       b) if (strcmp(json_string_value(json_object_get(a, "node")),
	                                     json_string_value(json_object_get(b, "node"))) == 0 &&
	                              json_integer_value(json_object_get(a, "device")) ==
	                                  json_integer_value(json_object_get(b, "device")))
	        fail_msg("device %s/%lld given to both jobs",
	                 json_string_value(json_object_get(a, "node")),
	                 (long long)json_integer_value(json_object_get(a, "device")));
	json_decref(j1);
	json_decref(j2);
	world_free(w);
}

/* job.submit applied as raft would, with its result (the caller decrefs); takes args. */
static json_t *submit_result(struct sched_world *w, json_t *args)
{
	size_t len;
	char *cmd = fsm_command_encode("job.submit", args, NULL, w->wall, "test", "admin", &len);
	assert_non_null(cmd);
	json_t *r = json_deep_copy(fsm_apply(&w->fsm, cmd, len));
	free(cmd);
	w->applied++;
	return r;
}

/* Placement at submission (sched_submit_begin): with the queue empty a job is placed in its
 * submission's command; until that command is applied its devices are held, so a pass in
 * between does not give them to a job submitted behind it; with a job waiting, nothing is
 * placed at submission. */
static void test_placement_at_submission_holds_its_devices(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 100); /* a pass builds the view placements at submission use */
	json_t *specj = json_loads("{\"name\":\"fast\",\"command\":[\"x\"],\"ranks\":4}", 0, NULL);
	struct jobspec spec;
	struct yard_err err = {0};
	assert_int_equal(jobspec_parse(specj, &spec, &err), 0);
	uint64_t token = 0;
	json_t *ranks = sched_submit_begin(w->sched, &spec, &token);
	assert_true(token != 0);
	assert_non_null(ranks);
	assert_int_equal(json_array_size(ranks), 4);

	/* proposed, not applied: an 8-rank job applied meanwhile finds 4 devices, not 8 */
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"big\",\"spec\":{\"name\":\"big\","
	                       "\"command\":[\"x\"],\"ranks\":8}}"),
	                 201);
	run(w, 100);
	json_t *big = job(w, "j-000001");
	assert_string_equal(json_string_value(json_object_get(big, "state")), "pending");
	assert_string_equal(json_string_value(json_object_get(big, "reason")),
	                    "needs 8 devices, 4 free");
	json_decref(big);

	/* with big waiting, the next submission goes through the queue */
	uint64_t token2 = 0;
	json_t *none = sched_submit_begin(w->sched, &spec, &token2);
	assert_null(none);
	assert_true(token2 != 0);
	sched_submit_done(w->sched, token2, YARD_ENOTLEADER, NULL); /* never committed */

	/* the placed submission commits: its job runs on the devices it was given */
	json_t *args = json_pack("{s:s,s:o,s:{s:O}}", "name", "fast", "spec",
	                         jobspec_to_json(&spec), "place", "ranks", ranks);
	json_t *r = submit_result(w, args); /* (the command takes args) */
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "state")),
	                    "running");
	sched_submit_done(w->sched, token, 0, r);
	json_decref(r);
	json_t *fast = job(w, "j-000002");
	const json_t *layout = json_object_get(fast, "layout");
	assert_int_equal(json_array_size(layout), 4);
	for (size_t i = 0; i < 4; i++) {
		const json_t *a = json_array_get(layout, i), *b = json_array_get(ranks, i);
		assert_string_equal(json_string_value(json_object_get(a, "node")),
		                    json_string_value(json_object_get(b, "node")));
		assert_int_equal(json_integer_value(json_object_get(a, "device")),
		                 json_integer_value(json_object_get(b, "device")));
	}
	json_decref(fast);
	json_decref(ranks);
	jobspec_free(&spec);
	json_decref(specj);
	world_free(w);
}

/* With a queue depth of 2, the pass a submission triggers looks at the first two pending
 * jobs only: a small job that fits behind three that do not waits (with a reason) for the
 * pass that looks at every job, at most a second later. */
static void test_queue_depth_defers_deep_jobs_to_the_full_pass(void **state)
{
	struct sched_world *w = world_new_depth(2);
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"a\",\"spec\":{\"name\":\"a\",\"command\":[\"x\"],"
	                       "\"ranks\":6}}"),
	                 201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	for (int i = 0; i < 3; i++)
		assert_int_equal(apply(w, "job.submit",
		                       "{\"name\":\"big\",\"spec\":{\"name\":\"big\",\"command\":"
		                       "[\"x\"],\"ranks\":6}}"),
		                 201);
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"small\",\"spec\":{\"name\":\"small\",\"command\":"
	                       "[\"x\"],\"ranks\":2}}"),
	                 201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000005"), "pending");
	json_t *j = job(w, "j-000005");
	sched_overlay_job(w->sched, j);
	assert_int_equal(json_integer_value(json_object_get(j, "position")), 4);
	assert_non_null(strstr(json_string_value(json_object_get(j, "reason")), "next full pass"));
	json_decref(j);
	j = job(w, "j-000002");
	sched_overlay_job(w->sched, j);
	assert_string_equal(json_string_value(json_object_get(j, "reason")),
	                    "needs 6 devices, 2 free");
	json_decref(j);
	run(w, 1000);
	assert_string_equal(job_state(w, "j-000005"), "running");
	assert_string_equal(job_state(w, "j-000002"), "pending");
	world_free(w);
}

/* Jobs j-000001 .. j-<n> that are running. */
static int count_running(struct sched_world *w, int n)
{
	int running = 0;
	for (int i = 1; i <= n; i++) {
		char id[16];
		snprintf(id, sizeof id, "j-%06d", i);
		running += strcmp(job_state(w, id), "running") == 0;
	}
	return running;
}

/* Events of type `type` in the whole log. */
static int count_events(struct sched_world *w, const char *type)
{
	struct yard_err err = {0};
	int64_t after = 0;
	int n = 0;
	for (int page = 0; page < 1000; page++) {
		json_t *list = fsm_events_list(&w->fsm, after, 1000, NULL, &err), *e;
		assert_non_null(list);
		size_t i;
		json_array_foreach(json_object_get(list, "events"), i, e)
		{
			n += strcmp(json_string_value(json_object_get(e, "type")), type) == 0;
			after = json_integer_value(json_object_get(e, "seq"));
		}
		int more = json_is_integer(json_object_get(list, "next"));
		json_decref(list);
		if (!more)
			return n;
	}
	fail_msg("more than 1,000 pages of events");
	return -1;
}

/* A pass never has more than SCHED_IN_FLIGHT_MAX proposals under way: 600 pending jobs and
 * 8 free devices make 8 placements and 592 "waiting" notes, which went out in one pass
 * (on a real cluster, 60,000 commands at once took every member past the election timeout).
 * Each commit brings the next ones, and every job gets its note in the end. */
static void test_proposals_under_way_are_bounded(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	w->hold = 1;
	for (int i = 0; i < 600; i++)
		assert_int_equal(apply(w, "job.submit",
		                       "{\"name\":\"one\",\"spec\":{\"name\":\"one\",\"command\":"
		                       "[\"x\"],\"ranks\":1}}"),
		                 201);
	run(w, 1000);
	assert_true(w->max_held <= SCHED_IN_FLIGHT_MAX);
	assert_true(w->n_held >= SCHED_IN_FLIGHT_MAX - 8); /* as much as it may */
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	sched_metrics_render(w->sched, m);
	fclose(m);
	char line[64];
	snprintf(line, sizeof line, "\nyard_sched_proposals_in_flight %d\n", w->n_held);
	assert_non_null(strstr(text, line));
	assert_null(strstr(text, "\nyard_sched_passes_capped_total{pass=\"jobs\"} 0\n"));
	assert_non_null(strstr(text, "\nyard_sched_passes_capped_total{pass=\"jobs\"} "));
	free(text);
	int rounds = 0;
	while (w->n_held > 0 && rounds++ < 20) {
		sched_world_release(w);
		run(w, 1000);
		assert_true(w->max_held <= SCHED_IN_FLIGHT_MAX);
	}
	assert_int_equal(w->n_held, 0);
	assert_true(rounds >= 2); /* the notes took more than one round */
	assert_int_equal(count_events(w, "job.waiting"), 592);
	assert_int_equal(count_running(w, 600), 8);
	world_free(w);
}

/* The node-health check stops at SCHED_IN_FLIGHT_MAX proposals under way too: 600 nodes
 * silent at once go suspect and then down over several ticks, never more than that many
 * state changes waiting for their commit. */
static void test_node_state_changes_under_way_are_bounded(void **state)
{
	struct sched_world *w = world_new();
	for (int i = 0; i < 600; i++) {
		char args[512];
		snprintf(args, sizeof args,
		         "{\"name\":\"n-%03d\",\"host\":\"10.1.%d.%d\",\"port_base\":29500,"
		         "\"devices\":[{\"index\":0,\"kind\":\"cpu\"}],\"labels\":{},"
		         "\"token_hash\":\"%064d\"}",
		         i, i / 200, i % 200 + 1, i + 100);
		assert_int_equal(apply(w, "node.register", args), 200);
	}
	w->hold = 1;
	int rounds = 0, down = 0;
	while (down < 600 && rounds++ < 100) {
		run(w, 500);
		assert_true(w->max_held <= SCHED_IN_FLIGHT_MAX);
		sched_world_release(w);
		down = 0;
		for (int i = 0; i < 600; i++) {
			char id[16];
			snprintf(id, sizeof id, "n-%03d", i);
			down += strcmp(node_state(w, id), "down") == 0;
		}
	}
	assert_int_equal(down, 600);
	assert_int_equal(w->max_held, SCHED_IN_FLIGHT_MAX); /* the bound was reached */
	world_free(w);
}

/* Runs ticks for ms with the scheduler's log lines (stderr) captured: malloc'd text. */
static char *run_logged(struct sched_world *w, uint64_t ms)
{
	fflush(stderr);
	FILE *tmp = tmpfile();
	assert_non_null(tmp);
	int saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	assert_true(dup2(fileno(tmp), STDERR_FILENO) >= 0);
	run(w, ms);
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	long len = ftell(tmp);
	assert_true(len >= 0);
	char *text = calloc(1, (size_t)len + 1);
	rewind(tmp);
	assert_int_equal(fread(text, 1, (size_t)len, tmp), (size_t)len);
	fclose(tmp);
	return text;
}

static int count_lines_with(const char *text, const char *needle)
{
	int n = 0;
	for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

/* A leader whose proposals all fail (its leadership lost, or a shutdown, with many under way)
 * logs the first failure and then one line a second counting the others, not a line per
 * proposal; and places the jobs once proposals commit again. */
static void test_failed_proposals_are_summarised_in_the_log(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	for (int i = 0; i < 20; i++)
		assert_int_equal(apply(w, "job.submit",
		                       "{\"name\":\"one\",\"spec\":{\"name\":\"one\",\"command\":"
		                       "[\"x\"],\"ranks\":1}}"),
		                 201);
	w->propose_status = YARD_ENOTLEADER;
	char *log = run_logged(w, 2500); /* 25 ticks, each proposing 8 placements and notes */
	int full = count_lines_with(log, "not committed: not the leader");
	int summaries = count_lines_with(log, "more proposals not committed (the last: job.");
	if (full < 1 || full > 3 || summaries < 1 || summaries > 3)
		fail_msg("%d lines of a failed proposal and %d summaries in:\n%s", full, summaries,
		         log);
	free(log);
	w->propose_status = 0;
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 300);
	assert_int_equal(count_running(w, 20), 8);
	world_free(w);
}

/* Submits a command job of this many ranks and priority. */
static void submit_command(struct sched_world *w, int ranks, int priority)
{
	char args[256];
	snprintf(args, sizeof args,
	         "{\"name\":\"c\",\"priority\":%d,\"spec\":{\"name\":\"c\",\"command\":[\"x\"],"
	         "\"ranks\":%d,\"priority\":%d}}",
	         priority, ranks, priority);
	assert_int_equal(apply(w, "job.submit", args), 201);
}

/* Submits a command job of this many ranks and priority, which must run at once with its
 * rank 0 on node expect. */
static void submit_placed_on(struct sched_world *w, int ranks, int priority, const char *id,
                             const char *expect)
{
	char node[64];
	submit_command(w, ranks, priority);
	run(w, 100);
	assert_string_equal(job_state(w, id), "running");
	first_node(w, id, node, sizeof node);
	assert_string_equal(node, expect);
}

/* Topology (place.h): nodes a, c on switch s1 and b, d on s2; a gang goes to the switch with
 * the least room that holds it. A node registered again on another switch moves in the
 * placement view (the view's (domain, id) order is rebuilt), so the next gang follows it. */
static void test_placement_follows_a_node_moving_to_another_switch(void **state)
{
	struct sched_world *w = world_new();
	static const char *const sw[] = {"{\"switch\":\"s1\"}", "{\"switch\":\"s2\"}"};
	for (int n = 0; n < 4; n++)
		assert_int_equal(sched_world_add_node_labelled(w, n, sw[n % 2]), 200);
	const char *names[] = {"node-a", "node-b", "node-c", "node-d"};
	for (int n = 0; n < 4; n++)
		json_decref(heartbeat(w, names[n], "[]"));
	/* both switches hold 4 ranks (room 8 each): the first seen, s1, on its first node */
	submit_placed_on(w, 4, 0, "j-000001", "node-a");
	/* s1 has room for 4 (node-c), s2 for 8: 4 ranks go to node-c (best fit) ... */
	submit_placed_on(w, 4, 0, "j-000002", "node-c");
	/* ... until node-d moves to s1: s1 has room for 4 (node-d), s2 for 4 (node-b), and the
	 * tie goes to s1; before the move, s2 had room for 8 and s1 none */
	assert_int_equal(sched_world_add_node_labelled(w, 3, sw[0]), 200);
	json_decref(heartbeat(w, "node-d", "[]"));
	run(w, 100);
	submit_placed_on(w, 2, 0, "j-000003", "node-d");
	/* 4 ranks: s2 holds them (node-b), s1 has room for 2 */
	submit_placed_on(w, 4, 0, "j-000004", "node-b");
	world_free(w);
}

/* Submits a trainer job of dp 4 (4 ranks) that checkpoints into dir ("dir:" store). */
static void submit_dp4_to_dir(struct sched_world *w, const char *dir)
{
	char args[512];
	snprintf(args, sizeof args,
	         "{\"name\":\"t\",\"spec\":{\"name\":\"t\",\"parallel\":{\"dp\":4},"
	         "\"checkpoint\":{\"store\":\"dir:%s\"}}}",
	         dir);
	assert_int_equal(apply(w, "job.submit", args), 201);
}

/* A new leader rereads every active job a chunk per pass (so that thousands of queued jobs
 * do not hold its loop while requests wait) and decides nothing until it has read them all:
 * the first pass places nothing, and the job that fits is placed once the reread is over. */
static void test_new_leader_rereads_jobs_in_chunks_before_deciding(void **state)
{
	struct sched_world *w = world_new_depth(0); /* every pass looks at the whole queue */
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	submit_command(w, 6, 0); /* j-000001 runs on 6 of the 8 devices */
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	sched_leader_down(w->sched);
	for (int i = 0; i < 150; i++)
		submit_command(w, 6, 0); /* j-000002..151: none fits */
	submit_command(w, 2, 0);         /* j-000152 fits beside j-000001 */
	sched_leader_up(w->sched);
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	advance(w, 100);
	sched_tick(w->sched); /* the first chunk only */
	assert_string_equal(job_state(w, "j-000152"), "pending");
	int ticks = 1;
	while (strcmp(job_state(w, "j-000152"), "pending") == 0 && ticks < 20) {
		advance(w, 100);
		sched_tick(w->sched);
		ticks++;
	}
	assert_string_equal(job_state(w, "j-000152"), "running");
	assert_true(ticks >= 3); /* 152 jobs: at least three passes of 64 */
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_string_equal(job_state(w, "j-000002"), "pending");
	world_free(w);
}

/* A leader that loses its leadership drops its soft jobs a chunk per loop iteration: a deep
 * queue's JSON trees and caches released at once held the loop ~1 s at 100,000 jobs. The
 * soft state is gone at once (a new leadership starts empty), the memory a little later. */
static void test_dropped_jobs_are_released_a_chunk_per_iteration(void **state)
{
	struct sched_world *w = world_new_depth(0);
	json_decref(heartbeat(w, "node-a", "[]"));
	for (int i = 0; i < 5000; i++)
		submit_command(w, 16, 0); /* none fits: all stay pending */
	for (int i = 0; i < 100; i++) {   /* the reread goes 64 jobs a pass */
		advance(w, 100);
		sched_tick(w->sched);
	}
	assert_string_equal(job_state(w, "j-005000"), "pending");
	sched_leader_down(w->sched);
	assert_int_equal(sched_jobs_dropping(w->sched), 5000);
	int iterations = 0;
	while (sched_jobs_dropping(w->sched) > 0 && iterations < 100) {
		uv_run(&w->loop, UV_RUN_NOWAIT);
		iterations++;
	}
	assert_int_equal(sched_jobs_dropping(w->sched), 0);
	assert_true(iterations >= 3); /* 5,000 jobs, 2,048 an iteration */
	/* leading again while nothing is left to drop, and again while a drop goes on */
	sched_leader_up(w->sched);
	for (int i = 0; i < 100; i++) {
		advance(w, 100);
		sched_tick(w->sched);
	}
	sched_leader_down(w->sched);
	sched_leader_up(w->sched);
	assert_int_equal(sched_jobs_dropping(w->sched), 5000);
	world_free(w); /* frees what is left (the sanitizer build checks) */
}

/* The pass a submission triggers looks at the first queue_depth jobs in queue order, not in
 * submission order: a high-priority job submitted behind a long queue is among them and is
 * placed at once, without waiting for the pass over every job. */
static void test_shallow_pass_takes_the_first_jobs_in_queue_order(void **state)
{
	struct sched_world *w = world_new_depth(2);
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	submit_command(w, 6, 0); /* j-000001 */
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	for (int i = 0; i < 6; i++) /* j-000002..7: none fits beside a */
		submit_command(w, 6, 0);
	run(w, 1000);            /* a pass over every job has seen them all */
	submit_command(w, 2, 5); /* j-000008, urgent */
	submit_command(w, 1, 0); /* j-000009 */
	run(w, 100);             /* not a full pass: only the first two in queue order are tried */
	assert_string_equal(job_state(w, "j-000008"), "running");
	assert_string_equal(job_state(w, "j-000009"), "pending");
	run(w, 100); /* the scheduler sees the assignment it proposed */
	json_t *j = job(w, "j-000009");
	sched_overlay_job(w->sched, j);
	/* behind the six big jobs (the urgent one runs) */
	assert_int_equal(json_integer_value(json_object_get(j, "position")), 7);
	json_decref(j);
	j = job(w, "j-000002");
	sched_overlay_job(w->sched, j);
	assert_int_equal(json_integer_value(json_object_get(j, "position")), 1);
	json_decref(j);
	world_free(w);
}

/* run() with both nodes heard every 500 ms (no rank reports: nothing exits) */
static void run_heard(struct sched_world *w, uint64_t ms)
{
	for (uint64_t t = 0; t < ms; t += 500) {
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 500);
	}
}

/* Jobs that end leave the scheduler's table (after a quarter of it has ended, in one
 * compaction): the jobs still queued keep their order, positions and placement. */
static void test_ended_jobs_leave_the_queue_in_order(void **state)
{
	struct sched_world *w = world_new_depth(1); /* a pass after a change tries one job */
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	/* j-000001..8 run (one device each), 9..40 wait; the last one with a higher priority */
	for (int i = 0; i < 40; i++) {
		if (i == 8)
			run_heard(w, 500);
		submit_command(w, 1, i < 39 ? 0 : 3);
	}
	run_heard(w, 1000);
	assert_string_equal(job_state(w, "j-000008"), "running");
	assert_string_equal(job_state(w, "j-000009"), "pending");
	char args[64], id[16];
	for (int i = 9; i < 39; i++) { /* cancel all but the last two queued */
		snprintf(args, sizeof args, "{\"id\":\"j-%06d\"}", i);
		assert_int_equal(apply(w, "job.cancel", args), 200);
		if (i % 7 == 0)
			run_heard(w, 500); /* some passes in between: released a few at a time */
	}
	run_heard(w, 1000);
	for (int i = 39; i <= 40; i++) {
		snprintf(id, sizeof id, "j-%06d", i);
		json_t *j = job(w, id);
		sched_overlay_job(w->sched, j);
		assert_string_equal(json_string_value(json_object_get(j, "state")), "pending");
		assert_int_equal(json_integer_value(json_object_get(j, "position")), 40 - i + 1);
		json_decref(j);
	}
	/* two running jobs end: the two queued take their devices, in queue order */
	assert_int_equal(apply(w, "job.cancel", "{\"id\":\"j-000001\"}"), 200);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000040"), "running");
	assert_string_equal(job_state(w, "j-000039"), "pending");
	assert_int_equal(apply(w, "job.cancel", "{\"id\":\"j-000002\"}"), 200);
	run_heard(w, 1000);
	assert_string_equal(job_state(w, "j-000039"), "running");
	/* a new job after the compaction is found and placed like any other */
	assert_int_equal(apply(w, "job.cancel", "{\"id\":\"j-000003\"}"), 200);
	submit_command(w, 1, 0);
	run_heard(w, 1000);
	assert_string_equal(job_state(w, "j-000041"), "running");
	world_free(w);
}

static void test_restarts_backoff_and_failure(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(
	    apply(w, "job.submit",
	          "{\"name\":\"c\",\"spec\":{\"name\":\"c\",\"command\":[\"x\"],"
	          "\"ranks\":2,\"failure\":{\"max_restarts\":2,\"hang_timeout_s\":5}}}"),
	    201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	/* rank 1 exits 1: restart 1 at once (no back-off), re-placed with YARD_RESUME=1 */
	json_decref(
	    heartbeat(w, "node-a",
	              "[{\"job\":\"j-000001\",\"rank\":0,\"generation\":1,\"state\":\"running\"},"
	              "{\"job\":\"j-000001\",\"rank\":1,\"generation\":1,\"state\":\"exited\","
	              "\"exit_code\":1}]"));
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "restarting");
	/* rank 0 of generation 1 still runs: the restart waits for it to stop */
	run(w, 300);

	assert_string_equal(job_state(w, "j-000001"), "restarting");
	json_t *j = job(w, "j-000001");
	sched_overlay_job(w->sched, j);
	assert_non_null(strstr(json_string_value(json_object_get(j, "reason")), "to stop"));
	json_decref(j);
	json_decref(heartbeat(w, "node-a", "[]"));
	run(w, 300);
	assert_string_equal(job_state(w, "j-000001"), "running");
	json_t *d = heartbeat(w, "node-a", "[]");
	assert_int_equal(json_array_size(d), 2);
	assert_string_equal(env_of(d, 0, "YARD_RESUME"), "1");
	assert_string_equal(env_of(d, 0, "YARD_GENERATION"), "2");
	json_decref(d);

	/* a command job that reported step 3 and then none for hang_timeout_s (5 s): hung */
	int hung_at = -1;
	for (int t = 0; t <= 7000 && hung_at < 0; t += 500) {
		char ranks[512];
		snprintf(
		    ranks, sizeof ranks,
		    "[{\"job\":\"j-000001\",\"rank\":0,\"generation\":2,\"state\":\"running\","
		    "\"step\":3,\"last_step_ms_ago\":%d},"
		    "{\"job\":\"j-000001\",\"rank\":1,\"generation\":2,\"state\":\"running\"}]",
		    t);
		json_decref(heartbeat(w, "node-a", ranks));
		for (int k = 0; k < 5 && hung_at < 0; k++) {
			run(w, 100);
			if (strcmp(job_state(w, "j-000001"), "restarting") == 0)
				hung_at = t + (k + 1) * 100;
		}
	}
	assert_in_range(hung_at, 5000, 5200);
	json_decref(heartbeat(w, "node-a", "[]"));
	/* the second restart waits restart_backoff_ms (500) */
	run(w, 300);
	assert_string_equal(job_state(w, "j-000001"), "restarting");
	run(w, 400);
	assert_string_equal(job_state(w, "j-000001"), "running");
	/* the third failure exceeds max_restarts 2 */
	json_decref(
	    heartbeat(w, "node-a",
	              "[{\"job\":\"j-000001\",\"rank\":0,\"generation\":3,\"state\":\"exited\","
	              "\"signal\":9}]"));
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "failed");
	j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 2);
	assert_non_null(strstr(json_string_value(json_object_get(j, "reason")), "signal 9"));
	json_decref(j);
	/* a failed job's ranks are no longer desired */
	d = heartbeat(w, "node-a", "[]");
	assert_int_equal(json_array_size(d), 0);
	json_decref(d);
	world_free(w);
}

/* failure.first_step_timeout_s: a rank that reports no step that long after its start is
 * hung, command job or not; without it a command rank is judged only after a first step */
static void test_first_step_timeout(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(
	    apply(w, "job.submit",
	          "{\"name\":\"slow\",\"spec\":{\"name\":\"slow\",\"command\":[\"x\"],\"ranks\":1,"
	          "\"failure\":{\"max_restarts\":1,\"hang_timeout_s\":1,"
	          "\"first_step_timeout_s\":3}}}"),
	    201);
	assert_int_equal(
	    apply(
	        w, "job.submit",
	        "{\"name\":\"quiet\",\"spec\":{\"name\":\"quiet\",\"command\":[\"x\"],\"ranks\":1,"
	        "\"failure\":{\"hang_timeout_s\":1}}}"),
	    201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_string_equal(job_state(w, "j-000002"), "running");
	/* each node reports the rank it runs: no step yet, silent for t ms */
	char node_of[2][16];
	for (int k = 0; k < 2; k++)
		first_node(w, k == 0 ? "j-000001" : "j-000002", node_of[k], sizeof node_of[k]);
	int hung_at = -1;
	for (int t = 0; t <= 5000 && hung_at < 0; t += 500) {
		for (int n = 0; n < 2; n++) {
			const char *node = n == 0 ? "node-a" : "node-b";
			char ranks[512] = "[";
			for (int k = 0; k < 2; k++)
				if (strcmp(node_of[k], node) == 0)
					snprintf(
					    ranks + strlen(ranks), sizeof ranks - strlen(ranks),
					    "%s{\"job\":\"j-00000%d\",\"rank\":0,\"generation\":1,"
					    "\"state\":\"running\",\"step\":-1,\"last_step_ms_"
					    "ago\":%d}",
					    strlen(ranks) > 1 ? "," : "", k + 1, t);
			strcat(ranks, "]");
			json_decref(heartbeat(w, node, ranks));
		}
		for (int k = 0; k < 5 && hung_at < 0; k++) {
			run(w, 100);
			if (strcmp(job_state(w, "j-000001"), "restarting") == 0)
				hung_at = t + (k + 1) * 100;
		}
	}
	/* 3 s, not hang_timeout_s (1 s) */
	assert_in_range(hung_at, 3000, 3200);
	json_t *j = job(w, "j-000001");
	sched_overlay_job(w->sched, j);
	assert_non_null(strstr(json_string_value(json_object_get(j, "reason")),
	                       "rank 0 on node node-a reported no step in the"));
	assert_non_null(
	    strstr(json_string_value(json_object_get(j, "reason")), "(first_step_timeout_s 3)"));
	json_decref(j);
	/* the command job without it is not judged before a step, 3.5 s of silence or not */
	assert_string_equal(job_state(w, "j-000002"), "running");
	world_free(w);
}

static void test_node_death_moves_the_job(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"m\",\"spec\":{\"name\":\"m\",\"command\":[\"x\"],"
	                       "\"ranks\":4}}"),
	                 201);
	run(w, 100);
	json_t *j = job(w, "j-000001");
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(json_object_get(j, "layout"), 0), "node")),
	                    "node-a");
	json_decref(j);
	/* node-b keeps beating, node-a falls silent */
	for (int i = 0; i < 40; i++) {
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
	assert_string_equal(node_state(w, "node-a"), "down");
	assert_string_equal(node_state(w, "node-b"), "up");
	assert_string_equal(job_state(w, "j-000001"), "running");
	j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(json_object_get(j, "layout"), 3), "node")),
	                    "node-b");
	json_decref(j);
	/* the dead node, should it come back, is told to run nothing of the old generation */
	json_t *d = heartbeat(w, "node-a", "[]");
	assert_int_equal(json_array_size(d), 0);
	json_decref(d);
	world_free(w);
}

/* Events of a job whose type is `type`, joined by newlines (static buffer). */
static const char *events_of(struct sched_world *w, const char *id, const char *type)
{
	static char out[4096];
	struct yard_err err = {0};
	json_t *list = fsm_events_list(&w->fsm, 0, 1000, id, &err), *e;
	size_t i;
	out[0] = '\0';
	assert_non_null(list);
	json_array_foreach(json_object_get(list, "events"), i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "type")), type) != 0)
			continue;
		size_t len = strlen(out);
		snprintf(out + len, sizeof out - len, "%s\n",
		         json_string_value(json_object_get(e, "message")));
	}
	json_decref(list);
	return out;
}

static int count_lines(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* The desired entries' spec layout "dp N ranks R" of rank 0's entry. */
static void desired_layout(const json_t *d, int *dp, int *ranks, int *world_size)
{
	const json_t *spec = json_object_get(json_array_get(d, 0), "spec");
	*dp = (int)json_integer_value(json_object_get(json_object_get(spec, "parallel"), "dp"));
	*ranks = (int)json_integer_value(json_object_get(spec, "ranks"));
	*world_size = (int)json_integer_value(json_object_get(json_array_get(d, 0), "world_size"));
}

/* Both nodes beat (no ranks) until job j-000001 reaches generation gen, for at most 5 s
 * (a restart's back-off); returns the job. */
static json_t *wait_generation(struct sched_world *w, int gen)
{
	json_t *j = job(w, "j-000001");
	for (int i = 0; i < 50 && json_integer_value(json_object_get(j, "generation")) < gen; i++) {
		json_decref(j);
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
		j = job(w, "j-000001");
	}
	if (json_integer_value(json_object_get(j, "generation")) != gen) {
		sched_overlay_job(w->sched, j);
		char *text = json_dumps(j, JSON_COMPACT);
		fail_msg("job did not reach generation %d: %s", gen, text);
	}
	return j;
}

static void write_manifest(const char *dir, int step, int world)
{
	char path[512];
	snprintf(path, sizeof path, "%s/j-000001/step-%08d", dir, step);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "mkdir -p %s", path);
	assert_int_equal(system(cmd), 0);
	strcat(path, "/MANIFEST");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "job j-000001\nstep %d\nworld %d\nformat 1\n", step, world);
	fclose(f);
}

/* failure.allow_shrink_dp: node-a dies under a dp 2 x tp 2 x pp 2 job; node-b's 4 devices
 * take it with dp 1 (ranks 0-3), committed with an event saying why, and the ranks are told
 * to run the shrunk spec. When node-a is back and the dp 1 generation has completed a
 * checkpoint, the leader restarts it on its own (not counted) and it takes dp 2 again,
 * restoring that checkpoint. */
static void test_shrink_on_node_death_and_grow_back(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_shrinkXXXXXX", spec[1024], args[1200];
	assert_non_null(mkdtemp(dir));
	snprintf(spec, sizeof spec,
	         "{\"name\":\"s\",\"train\":{\"batch_size\":32},\"parallel\":{\"dp\":2,\"tp\":2,"
	         "\"pp\":2,\"micro_batches\":4},\"checkpoint\":{\"every_steps\":20,\"store\":"
	         "\"dir:%s\"},\"failure\":{\"max_restarts\":5,\"allow_shrink_dp\":true}}",
	         dir);
	snprintf(args, sizeof args, "{\"name\":\"s\",\"spec\":%s}", spec);
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit", args), 201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	write_manifest(dir, 40, 8);
	for (int i = 0; i < 40; i++) {
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
	assert_string_equal(node_state(w, "node-a"), "down");
	assert_string_equal(job_state(w, "j-000001"), "running");
	json_t *j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	assert_int_equal(json_array_size(json_object_get(j, "layout")), 4);
	json_t *want = json_loads("{\"dp\":1,\"tp\":2,\"pp\":2,\"world\":4,\"spec_dp\":2,"
	                          "\"shrunk\":true}",
	                          0, NULL);
	assert_true(json_equal(json_object_get(j, "effective"), want));
	json_decref(want);
	json_decref(j);
	assert_string_equal(events_of(w, "j-000001", "job.shrunk"),
	                    "job j-000001 re-placed with dp 1 (spec dp 2), 4 of 8 ranks: needs 8 "
	                    "devices, 4 free\n");
	json_t *d = heartbeat(w, "node-b", "[]");
	int dp, ranks, world;
	assert_int_equal(json_array_size(d), 4);
	desired_layout(d, &dp, &ranks, &world);
	assert_int_equal(dp, 1);
	assert_int_equal(ranks, 4);
	assert_int_equal(world, 4);
	json_decref(d);

	/* node-a comes back: 8 devices would be free, but the dp 1 generation has no checkpoint
	 * yet (a restart would lose its progress): it keeps running */
	json_decref(heartbeat(w, "node-a", "[]"));
	run(w, 100);
	assert_string_equal(node_state(w, "node-a"), "up");
	for (int i = 0; i < 10; i++) {
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
	j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	json_decref(j);
	/* its checkpoint of step 60 completes: the leader restarts it (not counted) and it grows
	 * back to dp 2, its ranks restoring the dp 1 shards */
	write_manifest(dir, 60, 4);
	j = wait_generation(w, 3);
	assert_int_equal(json_array_size(json_object_get(j, "layout")), 8);
	assert_false(json_is_true(json_object_get(json_object_get(j, "effective"), "shrunk")));
	json_decref(j);
	assert_non_null(strstr(events_of(w, "j-000001", "job.restarting"),
	                       "not counted against max_restarts): growing back to dp 2 (runs dp "
	                       "1): 8 devices free for its 8 ranks; from checkpoint step 60"));
	assert_int_equal(json_integer_value(json_object_get(j = job(w, "j-000001"), "restarts")),
	                 1);
	json_decref(j);
	assert_non_null(strstr(events_of(w, "j-000001", "job.placed"),
	                       "re-placed (generation 3): 8 rank(s) on node-a (4), node-b (4); "
	                       "restoring from checkpoint step 60"));
	d = heartbeat(w, "node-a", "[]");
	assert_int_equal(json_array_size(d), 4);
	desired_layout(d, &dp, &ranks, &world);
	assert_int_equal(dp, 2);
	assert_int_equal(world, 8);
	json_decref(d);
	world_free_removing(w, dir);
}

/* A heartbeat from node-a for ranks 0-3 of job j-000001 (generation gen) carrying windows
 * first..last, where rank slow's compute is factor times the others' 10 ms. */
static void beat_windows(struct sched_world *w, const char *node, int first_rank, int gen,
                         int64_t first, int64_t last, int slow, double factor)
{
	char ranks[8192];
	size_t len = 0;
	len += (size_t)snprintf(ranks + len, sizeof ranks - len, "[");
	for (int r = first_rank; r < first_rank + 4; r++) {
		len +=
		    (size_t)snprintf(ranks + len, sizeof ranks - len,
		                     "%s{\"job\":\"j-000001\",\"rank\":%d,\"generation\":%d,"
		                     "\"state\":\"running\",\"step\":%lld,\"windows\":[",
		                     r > first_rank ? "," : "", r, gen, (long long)(last + 1) * 10);
		for (int64_t wi = first; wi <= last; wi++)
			len +=
			    (size_t)snprintf(ranks + len, sizeof ranks - len,
			                     "%s{\"index\":%lld,\"steps\":10,\"compute_ms\":%.3f,"
			                     "\"comm_wait_ms\":1}",
			                     wi > first ? "," : "", (long long)wi,
			                     (r == slow ? factor : 1.0) * (10 + 0.01 * r));
		len += (size_t)snprintf(ranks + len, sizeof ranks - len, "]}");
	}
	snprintf(ranks + len, sizeof ranks - len, "]");
	json_decref(heartbeat(w, node, ranks));
	run(w, 100);
}

static void test_straggler_report_and_recovery(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"t\",\"spec\":{\"name\":\"t\",\"parallel\":{\"dp\":4},"
	                       "\"failure\":{\"straggler\":{\"policy\":\"report\",\"windows\":2,"
	                       "\"window_steps\":10,\"persist_s\":1}}}}"),
	                 201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	/* rank 2 is 1.5x (10 x (15 + 1 ms) = 160 ms a window): with persist_s 1 its slow share
	 * passes one half in the fifth window (1 - e^(-0.16 n)), not the second (K);
	 * heartbeats repeat the last 4 windows */
	for (int64_t k = 0; k < 6; k++)
		beat_windows(w, "node-a", 0, 1, k > 3 ? k - 3 : 0, k, 2, 1.5);
	run(w, 500); /* notes go out one per tick, after running/progress */
	const char *flags = events_of(w, "j-000001", "job.straggler");
	assert_int_equal(count_lines(flags), 1);
	assert_non_null(strstr(flags, "rank 2 on node node-a: compute 15 ms per step, 1.50x the "
	                              "median of pipeline stage 0 (10 ms) for 2 window(s) of 10 "
	                              "steps, slow 55% of the recent ~1 s (through step 50)"));
	json_t *j = job(w, "j-000001");
	sched_overlay_job(w->sched, j);
	json_t *list = json_object_get(j, "stragglers");
	assert_int_equal(json_array_size(list), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "rank")), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "node")),
	                    "node-a");
	assert_int_equal(json_integer_value(json_object_get(j, "straggler_windows_judged")), 6);
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(j, "ranks"), i, r)
	{
		assert_int_equal(json_is_true(json_object_get(r, "straggler")),
		                 json_integer_value(json_object_get(r, "rank")) == 2);
		assert_null(json_object_get(r, "windows"));
		assert_non_null(json_object_get(r, "window_compute_ms"));
	}
	json_decref(j);
	/* the metric names the rank */
	char *text = NULL;
	size_t text_len = 0;
	FILE *f = open_memstream(&text, &text_len);
	sched_metrics_render(w->sched, f);
	fclose(f);
	assert_non_null(
	    strstr(text, "yard_straggler_ratio{job=\"j-000001\",rank=\"2\",node=\"node-a\"} 1.5"));
	assert_non_null(strstr(text, "yard_stragglers_flagged_total 1\n"));
	free(text);
	/* rank 2 back to normal (110 ms a window): its share (0.62) falls under one half in the
	 * second window: one event */
	beat_windows(w, "node-a", 0, 1, 3, 6, 2, 1.0);
	run(w, 300);
	assert_int_equal(count_lines(events_of(w, "j-000001", "job.straggler_ok")), 0);
	beat_windows(w, "node-a", 0, 1, 4, 7, 2, 1.0);
	run(w, 300);
	assert_int_equal(count_lines(events_of(w, "j-000001", "job.straggler_ok")), 1);
	assert_non_null(strstr(events_of(w, "j-000001", "job.straggler_ok"),
	                       "is no longer a straggler: compute 1.00x the median of pipeline "
	                       "stage 0 for 2 window(s), slow 50% of the recent ~1 s (through step "
	                       "80)"));
	assert_int_equal(count_lines(events_of(w, "j-000001", "job.straggler")), 1);
	j = job(w, "j-000001");
	sched_overlay_job(w->sched, j);
	assert_int_equal(json_array_size(json_object_get(j, "stragglers")), 0);
	assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
	json_decref(j);
	world_free(w);
}

#define CMD_JOB(name, extra)                                                                       \
	"{\"name\":\"" name "\",\"spec\":{\"name\":\"" name "\",\"command\":[\"x\"],\"ranks\":1,"  \
	"\"failure\":{\"max_restarts\":0}" extra "}}"

/* The pending reason of job id as the leader shows it. */
static const char *reason_of(struct sched_world *w, const char *id)
{
	static char text[512];
	json_t *j = job(w, id);
	sched_overlay_job(w->sched, j);
	snprintf(text, sizeof text, "%s", json_string_value(json_object_get(j, "reason")));
	json_decref(j);
	return text;
}

/* Rank 0 of generation 1 of job id exits with code, reported by its node; 300 ms pass. */
static void rank0_exits(struct sched_world *w, const char *id, int code)
{
	char node[64], report[256];
	first_node(w, id, node, sizeof node);
	snprintf(report, sizeof report,
	         "[{\"job\":\"%s\",\"rank\":0,\"generation\":1,\"state\":\"exited\","
	         "\"exit_code\":%d}]",
	         id, code);
	json_decref(heartbeat(w, node, report));
	run(w, 300);
}

/* A job with "after" is placed only once every job it lists has succeeded, and fails when
 * one of them fails; while it waits its reason names the job and it takes no devices. */
static void test_after_waits_for_success_and_fails_with_a_failure(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	assert_int_equal(apply(w, "job.submit", CMD_JOB("a", "")), 201);
	assert_int_equal(apply(w, "job.submit", CMD_JOB("x", "")), 201);
	assert_int_equal(apply(w, "job.submit", CMD_JOB("b", ",\"after\":[\"j-000001\"]")), 201);
	assert_int_equal(
	    apply(w, "job.submit", CMD_JOB("c", ",\"after\":[\"j-000001\",\"j-000002\"]")), 201);
	assert_int_equal(apply(w, "job.submit", CMD_JOB("d", "")), 201);
	run(w, 300);
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_string_equal(job_state(w, "j-000002"), "running");
	assert_string_equal(job_state(w, "j-000003"), "pending");
	assert_string_equal(job_state(w, "j-000004"), "pending");
	/* a job behind them is not held up: it takes a device they do not */
	assert_string_equal(job_state(w, "j-000005"), "running");
	assert_string_equal(reason_of(w, "j-000003"),
	                    "waits for job j-000001 (running) to succeed (after)");
	/* a succeeds: b is placed; c still waits for x */
	rank0_exits(w, "j-000001", 0);
	assert_string_equal(job_state(w, "j-000001"), "succeeded");
	assert_string_equal(job_state(w, "j-000003"), "running");
	assert_string_equal(job_state(w, "j-000004"), "pending");
	assert_string_equal(reason_of(w, "j-000004"),
	                    "waits for job j-000002 (running) to succeed (after)");
	/* a, ended, is kept while c waits for it (not deleted, not collected) */
	char waiter[32] = "";
	assert_int_equal(sched_job_awaited_by(w->sched, "j-000001", waiter, sizeof waiter), 1);
	assert_string_equal(waiter, "j-000004");
	assert_int_equal(sched_job_awaited_by(w->sched, "j-000005", waiter, sizeof waiter), 0);
	/* x fails: c fails, naming it */
	rank0_exits(w, "j-000002", 3);
	assert_string_equal(job_state(w, "j-000002"), "failed");
	assert_string_equal(job_state(w, "j-000004"), "failed");
	assert_non_null(strstr(events_of(w, "j-000004", "job.failed"),
	                       "job j-000002 it waited for (after) ended failed"));
	assert_int_equal(sched_job_awaited_by(w->sched, "j-000001", waiter, sizeof waiter), 0);
	/* submitting after a failed job, or an unknown one, is refused (test_fsm: by name) */
	assert_int_equal(apply(w, "job.submit", CMD_JOB("e", ",\"after\":[\"j-000002\"]")), 400);
	assert_int_equal(apply(w, "job.submit", CMD_JOB("e", ",\"after\":[\"j-000099\"]")), 400);
	/* after a job that already succeeded: placed as any other */
	assert_int_equal(apply(w, "job.submit", CMD_JOB("f", ",\"after\":[\"j-000001\"]")), 201);
	run(w, 300);
	assert_string_equal(job_state(w, "j-000006"), "running");
	world_free(w);
}

/* The start estimate of waiting job id (sched_overlay_estimate): its sentence, and the
 * estimated start into *start (-1 without one). */
static const char *estimate_of(struct sched_world *w, const char *id, int64_t *start)
{
	static char text[512];
	json_t *j = job(w, id);
	sched_overlay_estimate(w->sched, j);
	const json_t *at = json_object_get(j, "estimated_start_ms");
	*start = json_is_integer(at) ? json_integer_value(at) : -1;
	snprintf(text, sizeof text, "%s", json_string_value(json_object_get(j, "estimate")));
	json_decref(j);
	return text;
}

/* the nodes' reports: j-000001's 4 command ranks running (on one node), j-000002's 4
 * trainer ranks at step (on the other) */
static void beat_two_jobs(struct sched_world *w, int step)
{
	char ranks[1024], node[64];
	for (int job = 1; job <= 2; job++) {
		first_node(w, job == 1 ? "j-000001" : "j-000002", node, sizeof node);
		snprintf(ranks, sizeof ranks, "[");
		for (int r = 0; r < 4; r++) {
			snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks),
			         "%s{\"job\":\"j-00000%d\",\"rank\":%d,\"generation\":1,"
			         "\"state\":\"running\"",
			         r ? "," : "", job, r);
			if (job == 2)
				snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks),
				         ",\"step\":%d", step);
			snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), "}");
		}
		snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), "]");
		json_decref(heartbeat(w, node, ranks));
	}
}

/* A waiting job's start estimate: none while a job holding the devices it needs has no
 * expected end (named); then the running jobs' ends (a time limit, a measured step rate) and
 * the jobs ahead of it, in order, each freeing its devices at its time limit. */
static void test_start_estimate_follows_limits_rates_and_the_queue(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]")); /* 2 nodes of 4 devices */
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"l\",\"spec\":{\"name\":\"l\",\"command\":[\"x\"],"
	                       "\"ranks\":4,\"time_limit_s\":20}}"),
	                 201);
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"t\",\"spec\":{\"name\":\"t\",\"parallel\":{\"dp\":4},"
	                       "\"train\":{\"steps\":1000}}}"),
	                 201);
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"w\",\"spec\":{\"name\":\"w\",\"command\":[\"x\"],"
	                       "\"ranks\":8,\"time_limit_s\":50}}"),
	                 201);
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"v\",\"spec\":{\"name\":\"v\",\"command\":[\"x\"],"
	                       "\"ranks\":2}}"),
	                 201);
	assert_int_equal(apply(w, "job.submit", CMD_JOB("a", ",\"after\":[\"j-000003\"]")), 201);
	run(w, 300);
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_string_equal(job_state(w, "j-000002"), "running");
	assert_string_equal(job_state(w, "j-000003"), "pending");
	assert_string_equal(job_state(w, "j-000004"), "pending");
	int64_t at;
	/* the trainer has reported no step: no rate, no time limit */
	const char *why = estimate_of(w, "j-000003", &at);
	assert_int_equal(at, -1);
	if (strstr(why, "no estimate: it needs devices held by jobs with no expected end") ==
	        NULL ||
	    strstr(why, "j-000002") == NULL)
		fail_msg("estimate: %s", why);
	assert_string_equal(estimate_of(w, "j-000005", &at),
	                    "no estimate: it waits for the jobs of its after list");
	/* 100 steps in 5 s: 20 steps/s, 800 left: ends about 40 s on, after j-000001's 20 s */
	beat_two_jobs(w, 100);
	run(w, 200);
	for (int k = 1; k <= 5; k++) {
		run(w, 800);
		beat_two_jobs(w, 100 + 20 * k);
		run(w, 200);
	}
	why = estimate_of(w, "j-000003", &at);
	if (strstr(why, "when job j-000002 ends (step 200 of 1000 at ") == NULL)
		fail_msg("estimate: %s", why);
	if (llabs(at - (w->wall + 40000)) > 1500)
		fail_msg("start %lld, want about %lld: %s", (long long)at,
		         (long long)(w->wall + 40000), why);
	/* the job behind it starts when it ends, 50 s (its time limit) after its start */
	int64_t at_w = at;
	why = estimate_of(w, "j-000004", &at);
	assert_string_equal(why, "when job j-000003 ends (its time limit, from the start estimated "
	                         "for it)");
	assert_int_equal(at, at_w + 50000);
	world_free(w);
}

/* time_limit_s: a running job is stopped that long after its first placement, failed with a
 * reason that says so, its ranks asked for a checkpoint first (the step they saved named);
 * before it, it runs on. */
static void test_time_limit_ends_a_running_job_after_a_checkpoint(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_limitXXXXXX", spec[1024], ranks[1024];
	assert_non_null(mkdtemp(dir));
	json_decref(heartbeat(w, "node-a", "[]"));
	snprintf(spec, sizeof spec,
	         "{\"name\":\"t\",\"spec\":{\"name\":\"t\",\"time_limit_s\":10,"
	         "\"parallel\":{\"dp\":2},\"checkpoint\":{\"store\":\"dir:%s\"}}}",
	         dir);
	assert_int_equal(apply(w, "job.submit", spec), 201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	json_t *j = job(w, "j-000001");
	int64_t started = json_integer_value(json_object_get(j, "started_ms"));
	assert_true(started > 0);
	json_decref(j);
	/* the ranks' spec leaves it out: the controllers enforce it, older workers refuse it */
	json_t *d = heartbeat(w, "node-a", "[]");
	assert_int_equal(json_array_size(d), 2);
	assert_non_null(json_object_get(json_object_get(json_array_get(d, 0), "spec"), "parallel"));
	assert_null(json_object_get(json_object_get(json_array_get(d, 0), "spec"), "time_limit_s"));
	json_decref(d);
	running_at_step_12(ranks, sizeof ranks, 2);
	for (int k = 0; k < 95; k++) { /* 9.5 s: within the limit */
		json_decref(heartbeat(w, "node-a", ranks));
		assert_int_equal(checkpoint_asked(1), 0);
		run(w, 100);
	}
	assert_string_equal(job_state(w, "j-000001"), "running");
	int64_t asked = 0;
	for (int k = 0; k < 20 && asked == 0; k++) {
		json_decref(heartbeat(w, "node-a", ranks));
		asked = checkpoint_asked(1);
		run(w, 100);
	}
	assert_true(asked > 0);
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_non_null(
	    strstr(events_of(w, "j-000001", "job.waiting"), "its end waits for a checkpoint"));
	write_manifest(dir, 13, 2);
	json_decref(heartbeat(w, "node-a", ranks));
	run(w, 300);
	assert_string_equal(job_state(w, "j-000001"), "failed");
	const char *why = events_of(w, "j-000001", "job.failed");
	if (strstr(why, "time limit reached: time_limit_s 10 from its first placement at 20") ==
	        NULL ||
	    strstr(why, "; checkpoint step 13 saved first") == NULL)
		fail_msg("job.failed: %s", why);
	/* its ranks are stopped: node-a is told to run none */
	d = heartbeat(w, "node-a", ranks);
	assert_int_equal(json_array_size(d), 0);
	json_decref(d);
	world_free_removing(w, dir);
}

/* A job waiting to be placed again (its node died, no other) fails at its time limit, counted
 * from its first placement, not from the restart. */
static void test_time_limit_ends_a_restarting_job(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	assert_int_equal(
	    apply(w, "job.submit", "{\"name\":\"t\",\"spec\":{\"name\":\"t\",\"time_limit_s\":6}}"),
	    201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	run(w, 4500); /* node-a silent: down after 3 s, the job restarting with nowhere to go */
	assert_string_equal(job_state(w, "j-000001"), "restarting");
	run(w, 1000);
	assert_string_equal(job_state(w, "j-000001"), "restarting");
	run(w, 800);
	assert_string_equal(job_state(w, "j-000001"), "failed");
	assert_non_null(strstr(events_of(w, "j-000001", "job.failed"),
	                       "time limit reached: time_limit_s 6 from its first placement"));
	world_free(w);
}

static void test_straggler_replace_moves_and_is_capped(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_replaceXXXXXX", spec[1024], path[256];
	assert_non_null(mkdtemp(dir));
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	snprintf(spec, sizeof spec,
	         "{\"name\":\"t\",\"spec\":{\"name\":\"t\",\"parallel\":{\"dp\":4},"
	         "\"checkpoint\":{\"store\":\"dir:%s\"},"
	         "\"failure\":{\"max_restarts\":0,\"straggler\":{\"policy\":"
	         "\"replace\",\"windows\":3,\"window_steps\":10,"
	         "\"persist_s\":0,\"max_replacements\":1}}}}",
	         dir);
	assert_int_equal(apply(w, "job.submit", spec), 201);
	run(w, 100);
	json_t *j = job(w, "j-000001");
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(json_object_get(j, "layout"), 0), "node")),
	                    "node-a");
	json_decref(j);
	for (int64_t k = 0; k < 3; k++)
		beat_windows(w, "node-a", 0, 1, 0, k, 1, 1.4);
	run(w, 300);
	/* the ranks, at step 30 with no checkpoint yet, are asked for one first: node-a's
	 * answers carry the request until it is complete, and the job keeps running */
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_non_null(
	    strstr(events_of(w, "j-000001", "job.waiting"), "its restart waits for a checkpoint"));
	beat_windows(w, "node-a", 0, 1, 2, 2, 1, 1.4);
	int64_t request = checkpoint_asked(1);
	assert_true(request > 0);
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(checkpoint_asked(1), 0); /* node-b runs none of it */
	for (int i = 0; i < 10; i++) {            /* 5 s, within before_restart_s (30 by default) */
		beat_windows(w, "node-a", 0, 1, 2, 2, 1, 1.4);
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 500);
	}
	assert_string_equal(job_state(w, "j-000001"), "running");
	snprintf(path, sizeof path,
	         "mkdir -p %s/j-000001/step-00000031 && touch "
	         "%s/j-000001/step-00000031/MANIFEST",
	         dir, dir);
	assert_int_equal(system(path), 0);
	beat_windows(w, "node-a", 0, 1, 2, 2, 1, 1.4);
	assert_int_equal(checkpoint_asked(1), request); /* the same request until it is over */
	run(w, 300);
	/* node-a cordoned, the job restarting without counting a failure restart */
	assert_string_equal(job_state(w, "j-000001"), "restarting");
	assert_non_null(
	    strstr(events_of(w, "j-000001", "job.replacing"), "; checkpoint step 31 saved first"));
	beat_windows(w, "node-a", 0, 1, 2, 2, 1, 1.4);
	assert_int_equal(checkpoint_asked(1), 0); /* over: no longer asked */
	struct yard_err err = {0};
	json_t *n = fsm_node_get(&w->fsm, "node-a", &err);
	assert_true(json_is_true(json_object_get(n, "cordoned")));
	json_decref(n);
	assert_non_null(strstr(events_of(w, "j-000001", "job.replacing"),
	                       "straggler rank 1 off node node-a (replacement 1 of 1): "
	                       "straggler: rank 1 on node node-a: compute 14 ms per step, 1.40x"));
	/* once node-a's ranks are gone the gang goes to node-b, restoring a checkpoint */
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 300);
	assert_string_equal(job_state(w, "j-000001"), "running");
	j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
	size_t i;
	json_t *slot;
	json_array_foreach(json_object_get(j, "layout"), i, slot)
	    assert_string_equal(json_string_value(json_object_get(slot, "node")), "node-b");
	json_decref(j);
	json_t *d = heartbeat(w, "node-b", "[]");
	assert_string_equal(env_of(d, 0, "YARD_RESUME"), "1");
	assert_string_equal(env_of(d, 0, "YARD_NODE"), "node-b");
	json_decref(d);
	/* a straggler in generation 2: max_replacements (1) is used up, so it stays */
	for (int64_t k = 5; k < 8; k++)
		beat_windows(w, "node-b", 0, 2, 5, k, 3, 2.0);
	run(w, 300);
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_non_null(strstr(events_of(w, "j-000001", "job.straggler"),
	                       "not replaced: 1 of max_replacements 1 used"));
	n = fsm_node_get(&w->fsm, "node-b", &err);
	assert_false(json_is_true(json_object_get(n, "cordoned")));
	json_decref(n);
	snprintf(path, sizeof path, "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
	world_free(w);
}

static void test_heartbeat_refuses_bad_input(void **state)
{
	struct sched_world *w = world_new();
	struct yard_err err = {0};
	const char *bad[] = {
	    "{\"node\":\"node-b\"}",              /* another node's name */
	    "{\"node\":\"node-a\",\"x\":1}",      /* unknown field */
	    "{\"node\":\"node-a\",\"ranks\":{}}", /* not an array */
	    "{\"node\":\"node-a\",\"ranks\":[{\"job\":\"j\",\"rank\":0}]}", /* no generation */
	    "{\"node\":\"node-a\",\"ranks\":[{\"job\":\"j\",\"rank\":0,\"generation\":1,"
	    "\"state\":\"zombie\"}]}",
	    /* window summaries: not an array, an unknown key, no compute, negative time */
	    "{\"node\":\"node-a\",\"ranks\":[{\"job\":\"j\",\"rank\":0,\"generation\":1,"
	    "\"state\":\"running\",\"windows\":{}}]}",
	    "{\"node\":\"node-a\",\"ranks\":[{\"job\":\"j\",\"rank\":0,\"generation\":1,"
	    "\"state\":\"running\",\"windows\":[{\"index\":0,\"steps\":10,\"compute_ms\":1,"
	    "\"x\":1}]}]}",
	    "{\"node\":\"node-a\",\"ranks\":[{\"job\":\"j\",\"rank\":0,\"generation\":1,"
	    "\"state\":\"running\",\"windows\":[{\"index\":0,\"steps\":10}]}]}",
	    "{\"node\":\"node-a\",\"ranks\":[{\"job\":\"j\",\"rank\":0,\"generation\":1,"
	    "\"state\":\"running\",\"compute_ms\":-1}]}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *b = json_loads(bad[i], 0, NULL);
		memset(&err, 0, sizeof err);
		assert_null(sched_heartbeat(w->sched, "node-a", b, &err));
		assert_true(err.code == YARD_EINVAL || err.code == YARD_EPERM);
		json_decref(b);
	}
	/* the tag of the desired set the agent holds: a string of at most 16 characters, and
	 * whether the agent takes shared parts: a boolean; each named when it is not, and the
	 * text answer (the API's) refuses them the same way */
	const char *bad_input[][2] = {
	    {"{\"node\":\"node-a\",\"desired_tag\":7}", "desired_tag"},
	    {"{\"node\":\"node-a\",\"desired_tag\":\"0123456789abcdef0\"}", "desired_tag"},
	    {"{\"node\":\"node-a\",\"desired_shared\":\"yes\"}", "desired_shared"}};
	for (size_t i = 0; i < sizeof bad_input / sizeof bad_input[0]; i++) {
		json_t *b = json_loads(bad_input[i][0], 0, NULL);
		size_t len = 0;
		memset(&err, 0, sizeof err);
		assert_null(sched_heartbeat_text(w->sched, "node-a", b, &len, &err));
		assert_int_equal(err.code, YARD_EINVAL);
		assert_non_null(strstr(err.msg, bad_input[i][1]));
		json_decref(b);
	}
	world_free(w);
}

/* An embargo ends at its deadline by a command the leader proposes, not a moment before. */
static void test_leader_publishes_advisory_at_its_deadline(void **state)
{
	struct sched_world *w = world_new();
	struct yard_err err = {0};
	assert_int_equal(apply(w, "advisory.create",
	                       "{\"title\":\"t\",\"severity\":\"high\",\"text\":\"x\","
	                       "\"embargo_days\":1}"),
	                 201);
	advance(w, 24LL * 3600 * 1000 - 200);
	sched_tick(w->sched);
	assert_true(fsm_advisory_restricted(&w->fsm, "a-000001"));
	run(w, 300);
	assert_false(fsm_advisory_restricted(&w->fsm, "a-000001"));
	json_t *a = fsm_advisory_get(&w->fsm, "a-000001", &err);
	assert_string_equal(json_string_value(json_object_get(a, "state")), "public");
	assert_string_equal(json_string_value(json_object_get(a, "actor")), "test");
	json_decref(a);
	world_free(w);
}

/* The whole answer to a heartbeat with body (owned by the caller). */
static json_t *heartbeat_answer(struct sched_world *w, const char *node, const char *body)
{
	struct yard_err err = {0};
	json_t *b = json_loads(body, 0, NULL);
	assert_non_null(b);
	json_t *answer = sched_heartbeat(w->sched, node, b, &err);
	json_decref(b);
	if (answer == NULL)
		fail_msg("heartbeat refused: %s", err.msg);
	return answer;
}

/* The interval the answer asks the agent to keep between heartbeats (0: none asked). */
static long long min_interval(struct sched_world *w, const char *node)
{
	char body[128];
	snprintf(body, sizeof body, "{\"node\":\"%s\",\"ranks\":[]}", node);
	json_t *answer = heartbeat_answer(w, node, body);
	const json_t *v = json_object_get(answer, "heartbeat_min_ms");
	long long ms = v != NULL ? (long long)json_integer_value(v) : 0;
	assert_true(v == NULL || json_is_integer(v));
	json_decref(answer);
	return ms;
}

static void set_max_heartbeats(struct sched_world *w, int per_s)
{
	char args[96];
	snprintf(args, sizeof args, "{\"key\":\"max_heartbeats_per_s\",\"value\":%d}", per_s);
	assert_int_equal(apply(w, "config.set", args), 200);
}

/* The leader asks every agent for heartbeats far enough apart that all nodes together stay
 * within the setting max_heartbeats_per_s, and judges silence by that interval (suspect and
 * down after 3 and 6 of it when that is longer than the configured times); after the
 * setting shortens it, it judges by the longer one until every agent has heard. */
static void test_heartbeat_interval_follows_the_cluster_size(void **state)
{
	struct sched_world *w = world_new();
	/* the default, 2,000 a second: two nodes may heartbeat every 100 ms */
	assert_int_equal(min_interval(w, "node-a"), 100);
	set_max_heartbeats(w, 1); /* one heartbeat a second from both: 2 s apart each */
	assert_int_equal(min_interval(w, "node-a"), 2000);
	assert_int_equal(min_interval(w, "node-b"), 2000);
	run(w, 5800); /* 1.5 and 3 s configured, but the agents were asked for 2 s: 6 and 12 */
	assert_string_equal(node_state(w, "node-a"), "up");
	assert_string_equal(node_state(w, "node-b"), "up");
	run(w, 400);
	assert_string_equal(node_state(w, "node-a"), "suspect");
	/* a third node: 3 s apart (2,001 nodes would be 2.1 s at 1,000 a second: rounded up) */
	assert_int_equal(apply(w, "node.register",
	                       "{\"name\":\"node-c\",\"host\":\"10.0.0.3\",\"port_base\":29700,"
	                       "\"devices\":[{\"index\":0,\"kind\":\"cpu\"}],"
	                       "\"token_hash\":\""
	                       "0000000000000000000000000000000000000000"
	                       "000000000000000000000002\"}"),
	                 200);
	assert_int_equal(min_interval(w, "node-a"), 3000);
	assert_int_equal(min_interval(w, "node-b"), 3000);
	assert_int_equal(min_interval(w, "node-c"), 3000);
	run(w, 100);
	assert_string_equal(node_state(w, "node-a"), "up");
	/* no bound: nothing asked, but agents keep 3 s until they hear it; for 2 of those
	 * intervals silence is still judged by 3 s (9 s suspect) */
	set_max_heartbeats(w, 0);
	assert_int_equal(min_interval(w, "node-c"), 0);
	run(w, 5500);
	assert_string_equal(node_state(w, "node-a"), "up");
	assert_string_equal(node_state(w, "node-c"), "up");
	run(w, 600); /* 6.1 s after the change: 1.5 s and 3 s again, node-a silent 6.1 s */
	assert_string_equal(node_state(w, "node-a"), "down");
	json_decref(heartbeat(w, "node-a", "[]"));
	run(w, 100);
	assert_string_equal(node_state(w, "node-a"), "up");
	/* at least 100 ms, at most 60 s whatever the setting */
	set_max_heartbeats(w, 10000000);
	assert_int_equal(min_interval(w, "node-a"), 100);
	world_free(w);
}

static void test_drain_moves_the_job_without_a_restart(void **state)
{
	struct sched_world *w = world_new();
	char ranks[1024];
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit",
	                       "{\"name\":\"d\",\"spec\":{\"name\":\"d\",\"command\":[\"x\"],"
	                       "\"ranks\":4,\"failure\":{\"max_restarts\":0}}}"),
	                 201);
	run(w, 100);
	snprintf(ranks, sizeof ranks, "[");
	for (int r = 0; r < 4; r++)
		snprintf(
		    ranks + strlen(ranks), sizeof ranks - strlen(ranks),
		    "%s{\"job\":\"j-000001\",\"rank\":%d,\"generation\":1,\"state\":\"running\"}",
		    r ? "," : "", r);
	strcat(ranks, "]");
	json_decref(heartbeat(w, "node-a", ranks));
	run(w, 100);
	assert_int_equal(apply(w, "node.drain", "{\"id\":\"node-nope\"}"), 404);
	assert_int_equal(apply(w, "node.drain", "{\"id\":\"node-a\",\"now\":1}"), 400);
	assert_int_equal(apply(w, "node.drained", "{\"id\":\"node-a\"}"), 409); /* not draining */
	assert_int_equal(apply(w, "node.drain", "{\"id\":\"node-a\"}"), 200);
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 100);
	/* restarting, not counted; node-a is told to drain and to run nothing */
	assert_string_equal(job_state(w, "j-000001"), "restarting");
	json_t *j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
	json_decref(j);
	json_t *answer = heartbeat_answer(w, "node-a", "{\"node\":\"node-a\",\"ranks\":[]}");
	assert_int_equal(json_array_size(json_object_get(answer, "desired")), 0);
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(json_object_get(answer, "commands"), 0), "op")),
	                    "drain");
	json_decref(answer);
	/* node-a reported no running rank: the job goes to node-b, node-a is drained */
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 200);
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 200);
	assert_string_equal(job_state(w, "j-000001"), "running");
	j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(json_object_get(j, "layout"), 0), "node")),
	                    "node-b");
	json_decref(j);
	struct yard_err err = {0};
	json_t *n = fsm_node_get(&w->fsm, "node-a", &err);
	assert_string_equal(json_string_value(json_object_get(n, "drain")), "drained");
	assert_true(json_is_true(json_object_get(n, "cordoned")));
	json_decref(n);
	/* uncordon ends it */
	assert_int_equal(apply(w, "node.cordon", "{\"id\":\"node-a\",\"cordoned\":false}"), 200);
	n = fsm_node_get(&w->fsm, "node-a", &err);
	assert_true(json_is_null(json_object_get(n, "drain")));
	assert_false(json_is_true(json_object_get(n, "cordoned")));
	json_decref(n);
	world_free(w);
}

/* A drained node's trainer job is asked for a checkpoint first and restarted once
 * checkpoint.before_restart_s has passed without one; with 0 it restarts at once, and so does a
 * command job that does not set it (its program may not honour requests). */
static void test_drain_waits_for_a_checkpoint_at_most_before_restart_s(void **state)
{
	static const struct {
		const char *kind, *checkpoint;
		int wait_s;
	} cases[] = {
	    {"\"parallel\":{\"dp\":4}", "\"every_steps\":100,\"before_restart_s\":2", 2},
	    {"\"parallel\":{\"dp\":4}", "\"every_steps\":100,\"before_restart_s\":0", 0},
	    {"\"command\":[\"x\"],\"ranks\":4", "\"store\":\"controller\"", 0},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		int wait_s = cases[c].wait_s;
		struct sched_world *w = world_new();
		char spec[512], ranks[1024];
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		snprintf(spec, sizeof spec,
		         "{\"name\":\"d\",\"spec\":{\"name\":\"d\",%s,\"checkpoint\":{%s},"
		         "\"failure\":{\"max_restarts\":0}}}",
		         cases[c].kind, cases[c].checkpoint);
		assert_int_equal(apply(w, "job.submit", spec), 201);
		run(w, 100);
		running_at_step_12(ranks, sizeof ranks, 4);
		json_decref(heartbeat(w, "node-a", ranks));
		run(w, 100);
		assert_int_equal(apply(w, "node.drain", "{\"id\":\"node-a\"}"), 200);
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
		if (wait_s > 0) {
			/* at step 12 with no checkpoint: asked for one, on node-a only */
			assert_string_equal(job_state(w, "j-000001"), "running");
			json_decref(heartbeat(w, "node-a", ranks));
			assert_true(checkpoint_asked(1) > 0);
			for (int i = 0; i < 3; i++) {
				json_decref(heartbeat(w, "node-a", ranks));
				json_decref(heartbeat(w, "node-b", "[]"));
				assert_int_equal(checkpoint_asked(1), 0);
				run(w, 500);
			}
			assert_string_equal(job_state(w, "j-000001"), "running");
			json_decref(heartbeat(w, "node-a", ranks));
			json_decref(heartbeat(w, "node-b", "[]"));
			run(w, 600);
		}
		assert_string_equal(job_state(w, "j-000001"), "restarting");
		const char *said = events_of(w, "j-000001", "job.restarting");
		assert_non_null(strstr(said, "rank 0 on node node-a: node draining"));
		assert_true(
		    (strstr(said, "no checkpoint newer than step -1 within 2 s of asking") !=
		     NULL) == (wait_s > 0));
		json_decref(heartbeat(w, "node-a", ranks));
		assert_int_equal(checkpoint_asked(1), 0);
		world_free(w);
	}
}

/* Heartbeats from both nodes (no ranks) and n passes, 100 ms apart. */
static void idle_passes(struct sched_world *w, int n)
{
	for (int k = 0; k < n; k++) {
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
}

/* A planned restart given up while it waited for its checkpoint (a drain ended by an
 * uncordon) leaves nothing behind: the ranks' answer, completed later, is not taken by a
 * restart decided a minute after it, which asks for a newer checkpoint (a new request) and
 * waits for it instead of going at once from the old one. */
static void test_a_given_up_checkpoint_request_is_not_reused(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_staleXXXXXX", ranks[1024];
	assert_non_null(mkdtemp(dir));
	idle_passes(w, 1);
	submit_dp4_to_dir(w, dir);
	run(w, 100);
	char node[16], other[16];
	first_node(w, "j-000001", node, sizeof node);
	snprintf(other, sizeof other, "%s", strcmp(node, "node-a") == 0 ? "node-b" : "node-a");
	running_at_step_12(ranks, sizeof ranks, 4);
	json_decref(heartbeat(w, node, ranks));
	run(w, 100);
	char drain[64];
	snprintf(drain, sizeof drain, "{\"id\":\"%s\"}", node);
	assert_int_equal(apply(w, "node.drain", drain), 200);
	json_decref(heartbeat(w, other, "[]"));
	run(w, 100);
	json_decref(heartbeat(w, node, ranks));
	int64_t first = checkpoint_asked(1);
	assert_true(first > 0);
	/* uncordoned before the answer: the drain is over, the job stays */
	char uncordon[64];
	snprintf(uncordon, sizeof uncordon, "{\"id\":\"%s\",\"cordoned\":false}", node);
	assert_int_equal(apply(w, "node.cordon", uncordon), 200);
	write_manifest(dir, 13, 4);
	for (int k = 0; k < 600; k++) {
		json_decref(heartbeat(w, node, ranks));
		json_decref(heartbeat(w, other, "[]"));
		run(w, 100);
	}
	assert_string_equal(job_state(w, "j-000001"), "running");
	/* trained on to step 40, drained again: a new request, and the restart waits for it */
	char later[1024];
	snprintf(later, sizeof later, "%s", ranks);
	for (char *p = later; (p = strstr(p, "\"step\":12")) != NULL; p += 9)
		memcpy(p + 7, "40", 2);
	json_decref(heartbeat(w, node, later));
	run(w, 100);
	assert_int_equal(apply(w, "node.drain", drain), 200);
	json_decref(heartbeat(w, other, "[]"));
	run(w, 100);
	json_decref(heartbeat(w, node, later));
	int64_t second = checkpoint_asked(1);
	assert_true(second > first);
	assert_string_equal(job_state(w, "j-000001"), "running");
	write_manifest(dir, 41, 4);
	for (int k = 0; k < 20 && strcmp(job_state(w, "j-000001"), "running") == 0; k++) {
		json_decref(heartbeat(w, node, later));
		json_decref(heartbeat(w, other, "[]"));
		run(w, 100);
	}
	const char *said = events_of(w, "j-000001", "job.restarting");
	if (strstr(said, "node draining; checkpoint step 41 saved first") == NULL)
		fail_msg("job.restarting: %s", said);
	world_free_removing(w, dir);
}

/* A world whose scheduler preempts for jobs that waited preempt_after_ms (0: never) and
 * reserves devices for jobs that waited reserve_after_ms. */
static struct sched_world *world_new_preempt_reserve(uint64_t preempt_after_ms,
                                                     uint64_t reserve_after_ms)
{
	struct sched_world *w = world_new();
	struct sched_config cfg;
	sched_config_defaults(&cfg);
	cfg.preempt_after_ms = preempt_after_ms;
	cfg.reserve_after_ms = reserve_after_ms;
	sched_world_restart(w, &cfg);
	return w;
}

static struct sched_world *world_new_preempt(uint64_t preempt_after_ms)
{
	return world_new_preempt_reserve(preempt_after_ms, 60000);
}

/* A job keeping the free devices for itself (it waited reserve_after_ms and fits the empty
 * cluster) but unable to preempt (the devices it lacks are a job of its own priority's) stops
 * jobs behind it from preempting: the devices they would free would wait for it. Once it is
 * gone, the job behind it preempts. */
static void test_no_preemption_behind_a_job_that_reserves(void **state)
{
	struct sched_world *w = world_new_preempt_reserve(2000, 3000);
	idle_passes(w, 1);
	submit_command(w, 4, 9); /* x */
	submit_command(w, 4, 0); /* v */
	idle_passes(w, 1);
	assert_string_equal(job_state(w, "j-000002"), "running");
	submit_command(w, 8, 9); /* big */
	idle_passes(w, 35);
	submit_command(w, 4, 5); /* p */
	idle_passes(w, 50);
	assert_string_equal(job_state(w, "j-000002"), "running");
	assert_string_equal(events_of(w, "j-000002", "job.restarting"), "");
	assert_string_equal(job_state(w, "j-000004"), "pending");
	assert_int_equal(apply(w, "job.cancel", "{\"id\":\"j-000003\"}"), 200);
	for (int k = 0; k < 30 && strcmp(job_state(w, "j-000004"), "running") != 0; k++)
		idle_passes(w, 1);
	assert_string_equal(job_state(w, "j-000004"), "running");
	assert_non_null(strstr(events_of(w, "j-000002", "job.restarting"),
	                       "preempted by job j-000004 (priority 5, this job's 0)"));
	assert_string_equal(job_state(w, "j-000001"), "running");
	world_free(w);
}

/* Preemption (yardd --preempt-after-s): the cluster's 8 devices run a trainer job of priority
 * 0 (j-000001, at step 12, no checkpoint yet) and a command job of priority 1; a command job
 * of priority 5 waits. After preempt_after_ms (2 s) the lowest-priority job is preempted, and
 * only it: its ranks are asked for a checkpoint, it restarts (not counted) once the checkpoint
 * is complete, and the waiting job takes its devices; the preempted job then waits and does
 * not preempt the job of priority 1 in turn. With preemption off (the default) the job of
 * priority 5 just waits. */
static void test_preemption_stops_the_lowest_priority_job_after_a_checkpoint(void **state)
{
	for (int on = 0; on < 2; on++) {
		struct sched_world *w = world_new_preempt(on ? 2000 : 0);
		char dir[] = "/tmp/test_leader_preemptXXXXXX", ranks[1024];
		assert_non_null(mkdtemp(dir));
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		submit_dp4_to_dir(w, dir);
		submit_command(w, 4, 1); /* mid */
		run(w, 100);
		assert_string_equal(job_state(w, "j-000001"), "running");
		assert_string_equal(job_state(w, "j-000002"), "running");
		char low_node[16];
		first_node(w, "j-000001", low_node, sizeof low_node);
		const char *other = strcmp(low_node, "node-a") == 0 ? "node-b" : "node-a";
		running_at_step_12(ranks, sizeof ranks, 4);
		json_decref(heartbeat(w, low_node, ranks));
		submit_command(w, 4, 5); /* high */
		run(w, 100);
		assert_string_equal(job_state(w, "j-000003"), "pending");
		/* before preempt_after_ms: nothing asked */
		int64_t asked = 0;
		for (int k = 0; k < 15; k++) {
			json_decref(heartbeat(w, low_node, ranks));
			assert_int_equal(checkpoint_asked(1), 0);
			json_decref(heartbeat(w, other, "[]"));
			run(w, 100);
		}
		for (int k = 0; k < 40 && asked == 0; k++) {
			json_decref(heartbeat(w, low_node, ranks));
			asked = checkpoint_asked(1);
			json_decref(heartbeat(w, other, "[]"));
			run(w, 100);
		}
		if (!on) {
			assert_int_equal(asked, 0);
			assert_string_equal(job_state(w, "j-000001"), "running");
			assert_string_equal(job_state(w, "j-000003"), "pending");
			assert_string_equal(events_of(w, "j-000001", "job.restarting"), "");
		} else {
			assert_true(asked > 0);
			/* the checkpoint asked for completes: the preempted job restarts, not
			 * counted */
			assert_string_equal(job_state(w, "j-000001"), "running");
			write_manifest(dir, 13, 4);
			for (int k = 0; k < 30 && strcmp(job_state(w, "j-000003"), "running") != 0;
			     k++) {
				json_decref(heartbeat(w, low_node, "[]"));
				json_decref(heartbeat(w, other, "[]"));
				run(w, 100);
			}
			assert_string_equal(job_state(w, "j-000003"), "running");
			json_t *j = job(w, "j-000003");
			assert_string_equal(
			    json_string_value(json_object_get(
			        json_array_get(json_object_get(j, "layout"), 0), "node")),
			    low_node);
			json_decref(j);
			const char *said = events_of(w, "j-000001", "job.restarting");
			if (strstr(said,
			           "(not counted against max_restarts): preempted by job j-000003 "
			           "(priority 5, this job's 0), which waited ") == NULL ||
			    strstr(said, "; checkpoint step 13 saved first") == NULL)
				fail_msg("job.restarting: %s", said);
			j = job(w, "j-000001");
			assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
			json_decref(j);
			assert_non_null(
			    strstr(events_of(w, "j-000003", "job.waiting"),
			           "preempting job(s) of lower priority for their devices: "
			           "j-000001"));
			/* the preempted job waits; it does not preempt the job of priority 1 */
			for (int k = 0; k < 40; k++) {
				json_decref(heartbeat(w, "node-a", "[]"));
				json_decref(heartbeat(w, "node-b", "[]"));
				run(w, 100);
			}
			assert_string_equal(job_state(w, "j-000001"), "restarting");
			assert_string_equal(job_state(w, "j-000002"), "running");
			assert_string_equal(events_of(w, "j-000002", "job.restarting"), "");
		}
		char cmd[600];
		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		assert_int_equal(system(cmd), 0);
		world_free(w);
	}
}

/* The devices a preemption frees are held for the job it is for: its victims restart one
 * after the other (a command job at once, a trainer once its checkpoint is saved), and the
 * devices of the first must not go meanwhile to a job behind it in the queue (which the job
 * would then preempt in turn, or wait behind). j-000001 (trainer, priority 0) runs on one node,
 * j-000002 (command, priority 0) on the other; j-000003 (8 ranks, priority 5) and j-000004 (4
 * ranks, priority 1) wait. j-000003 preempts both; j-000002 restarts at once, and its node
 * stays free for j-000003 until j-000001's checkpoint is saved and it restarts too; then
 * j-000003 runs on both nodes, and j-000004 still waits. */
static void test_devices_freed_by_a_preemption_are_held_for_its_job(void **state)
{
	struct sched_world *w = world_new_preempt(2000);
	char dir[] = "/tmp/test_leader_holdXXXXXX", ranks[1024];
	assert_non_null(mkdtemp(dir));
	idle_passes(w, 1);
	submit_dp4_to_dir(w, dir);
	submit_command(w, 4, 0);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_string_equal(job_state(w, "j-000002"), "running");
	char trainer_node[16];
	first_node(w, "j-000001", trainer_node, sizeof trainer_node);
	const char *other = strcmp(trainer_node, "node-a") == 0 ? "node-b" : "node-a";
	running_at_step_12(ranks, sizeof ranks, 4);
	submit_command(w, 8, 5);
	submit_command(w, 4, 1);
	int64_t asked = 0;
	for (int k = 0; k < 40 && asked == 0; k++) {
		json_decref(heartbeat(w, trainer_node, ranks));
		asked = checkpoint_asked(1);
		json_decref(heartbeat(w, other, "[]"));
		run(w, 100);
	}
	assert_true(asked > 0);
	/* j-000002 went at once; its node waits for j-000003 while j-000001 saves */
	for (int k = 0; k < 20; k++) {
		json_decref(heartbeat(w, trainer_node, ranks));
		json_decref(heartbeat(w, other, "[]"));
		run(w, 100);
		assert_string_equal(job_state(w, "j-000004"), "pending");
	}
	assert_string_equal(job_state(w, "j-000002"), "restarting");
	assert_string_equal(job_state(w, "j-000001"), "running");
	assert_string_equal(job_state(w, "j-000003"), "pending");
	write_manifest(dir, 13, 4);
	for (int k = 0; k < 30 && strcmp(job_state(w, "j-000003"), "running") != 0; k++) {
		json_decref(heartbeat(w, trainer_node, "[]"));
		json_decref(heartbeat(w, other, "[]"));
		run(w, 100);
	}
	assert_string_equal(job_state(w, "j-000003"), "running");
	assert_string_equal(job_state(w, "j-000004"), "pending");
	/* one preemption, each victim restarted once */
	assert_int_equal(count_lines(events_of(w, "j-000001", "job.restarting")), 1);
	assert_int_equal(count_lines(events_of(w, "j-000002", "job.restarting")), 1);
	assert_string_equal(events_of(w, "j-000004", "job.restarting"), "");
	world_free_removing(w, dir);
}

/* Topology (place.h): a preemption whose victims would leave the gang spread over two
 * switches takes, when that needs no more victims, those of one switch. Nodes a, c on s1,
 * b, d on s2, one 4-rank command job on each (the one on b of priority 1); an 8-rank job of
 * priority 2 would take the two most recent of priority 0 (on d and c: both switches), and
 * takes those on a and c (s2's pair would stop a job of priority 1). */
static void test_preemption_frees_one_switch(void **state)
{
	struct sched_world *w = world_new_preempt(2000);
	static const char *const sw[] = {"{\"switch\":\"s1\"}", "{\"switch\":\"s2\"}"};
	const char *names[] = {"node-a", "node-b", "node-c", "node-d"};
	for (int n = 0; n < 4; n++)
		assert_int_equal(sched_world_add_node_labelled(w, n, sw[n % 2]), 200);
	static const int priority[] = {0, 0, 1, 0};
	static const char *const expect[] = {"node-a", "node-c", "node-b", "node-d"};
	char id[16];
	for (int k = 0; k < 4; k++) {
		for (int n = 0; n < 4; n++)
			json_decref(heartbeat(w, names[n], "[]"));
		snprintf(id, sizeof id, "j-%06d", k + 1);
		submit_placed_on(w, 4, priority[k], id, expect[k]);
	}
	submit_command(w, 8, 2);
	for (int k = 0; k < 60 && strcmp(job_state(w, "j-000005"), "running") != 0; k++) {
		for (int n = 0; n < 4; n++)
			json_decref(heartbeat(w, names[n], "[]"));
		run(w, 100);
	}
	assert_string_equal(job_state(w, "j-000005"), "running");
	json_t *j = job(w, "j-000005");
	size_t i;
	json_t *slot;
	json_array_foreach(json_object_get(j, "layout"), i, slot)
	{
		const char *on = json_string_value(json_object_get(slot, "node"));
		if (strcmp(on, "node-a") != 0 && strcmp(on, "node-c") != 0)
			fail_msg("rank %zu of the 8-rank job on %s, not on switch s1", i, on);
	}
	json_decref(j);
	assert_int_equal(count_lines(events_of(w, "j-000001", "job.restarting")), 1);
	assert_int_equal(count_lines(events_of(w, "j-000002", "job.restarting")), 1);
	assert_string_equal(events_of(w, "j-000003", "job.restarting"), "");
	assert_string_equal(events_of(w, "j-000004", "job.restarting"), "");
	world_free(w);
}

/* POST /v1/jobs/ID/checkpoint (sched_checkpoint_now): a running job's nodes carry the request,
 * with no restart, and the job's overlay shows when a newer checkpoint is complete; a job that
 * is not running, another user's job and an unknown one are refused, naming why. */
static void test_checkpoint_now_asks_a_running_job(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_nowXXXXXX", cmd[300];
	struct yard_err err = {0};
	assert_non_null(mkdtemp(dir));
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	submit_dp4_to_dir(w, dir);
	assert_null(sched_checkpoint_now(w->sched, "j-000001", "test", "user", &err));
	assert_int_equal(err.code, YARD_EBUSY);
	assert_string_equal(err.msg, "job j-000001 is pending: only the ranks of a running job can "
	                             "save a checkpoint");
	run(w, 100);
	const char *ranks = "[{\"job\":\"j-000001\",\"rank\":0,\"generation\":1,\"state\":"
	                    "\"running\",\"step\":12}]";
	json_decref(heartbeat(w, "node-a", ranks));
	run(w, 100);
	memset(&err, 0, sizeof err);
	assert_null(sched_checkpoint_now(w->sched, "j-000001", "mallory", "user", &err));
	assert_int_equal(err.code, YARD_EPERM);
	assert_string_equal(
	    err.msg, "job j-000001 belongs to test; a user may checkpoint only their own jobs");
	memset(&err, 0, sizeof err);
	assert_null(sched_checkpoint_now(w->sched, "j-000404", "test", "admin", &err));
	assert_int_equal(err.code, YARD_ENOTFOUND);
	assert_int_equal(checkpoint_asked(1), 0);
	json_t *answer = sched_checkpoint_now(w->sched, "j-000001", "test", "user", &err);
	assert_non_null(answer);
	int64_t request = json_integer_value(json_object_get(answer, "request"));
	assert_true(request > 0);
	assert_int_equal(json_integer_value(json_object_get(answer, "generation")), 1);
	assert_int_equal(json_integer_value(json_object_get(answer, "step")), 12);
	assert_int_equal(json_integer_value(json_object_get(answer, "newest_step")), -1);
	json_decref(answer);
	json_decref(heartbeat(w, "node-a", ranks));
	assert_int_equal(checkpoint_asked(1), request);
	assert_int_equal(checkpoint_asked_after(1), -1);
	/* the overlay: asked after step -1, none newer yet; then step 13 is complete */
	for (int complete = 0; complete < 2; complete++) {
		json_t *j = job(w, "j-000001");
		sched_overlay_job(w->sched, j);
		const json_t *asked = json_object_get(j, "checkpoint_request");
		assert_non_null(asked);
		assert_int_equal(json_integer_value(json_object_get(asked, "request")), request);
		assert_int_equal(json_integer_value(json_object_get(asked, "after_step")), -1);
		assert_int_equal(json_integer_value(json_object_get(asked, "newest_step")),
		                 complete ? 13 : -1);
		assert_true(json_is_false(json_object_get(asked, "restart_waits")));
		json_decref(j);
		snprintf(cmd, sizeof cmd,
		         "mkdir -p %s/j-000001/step-00000013 && touch "
		         "%s/j-000001/step-00000013/MANIFEST",
		         dir, dir);
		assert_int_equal(system(cmd), 0);
	}
	/* no restart: the same generation runs on */
	for (int i = 0; i < 5; i++) {
		json_decref(heartbeat(w, "node-a", ranks));
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 200);
	}
	assert_string_equal(job_state(w, "j-000001"), "running");
	json_t *j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 1);
	json_decref(j);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	world_free(w);
}

static void test_heartbeat_logs_are_kept_once_and_read(void **state)
{
	struct sched_world *w = world_new();
	struct yard_err err = {0};
	const char *rank0 =
	    "{\"job\":\"j-000001\",\"rank\":0,\"generation\":1,\"state\":\"running\"}";
	char body[1024];
	/* "hello\n" at offset 0, sent twice (a retried heartbeat), and a piece of a rank the
	 * node does not report (dropped) */
	snprintf(body, sizeof body,
	         "{\"node\":\"node-a\",\"ranks\":[%s],\"logs\":[{\"job\":\"j-000001\",\"rank\":0,"
	         "\"generation\":1,\"offset\":0,\"data\":\"aGVsbG8K\"},{\"job\":\"j-000001\","
	         "\"rank\":3,\"generation\":1,\"offset\":0,\"data\":\"aGVsbG8K\"}]}",
	         rank0);
	json_t *answer = heartbeat_answer(w, "node-a", body);
	char leader_id[64];
	snprintf(leader_id, sizeof leader_id, "%s",
	         json_string_value(json_object_get(answer, "leader_id")));
	assert_true(strlen(leader_id) > 0);
	json_decref(answer);
	json_decref(heartbeat_answer(w, "node-a", body));
	json_t *out = sched_job_logs(w->sched, "j-000001", 0, -1, -1, 1000, &err);
	assert_non_null(out);
	assert_string_equal(json_string_value(json_object_get(out, "data")), "hello\n");
	assert_int_equal(json_integer_value(json_object_get(out, "next_offset")), 6);
	assert_int_equal(json_integer_value(json_object_get(out, "generation")), 1);
	assert_string_equal(json_string_value(json_object_get(out, "node")), "node-a");
	json_decref(out);
	assert_null(sched_job_logs(w->sched, "j-000001", 3, -1, -1, 1000, &err));
	assert_int_equal(err.code, YARD_ENOTFOUND);
	out = sched_job_logs(w->sched, "j-000001", -1, -1, -1, 0, &err);
	assert_int_equal(json_array_size(json_object_get(out, "streams")), 1);
	json_decref(out);
	/* malformed pieces: refused whole, nothing stored */
	snprintf(body, sizeof body,
	         "{\"node\":\"node-a\",\"ranks\":[%s],\"logs\":[{\"job\":\"j-000001\",\"rank\":0,"
	         "\"generation\":1,\"offset\":6,\"data\":\"d29ybGQK\"},{\"job\":\"j-000001\","
	         "\"rank\":0,\"generation\":1,\"offset\":12,\"data\":\"!!\"}]}",
	         rank0);
	json_t *b = json_loads(body, 0, NULL);
	memset(&err, 0, sizeof err);
	assert_null(sched_heartbeat(w->sched, "node-a", b, &err));
	assert_int_equal(err.code, YARD_EINVAL);
	assert_non_null(strstr(err.msg, "logs[1].data"));
	json_decref(b);
	out = sched_job_logs(w->sched, "j-000001", 0, -1, -1, 1000, &err);
	assert_int_equal(json_integer_value(json_object_get(out, "end_offset")), 6);
	json_decref(out);
	/* a new leadership starts empty, under another leader_id */
	sched_leader_down(w->sched);
	assert_null(sched_job_logs(w->sched, "j-000001", 0, -1, -1, 1000, &err));
	assert_int_equal(err.code, YARD_ENOTLEADER);
	advance(w, 5);
	sched_leader_up(w->sched);
	assert_null(sched_job_logs(w->sched, "j-000001", 0, -1, -1, 1000, &err));
	answer = heartbeat_answer(w, "node-a", "{\"node\":\"node-a\",\"ranks\":[]}");
	assert_string_not_equal(json_string_value(json_object_get(answer, "leader_id")), leader_id);
	json_decref(answer);
	/* the new leader first hears "world\n" at offset 6: a reader at 0 waits for the resent
	 * tail while the leadership is young, and is told of the gap after node_down_ms */
	snprintf(body, sizeof body,
	         "{\"node\":\"node-a\",\"ranks\":[%s],\"logs\":[{\"job\":\"j-000001\",\"rank\":0,"
	         "\"generation\":1,\"offset\":6,\"data\":\"d29ybGQK\"}]}",
	         rank0);
	json_decref(heartbeat_answer(w, "node-a", body));
	out = sched_job_logs(w->sched, "j-000001", 0, 1, 0, 1000, &err);
	assert_int_equal(json_integer_value(json_object_get(out, "skipped")), 0);
	assert_int_equal(json_integer_value(json_object_get(out, "next_offset")), 0);
	assert_string_equal(json_string_value(json_object_get(out, "data")), "");
	json_decref(out);
	advance(w, 3001);
	out = sched_job_logs(w->sched, "j-000001", 0, 1, 0, 1000, &err);
	assert_int_equal(json_integer_value(json_object_get(out, "skipped")), 6);
	assert_string_equal(json_string_value(json_object_get(out, "data")), "world\n");
	assert_int_equal(json_integer_value(json_object_get(out, "next_offset")), 12);
	json_decref(out);
	world_free(w);
}

#define PERF                                                                                       \
	"{\"flops_per_s\":5e10,\"gemm\":[[8192,2e10],[1.3e8,5e10]],\"block\":{\"mac_s\":1e-10,"    \
	"\"weight_s\":1e-9,"                                                                       \
	"\"hidden_s\":1e-9,\"model_s\":1e-9,\"call_s\":1e-5,\"fit_error\":0.1},"                   \
	"\"optim_s_per_param\":{\"adamw\":5e-9,\"sgd\":1e-9},\"parallel_efficiency\":1,"           \
	"\"intra_bw_bytes_per_s\":5e9,\"intra_latency_s\":2e-6,\"inter_bw_bytes_per_s\":1e9,"      \
	"\"intra_sync_s\":1.5e-5,\"intra_sync_cpu_s\":4e-6,\"intra_busy_sync_cpu_s\":1e-5,"        \
	"\"intra_allreduce_sync_s\":5e-6,\"intra_busy_allreduce_sync_cpu_s\":4e-5,"                \
	"\"inter_latency_s\":2e-5,\"inter_source\":\"configured\",\"device_memory_mb\":4096}"

#define AUTO_SPEC                                                                                  \
	"{\"name\":\"auto\",\"model\":{\"d_in\":32,\"d_model\":256,\"d_ff\":1024,\"layers\":8,"    \
	"\"classes\":10},\"train\":{\"steps\":10,\"batch_size\":64},\"parallel\":\"auto\"}"

/* job.submit args for an auto job of AUTO_SPEC's model training `steps` steps, checkpointing
 * into dir ("dir:" store) with the other checkpoint fields in `checkpoint` ("" or ending in a
 * comma). */
static void auto_job_args(char *out, size_t len, int steps, const char *checkpoint, const char *dir)
{
	snprintf(out, len,
	         "{\"name\":\"auto\",\"spec\":{\"name\":\"auto\",\"model\":{\"d_in\":32,"
	         "\"d_model\":256,\"d_ff\":1024,\"layers\":8,\"classes\":10},\"train\":{"
	         "\"steps\":%d,\"batch_size\":64},\"parallel\":\"auto\",\"checkpoint\":{"
	         "%s\"store\":\"dir:%s\"}}}",
	         steps, checkpoint, dir);
}

/* A heartbeat carrying perf; the answer says the leader needs no more. */
static void heartbeat_perf(struct sched_world *w, const char *node, const char *perf)
{
	char body[2048];
	struct yard_err err = {0};
	snprintf(body, sizeof body, "{\"node\":\"%s\",\"ranks\":[],\"perf\":%s}", node, perf);
	json_t *b = json_loads(body, 0, NULL);
	json_t *answer = sched_heartbeat(w->sched, node, b, &err);
	json_decref(b);
	assert_non_null(answer);
	assert_true(json_is_false(json_object_get(answer, "want_perf")));
	json_decref(answer);
}

/* Whether the answer to a heartbeat without perf asks for it. */
static int wants_perf(struct sched_world *w, const char *node)
{
	char body[256];
	struct yard_err err = {0};
	snprintf(body, sizeof body, "{\"node\":\"%s\",\"ranks\":[]}", node);
	json_t *b = json_loads(body, 0, NULL);
	json_t *answer = sched_heartbeat(w->sched, node, b, &err);
	json_decref(b);
	assert_non_null(answer);
	int want = json_is_true(json_object_get(answer, "want_perf"));
	json_decref(answer);
	return want;
}

/* parallel "auto": waits (saying why) until nodes report measured rates, is then planned,
 * placed in the planned layout, and the plan is committed with the job; its ranks get the
 * planned layout in their spec. */
static void test_auto_job_is_planned_and_recorded(void **state)
{
	struct sched_world *w = world_new();
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit", "{\"name\":\"auto\",\"spec\":" AUTO_SPEC "}"), 201);
	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "pending");
	json_t *j = job(w, "j-000001");
	sched_overlay_job(w->sched, j);
	const char *reason = json_string_value(json_object_get(j, "reason"));
	assert_non_null(reason);
	assert_non_null(strstr(reason, "have not reported measured rates"));
	json_decref(j);

	/* the plan the API shows is the plan the job gets; rates are asked for until known,
	 * and asked for again by a new leader */
	assert_true(wants_perf(w, "node-a"));
	heartbeat_perf(w, "node-a", PERF);
	assert_false(wants_perf(w, "node-a"));
	sched_leader_down(w->sched);
	sched_leader_up(w->sched);
	assert_true(wants_perf(w, "node-a"));
	heartbeat_perf(w, "node-a", PERF);
	heartbeat_perf(w, "node-b", PERF);
	struct yard_err err = {0};
	json_t *spec = json_loads(AUTO_SPEC, 0, NULL);
	json_t *plan = sched_plan(w->sched, spec, 0, &err);
	json_decref(spec);
	assert_non_null(plan);
	json_t *cands = json_object_get(plan, "candidates");
	assert_true(json_array_size(cands) > 1);
	assert_int_equal(json_integer_value(json_object_get(plan, "count")),
	                 json_array_size(cands));
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(plan, "cluster"), "devices")), 8);
	/* the measured exchange costs reach the cost model */
	assert_float_equal(
	    json_real_value(json_object_get(json_object_get(plan, "cluster"), "intra_sync_s")),
	    1.5e-5, 1e-12);
	assert_float_equal(json_real_value(json_object_get(json_object_get(plan, "cluster"),
	                                                   "intra_busy_allreduce_sync_cpu_s")),
	                   4e-5, 1e-12);
	json_t *best = json_object_get(json_array_get(cands, 0), "layout");

	run(w, 100);
	assert_string_equal(job_state(w, "j-000001"), "running");
	j = job(w, "j-000001");
	json_t *layout = json_deep_copy(json_object_get(json_object_get(j, "plan"), "layout"));
	assert_non_null(layout);
	assert_true(json_equal(layout, best));
	json_int_t world = json_integer_value(json_object_get(layout, "dp")) *
	                   json_integer_value(json_object_get(layout, "tp")) *
	                   json_integer_value(json_object_get(layout, "pp"));
	assert_int_equal(json_array_size(json_object_get(j, "layout")), world);
	assert_non_null(
	    json_string_value(json_object_get(json_object_get(j, "plan"), "explanation")));
	json_decref(j);

	/* every desired rank runs the planned layout, not "auto" */
	json_t *da = heartbeat(w, "node-a", "[]"), *db = heartbeat(w, "node-b", "[]");
	assert_int_equal(json_array_size(da) + json_array_size(db), world);
	json_t *rank_spec = json_object_get(json_array_get(da, 0), "spec");
	assert_true(json_equal(json_object_get(rank_spec, "parallel"), layout));
	assert_int_equal(json_integer_value(json_object_get(rank_spec, "ranks")), world);
	/* a restart keeps the committed layout, even when the rates now favour another */
	char slow[2048];
	snprintf(slow, sizeof slow, "%s", PERF);
	char *bw = strstr(slow, "\"intra_bw_bytes_per_s\":5e9");
	memcpy(bw, "\"intra_bw_bytes_per_s\":1e3", strlen("\"intra_bw_bytes_per_s\":1e3"));
	heartbeat_perf(w, "node-a", slow);
	heartbeat_perf(w, "node-b", slow);
	spec = json_loads(AUTO_SPEC, 0, NULL);
	json_t *replan = sched_plan(w->sched, spec, 1, &err);
	json_decref(spec);
	assert_non_null(replan);
	assert_false(json_equal(
	    json_object_get(json_array_get(json_object_get(replan, "candidates"), 0), "layout"),
	    layout));
	json_decref(replan);
	char reports[2][4096];
	json_t *ds[2] = {da, db};
	for (int n = 0; n < 2; n++) {
		size_t at = 0, i;
		json_t *d;
		at += (size_t)snprintf(reports[n] + at, sizeof reports[n] - at, "[");
		json_array_foreach(ds[n], i, d) at += (size_t)snprintf(
		    reports[n] + at, sizeof reports[n] - at,
		    "%s{\"job\":\"j-000001\",\"rank\":%lld,\"generation\":1,\"state\":\"exited\","
		    "\"exit_code\":%d}",
		    i ? "," : "", (long long)json_integer_value(json_object_get(d, "rank")),
		    n == 0 && i == 0 ? 1 : 0);
		snprintf(reports[n] + at, sizeof reports[n] - at, "]");
	}
	json_decref(heartbeat(w, "node-a", reports[0]));
	json_decref(heartbeat(w, "node-b", reports[1]));
	run(w, 100);
	json_decref(heartbeat(w, "node-a", reports[0]));
	json_decref(heartbeat(w, "node-b", reports[1]));
	run(w, 300);
	j = job(w, "j-000001");
	assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	assert_true(json_equal(json_object_get(json_object_get(j, "plan"), "layout"), layout));
	assert_int_equal(json_array_size(json_object_get(j, "layout")), world);
	json_decref(j);
	json_decref(da);
	json_decref(db);
	json_decref(layout);
	json_decref(plan);
	world_free(w);
}

/* A restarting "auto" job whose committed layout no longer fits the cluster (node-b died: 4
 * of 8 devices left) is planned again for what is left, and the new plan is committed with
 * its placement (event job.replanned, naming both layouts and why); while the layout fits, a
 * restart keeps it (test_auto_job_is_planned_and_recorded). When node-b is back and the
 * smaller generation has completed a checkpoint, the leader restarts the job (not counted)
 * and plans it again for the whole cluster. */
static void test_auto_job_is_planned_again_when_the_cluster_shrinks(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_replanXXXXXX", args[1200];
	assert_non_null(mkdtemp(dir));
	auto_job_args(args, sizeof args, 10, "\"every_steps\":20,", dir);
	heartbeat_perf(w, "node-a", PERF);
	heartbeat_perf(w, "node-b", PERF);
	assert_int_equal(apply(w, "job.submit", args), 201);
	run(w, 100);
	json_t *j = job(w, "j-000001");
	assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
	const json_t *l = json_object_get(json_object_get(j, "plan"), "layout");
	json_int_t dp = json_integer_value(json_object_get(l, "dp")),
	           tp = json_integer_value(json_object_get(l, "tp")),
	           pp = json_integer_value(json_object_get(l, "pp"));
	if (dp * tp * pp <= 4)
		fail_msg("the first plan (dp%lld×tp%lld×pp%lld) must span both nodes for this test",
		         (long long)dp, (long long)tp, (long long)pp);
	char was[64];
	snprintf(was, sizeof was, "dp%lld×tp%lld×pp%lld", (long long)dp, (long long)tp,
	         (long long)pp);
	json_decref(j);
	write_manifest(dir, 40, (int)(dp * tp * pp));
	/* node-b falls silent: down, and the job restarts without it */
	for (int i = 0; i < 40; i++) {
		json_decref(heartbeat(w, "node-a", "[]"));
		run(w, 100);
	}
	assert_string_equal(node_state(w, "node-b"), "down");
	j = job(w, "j-000001");
	assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	json_t *now = json_deep_copy(json_object_get(json_object_get(j, "plan"), "layout"));
	l = now;
	json_int_t world = json_integer_value(json_object_get(l, "dp")) *
	                   json_integer_value(json_object_get(l, "tp")) *
	                   json_integer_value(json_object_get(l, "pp"));
	assert_true(world >= 1 && world <= 4);
	assert_int_equal(json_array_size(json_object_get(j, "layout")), world);
	size_t i;
	json_t *slot;
	json_array_foreach(json_object_get(j, "layout"), i, slot)
	    assert_string_equal(json_string_value(json_object_get(slot, "node")), "node-a");
	json_decref(j);
	const char *ev = events_of(w, "j-000001", "job.replanned");
	assert_int_equal(count_lines(ev), 1);
	char want[256];
	snprintf(want, sizeof want,
	         ", was %s: its layout %s has %lld ranks, the cluster has 4 "
	         "schedulable device(s) of its kind",
	         was, was, (long long)(dp * tp * pp));
	if (strstr(ev, want) == NULL)
		fail_msg("job.replanned: want \"%s\" in: %s", want, ev);
	/* the ranks run the new layout */
	json_t *da = heartbeat(w, "node-a", "[]");
	assert_int_equal(json_array_size(da), world);
	const json_t *rank_spec = json_object_get(json_array_get(da, 0), "spec");
	assert_true(json_equal(json_object_get(rank_spec, "parallel"), now));
	json_decref(da);

	/* node-b is back: the job keeps its layout until its generation completes a checkpoint
	 * (a restart now would lose its progress) */
	heartbeat_perf(w, "node-b", PERF);
	for (int k = 0; k < 70; k++) {
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
	assert_string_equal(node_state(w, "node-b"), "up");
	j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	json_decref(j);
	/* its checkpoint of step 60 completes: restarted (not counted), planned again over both
	 * nodes, restoring step 60 */
	write_manifest(dir, 60, (int)world);
	for (int k = 0; k < 60 && json_integer_value(
	                              json_object_get(j = job(w, "j-000001"), "generation")) < 3;
	     k++) {
		json_decref(j);
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 3);
	assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 1);
	assert_int_equal(json_array_size(json_object_get(j, "layout")), dp * tp * pp);
	json_decref(j);
	ev = events_of(w, "j-000001", "job.replanned");
	assert_int_equal(count_lines(ev), 2);
	char grown[128];
	snprintf(grown, sizeof grown,
	         "planned again: %s, was dp%lld×tp%lld×pp%lld: growing back: %s", was,
	         (long long)json_integer_value(json_object_get(now, "dp")),
	         (long long)json_integer_value(json_object_get(now, "tp")),
	         (long long)json_integer_value(json_object_get(now, "pp")), was);
	if (strstr(ev, grown) == NULL)
		fail_msg("job.replanned: want \"%s\" in: %s", grown, ev);
	assert_non_null(strstr(events_of(w, "j-000001", "job.restarting"),
	                       "(not counted against max_restarts): growing back: "));
	assert_non_null(
	    strstr(events_of(w, "j-000001", "job.placed"), "re-placed (generation 3): "));
	assert_non_null(
	    strstr(events_of(w, "j-000001", "job.placed"), "restoring from checkpoint step 60"));
	print_message("%s", events_of(w, "j-000001", "job.replanned"));
	json_decref(now);
	world_free_removing(w, dir);
}

/* An "auto" job placed while node-b had not reported measured rates is planned for node-a's
 * 4 devices (its plan's cluster says so) and keeps that layout while node-b stays unmeasured,
 * checkpoint or not; once node-b is measured, the leader restarts it (not counted) from the
 * checkpoint it completed since its placement and plans it again for both nodes, saying why.
 * (A job waits for a checkpoint since its placement before it grows:
 * test_auto_job_is_planned_again_when_the_cluster_shrinks.) */
static void test_auto_job_grows_when_nodes_are_measured_later(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_growXXXXXX", args[1200];
	assert_non_null(mkdtemp(dir));
	auto_job_args(args, sizeof args, 10, "\"every_steps\":20,", dir);
	heartbeat_perf(w, "node-a", PERF);
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit", args), 201);
	run(w, 100);
	json_t *j = job(w, "j-000001");
	assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
	const json_t *plan = json_object_get(j, "plan");
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(plan, "cluster"), "devices")), 4);
	const json_t *l = json_object_get(plan, "layout");
	json_int_t world = json_integer_value(json_object_get(l, "dp")) *
	                   json_integer_value(json_object_get(l, "tp")) *
	                   json_integer_value(json_object_get(l, "pp"));
	assert_true(world >= 1 && world <= 4);
	char was[64];
	snprintf(was, sizeof was, "dp%lld×tp%lld×pp%lld",
	         (long long)json_integer_value(json_object_get(l, "dp")),
	         (long long)json_integer_value(json_object_get(l, "tp")),
	         (long long)json_integer_value(json_object_get(l, "pp")));
	json_decref(j);
	/* a checkpoint while node-b is still unmeasured: nothing to grow into */
	write_manifest(dir, 20, (int)world);
	for (int k = 0; k < 70; k++) {
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
	assert_int_equal(json_integer_value(json_object_get(j = job(w, "j-000001"), "generation")),
	                 1);
	json_decref(j);
	/* node-b measured: 8 devices for the job */
	heartbeat_perf(w, "node-b", PERF);
	for (int k = 0; k < 70 && json_integer_value(
	                              json_object_get(j = job(w, "j-000001"), "generation")) < 2;
	     k++) {
		json_decref(j);
		json_decref(heartbeat(w, "node-a", "[]"));
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
	assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
	json_int_t grown = (json_int_t)json_array_size(json_object_get(j, "layout"));
	assert_true(grown > world);
	plan = json_object_get(j, "plan");
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(plan, "cluster"), "devices")), 8);
	char now[64];
	l = json_object_get(plan, "layout");
	snprintf(now, sizeof now, "dp%lld×tp%lld×pp%lld",
	         (long long)json_integer_value(json_object_get(l, "dp")),
	         (long long)json_integer_value(json_object_get(l, "tp")),
	         (long long)json_integer_value(json_object_get(l, "pp")));
	json_decref(j);
	const char *ev = events_of(w, "j-000001", "job.replanned");
	assert_int_equal(count_lines(ev), 1);
	char want[256];
	snprintf(want, sizeof want,
	         "planned again: %s, was %s: growing: %s (%lld ranks) is predicted at ", now, was,
	         now, (long long)grown);
	if (strstr(ev, want) == NULL || strstr(ev, "(planned for 4 device(s), 8 now)") == NULL)
		fail_msg("job.replanned: want \"%s\" and the devices in: %s", want, ev);
	assert_non_null(strstr(events_of(w, "j-000001", "job.restarting"),
	                       "(not counted against max_restarts): growing: "));
	assert_non_null(
	    strstr(events_of(w, "j-000001", "job.placed"), "restoring from checkpoint step 20"));
	world_free_removing(w, dir);
}

/* ticks rounds of node-a's heartbeat with ranks, node-b's with none and 100 ms of the
 * scheduler, asserting that no answer asks job j-000001's ranks for a checkpoint. */
static void beats_asking_nothing(struct sched_world *w, const char *ranks, int ticks)
{
	for (int k = 0; k < ticks; k++) {
		json_decref(heartbeat(w, "node-a", ranks));
		assert_int_equal(checkpoint_asked(1), 0);
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
}

/* Like beats_asking_nothing, for seconds with the scheduler's log captured: malloc'd text. */
static char *beats_logged(struct sched_world *w, const char *ranks, int seconds)
{
	char *log = calloc(1, 1);
	assert_non_null(log);
	for (int k = 0; k < seconds; k++) {
		json_decref(heartbeat(w, "node-a", ranks));
		assert_int_equal(checkpoint_asked(1), 0);
		json_decref(heartbeat(w, "node-b", "[]"));
		char *more = run_logged(w, 1000);
		log = realloc(log, strlen(log) + strlen(more) + 1);
		assert_non_null(log);
		strcat(log, more);
		free(more);
	}
	return log;
}

/* Heartbeats (node-a's with ranks) and 100 ms ticks until an answer asks job j-000001's
 * generation 1 for a checkpoint, 7 s at most: the request number, 0 when none came. */
static int64_t beats_until_asked(struct sched_world *w, const char *ranks)
{
	int64_t asked = 0;
	for (int k = 0; k < 70 && asked == 0; k++) {
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
		json_decref(heartbeat(w, "node-a", ranks));
		asked = checkpoint_asked(1);
	}
	return asked;
}

/* Job j-000001's "growth" as the leader's GET /v1/jobs/ID shows it; NULL: none. */
static const char *growth_of(struct sched_world *w)
{
	static char text[512];
	json_t *j = job(w, "j-000001");
	sched_overlay_job(w->sched, j);
	const char *g = json_string_value(json_object_get(j, "growth"));
	if (g != NULL)
		snprintf(text, sizeof text, "%s", g);
	json_decref(j);
	return g != NULL ? text : NULL;
}

/* Submits an "auto" job of 1000 steps without periodic checkpoints, checkpointing into dir,
 * with node-a measured and node-b not: the job runs on node-a; its world size. */
static int auto_job_on_node_a(struct sched_world *w, const char *dir)
{
	char args[1200];
	auto_job_args(args, sizeof args, 1000, "", dir);
	heartbeat_perf(w, "node-a", PERF);
	json_decref(heartbeat(w, "node-b", "[]"));
	assert_int_equal(apply(w, "job.submit", args), 201);
	run(w, 100);
	json_t *j = job(w, "j-000001");
	assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
	int world = (int)json_array_size(json_object_get(j, "layout"));
	assert_true(world >= 1 && world <= 4);
	json_decref(j);
	return world;
}

/* An "auto" job with no periodic checkpoints (every_steps 0) grows too once it has trained:
 * node-b measured, the leader asks its ranks for a checkpoint instead of waiting for one that
 * never comes, and restarts it (not counted) from the step they saved. */
static void test_auto_job_without_periodic_checkpoints_grows_from_one_asked_for(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_grow0XXXXXX", ranks[1024];
	assert_non_null(mkdtemp(dir));
	int world = auto_job_on_node_a(w, dir);
	json_t *j;
	running_at_step_12(ranks, sizeof ranks, world);
	/* trained, node-b unmeasured: nothing asked */
	beats_asking_nothing(w, ranks, 70);
	heartbeat_perf(w, "node-b", PERF);
	int64_t asked = beats_until_asked(w, ranks);
	assert_true(asked > 0);
	assert_string_equal(job_state(w, "j-000001"), "running");
	write_manifest(dir, 13, world);
	for (int k = 0; k < 30 && json_integer_value(
	                              json_object_get(j = job(w, "j-000001"), "generation")) < 2;
	     k++) {
		json_decref(j);
		json_decref(heartbeat(w, "node-a", "[]")); /* the ranks stopped for the restart */
		json_decref(heartbeat(w, "node-b", "[]"));
		run(w, 100);
	}
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
	assert_true((int)json_array_size(json_object_get(j, "layout")) > world);
	json_decref(j);
	const char *said = events_of(w, "j-000001", "job.restarting");
	if (strstr(said, "(not counted against max_restarts): growing: ") == NULL ||
	    strstr(said, "; checkpoint step 13 saved first") == NULL)
		fail_msg("job.restarting: %s", said);
	assert_non_null(
	    strstr(events_of(w, "j-000001", "job.placed"), "restoring from checkpoint step 13"));
	world_free_removing(w, dir);
}

/* --max-active-jobs counts the submissions admitted and still in flight (proposed, not yet
 * applied) across the passes that run meanwhile: a pass counts the jobs it knows, and these
 * are not among them yet. */
static void test_admission_counts_submissions_in_flight_across_passes(void **state)
{
	struct sched_world *w = world_new();
	struct sched_config cfg;
	sched_config_defaults(&cfg);
	cfg.max_active_jobs = 3;
	sched_world_restart(w, &cfg);
	json_decref(heartbeat(w, "node-a", "[]"));
	/* one job applied: the passes count it */
	submit_command(w, 16, 0);
	run(w, 100);
	json_t *specj = json_loads("{\"name\":\"one\",\"command\":[\"x\"],\"ranks\":1}", 0, NULL);
	struct jobspec spec;
	struct yard_err err = {0};
	assert_int_equal(jobspec_parse(specj, &spec, &err), 0);
	char why[320];
	uint64_t tokens[2];
	for (int i = 0; i < 2; i++) { /* admitted and proposed, then a pass */
		assert_int_equal(sched_admit(w->sched, why, sizeof why), 0);
		json_decref(sched_submit_begin(w->sched, &spec, &tokens[i]));
		assert_true(tokens[i] != 0);
		run(w, 100);
	}
	assert_int_equal(sched_admit(w->sched, why, sizeof why), -1);
	assert_non_null(strstr(why, "--max-active-jobs 3"));
	/* both proposals failed: room again */
	for (int i = 0; i < 2; i++)
		sched_submit_done(w->sched, tokens[i], YARD_ENOTLEADER, NULL);
	run(w, 1100); /* a pass (at least one a second) */
	assert_int_equal(sched_admit(w->sched, why, sizeof why), 0);
	jobspec_free(&spec);
	json_decref(specj);
	world_free(w);
}

/* An auto job that could have more devices but does not grow yet says why in the log, once per
 * reason: while its ranks have reported no step (a restart would lose nothing it could keep,
 * but nothing would be gained either), then while another job waits for devices; once that
 * job is cancelled, it grows. */
static void test_auto_job_says_why_it_does_not_grow_yet(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_grow1XXXXXX", ranks[1024];
	assert_non_null(mkdtemp(dir));
	int world = auto_job_on_node_a(w, dir);
	/* node-b measured, no step reported: held, said once over 12 s (two looks or more) */
	heartbeat_perf(w, "node-b", PERF);
	char *log = beats_logged(w, "[]", 12);
	const char *held = "job j-000001 could have more devices but does not grow yet: ";
	if (count_lines_with(log, held) != 1 ||
	    strstr(log, "grow yet: its ranks have reported no step yet") == NULL)
		fail_msg("held without a step: %s", log);
	free(log);
	/* GET /v1/jobs/ID on the leader says so too */
	assert_string_equal(growth_of(w), "does not grow yet: its ranks have reported no step yet");
	/* a job waits for devices (16 ranks on 8 devices), the ranks train: held for it */
	submit_command(w, 16, 0);
	running_at_step_12(ranks, sizeof ranks, world);
	log = beats_logged(w, ranks, 12);
	assert_string_equal(job_state(w, "j-000002"), "pending");
	if (count_lines_with(log, held) != 1 ||
	    strstr(log, "grow yet: a job waits for devices, or is being given some") == NULL)
		fail_msg("held for a waiting job: %s", log);
	free(log);
	assert_string_equal(growth_of(w),
	                    "does not grow yet: a job waits for devices, or is being given some");
	/* the waiting job cancelled: the ranks are asked for the checkpoint of the restart */
	assert_int_equal(apply(w, "job.cancel", "{\"id\":\"j-000002\"}"), 200);
	assert_true(beats_until_asked(w, ranks) > 0);
	/* growing: nothing held (checkpoint_request says what it waits for) */
	assert_null(growth_of(w));
	world_free_removing(w, dir);
}

/* An auto job whose larger plan is not predicted fast enough (--auto-grow-pct) stays, and
 * says so: GET /v1/jobs/ID "growth" names both plans; its ranks are asked for nothing. The log
 * says it once per best plan, and again in the next generation (a restart after a failure),
 * where an operator reading the log from the restart looks for it. */
static void test_auto_job_says_why_it_stays(void **state)
{
	struct sched_world *w = world_new();
	struct sched_config cfg;
	sched_config_defaults(&cfg);
	cfg.auto_grow_pct = 1; /* only a plan 100 times faster would do */
	sched_world_restart(w, &cfg);
	char dir[] = "/tmp/test_leader_grow2XXXXXX", ranks[1024];
	assert_non_null(mkdtemp(dir));
	int world = auto_job_on_node_a(w, dir);
	heartbeat_perf(w, "node-b", PERF);
	running_at_step_12(ranks, sizeof ranks, world);
	beats_asking_nothing(w, ranks, 70);
	json_t *j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 1);
	json_decref(j);
	const char *growth = growth_of(w);
	if (growth == NULL || strncmp(growth, "stays dp", 8) != 0 ||
	    strstr(growth, "the best plan for the cluster now, dp") == NULL ||
	    strstr(growth, "(grows at 1 % or less, --auto-grow-pct)") == NULL)
		fail_msg("growth: %s", growth ? growth : "(none)");
	const char *stays = "scheduler: job j-000001 stays dp";
	char *log = beats_logged(w, ranks, 12);
	if (count_lines_with(log, stays) != 0)
		fail_msg("said again in the same generation: %s", log);
	free(log);
	/* rank 0 fails: restarted (counted) in generation 2 with the same plan */
	char failed[1024];
	snprintf(failed, sizeof failed,
	         "[{\"job\":\"j-000001\",\"rank\":0,\"generation\":1,\"state\":\"exited\","
	         "\"exit_code\":1}]");
	json_decref(heartbeat(w, "node-a", failed));
	run(w, 100);
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	run(w, 300);
	json_decref(heartbeat(w, "node-a", "[]"));
	run(w, 300);
	j = job(w, "j-000001");
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 2);
	assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
	int world2 = (int)json_array_size(json_object_get(j, "layout"));
	json_decref(j);
	assert_null(growth_of(w)); /* generation 1's reason is not generation 2's */
	running_in_generation(ranks, sizeof ranks, world2, 2);
	log = beats_logged(w, ranks, 12);
	if (count_lines_with(log, stays) != 1)
		fail_msg("generation 2 does not say once why it stays: %s", log);
	free(log);
	world_free_removing(w, dir);
}

/* PERF measured with other work on the node's cores: every rate 100 times slower */
#define PERF_BUSY                                                                                  \
	"{\"flops_per_s\":5e8,\"gemm\":[[8192,2e8],[1.3e8,5e8]],\"block\":{\"mac_s\":1e-8,"        \
	"\"weight_s\":1e-7,"                                                                       \
	"\"hidden_s\":1e-7,\"model_s\":1e-7,\"call_s\":1e-3,\"fit_error\":0.1},"                   \
	"\"optim_s_per_param\":{\"adamw\":5e-7,\"sgd\":1e-7},\"parallel_efficiency\":1,"           \
	"\"intra_bw_bytes_per_s\":5e7,\"intra_latency_s\":2e-4,\"inter_bw_bytes_per_s\":1e9,"      \
	"\"intra_sync_s\":1.5e-3,\"intra_sync_cpu_s\":4e-4,\"intra_busy_sync_cpu_s\":1e-3,"        \
	"\"intra_allreduce_sync_s\":5e-4,\"intra_busy_allreduce_sync_cpu_s\":4e-3,"                \
	"\"inter_latency_s\":2e-5,\"inter_source\":\"configured\",\"device_memory_mb\":4096}"

/* An auto job that stays because node-b was measured slow (busy when it probed) looks again
 * as soon as node-b's rates change, not a minute later: measured again at full speed, the
 * leader asks the job's ranks for the checkpoint of its restart to grow within seconds. */
static void test_auto_job_looks_again_when_rates_change(void **state)
{
	struct sched_world *w = world_new();
	char dir[] = "/tmp/test_leader_grow3XXXXXX", ranks[1024];
	assert_non_null(mkdtemp(dir));
	int world = auto_job_on_node_a(w, dir);
	heartbeat_perf(w, "node-b", PERF_BUSY);
	running_at_step_12(ranks, sizeof ranks, world);
	beats_asking_nothing(w, ranks, 120);
	const char *growth = growth_of(w);
	if (growth == NULL || strncmp(growth, "stays dp", 8) != 0)
		fail_msg("growth with node-b measured slow: %s", growth ? growth : "(none)");
	heartbeat_perf(w, "node-b", PERF);
	assert_true(beats_until_asked(w, ranks) > 0);
	world_free_removing(w, dir);
}

/* Every plan is costed at the slowest node's rates: with node-b measured 100× slow, the plan
 * names node-b, the best plan without it and what to do; an auto job records that; measured
 * again at full speed, nothing is named. */
static void test_plan_names_a_slow_node(void **state)
{
	struct sched_world *w = world_new();
	struct yard_err err = {0};
	json_decref(heartbeat(w, "node-a", "[]"));
	json_decref(heartbeat(w, "node-b", "[]"));
	heartbeat_perf(w, "node-a", PERF);
	heartbeat_perf(w, "node-b", PERF_BUSY);
	json_t *spec = json_loads(AUTO_SPEC, 0, NULL);
	json_t *plan = sched_plan(w->sched, spec, 0, &err);
	assert_non_null(plan);
	json_t *slow = json_object_get(plan, "slow_nodes");
	if (slow == NULL)
		fail_msg("no slow_nodes with node-b 100x slow: %s", json_dumps(plan, 0));
	assert_int_equal(json_array_size(json_object_get(slow, "nodes")), 1);
	assert_string_equal(json_string_value(json_array_get(json_object_get(slow, "nodes"), 0)),
	                    "node-b");
	assert_int_equal(json_integer_value(json_object_get(slow, "count")), 1);
	assert_float_equal(json_real_value(json_object_get(slow, "slowest_ratio")), 0.01, 1e-9);
	double with = json_real_value(
	    json_object_get(json_array_get(json_object_get(plan, "candidates"), 0), "step_ms"));
	json_t *without = json_object_get(slow, "without");
	assert_true(json_real_value(json_object_get(without, "step_ms")) < 0.9 * with);
	/* node-a's 4 devices alone */
	assert_true(json_integer_value(json_object_get(without, "world")) <= 4);
	const char *why = json_string_value(json_object_get(plan, "explanation"));
	if (strstr(why, "and node-b measured at 0.01× the fastest node's FLOP rate: without it") ==
	        NULL ||
	    strstr(why, "cordon it (yardctl node cordon)") == NULL ||
	    strstr(why, "if it was busy when it measured, measure it again (yardctl node probe)") ==
	        NULL)
		fail_msg("explanation: %s", why);
	json_decref(plan);

	/* a submitted auto job records it with its plan */
	assert_int_equal(apply(w, "job.submit", "{\"name\":\"auto\",\"spec\":" AUTO_SPEC "}"), 201);
	run(w, 100);
	json_t *j = job(w, "j-000001");
	json_t *recorded = json_object_get(json_object_get(j, "plan"), "slow_nodes");
	assert_non_null(recorded);
	assert_string_equal(
	    json_string_value(json_array_get(json_object_get(recorded, "nodes"), 0)), "node-b");
	assert_non_null(
	    strstr(json_string_value(json_object_get(json_object_get(j, "plan"), "explanation")),
	           "yardctl node probe"));
	json_decref(j);

	/* measured again at full speed: no slow node */
	heartbeat_perf(w, "node-b", PERF);
	plan = sched_plan(w->sched, spec, 0, &err);
	assert_non_null(plan);
	assert_null(json_object_get(plan, "slow_nodes"));
	assert_null(strstr(json_string_value(json_object_get(plan, "explanation")), "slowest"));
	json_decref(plan);
	json_decref(spec);
	world_free(w);
}

static void test_plan_refuses_bad_specs_and_perf(void **state)
{
	struct sched_world *w = world_new();
	struct yard_err err = {0};
	json_t *spec = json_loads("{\"name\":\"x\",\"command\":[\"true\"],\"ranks\":2}", 0, NULL);
	assert_null(sched_plan(w->sched, spec, 0, &err));
	assert_int_equal(err.code, YARD_EINVAL);
	assert_non_null(strstr(err.msg, "command"));
	json_decref(spec);
	/* nothing measured yet: says so */
	spec = json_loads(AUTO_SPEC, 0, NULL);
	memset(&err, 0, sizeof err);
	assert_null(sched_plan(w->sched, spec, 0, &err));
	assert_int_equal(err.code, YARD_ENOSPACE);
	assert_non_null(strstr(err.msg, "measured rates"));
	json_decref(spec);
	const char *bad[] = {
	    "{\"node\":\"node-a\",\"perf\":[]}",
	    "{\"node\":\"node-a\",\"perf\":{\"flops_per_s\":-1,\"intra_bw_bytes_per_s\":1,"
	    "\"inter_bw_bytes_per_s\":1}}",
	    "{\"node\":\"node-a\",\"perf\":{\"flops_per_s\":1,\"intra_bw_bytes_per_s\":1,"
	    "\"inter_bw_bytes_per_s\":1,\"gemm\":[[10,1],[5,1]]}}",
	    "{\"node\":\"node-a\",\"perf\":{\"flops_per_s\":1,\"intra_bw_bytes_per_s\":1,"
	    "\"inter_bw_bytes_per_s\":1,\"block\":{\"mac_s\":\"fast\"}}}",
	    /* the link: where it comes from, a measured one's peer and latency, the probe port */
	    "{\"node\":\"node-a\",\"perf\":{\"flops_per_s\":1,\"intra_bw_bytes_per_s\":1,"
	    "\"inter_bw_bytes_per_s\":1,\"inter_source\":\"guessed\"}}",
	    "{\"node\":\"node-a\",\"perf\":{\"flops_per_s\":1,\"intra_bw_bytes_per_s\":1,"
	    "\"inter_bw_bytes_per_s\":1,\"inter_latency_s\":1e-5,\"inter_source\":\"measured:\"}}",
	    "{\"node\":\"node-a\",\"perf\":{\"flops_per_s\":1,\"intra_bw_bytes_per_s\":1,"
	    "\"inter_bw_bytes_per_s\":1,\"inter_latency_s\":1e-5,"
	    "\"inter_source\":\"measured:node b\"}}",
	    "{\"node\":\"node-a\",\"perf\":{\"flops_per_s\":1,\"intra_bw_bytes_per_s\":1,"
	    "\"inter_bw_bytes_per_s\":1,\"inter_source\":\"measured:node-b\"}}",
	    "{\"node\":\"node-a\",\"perf\":{\"flops_per_s\":1,\"intra_bw_bytes_per_s\":1,"
	    "\"inter_bw_bytes_per_s\":0,\"inter_latency_s\":1e-5,"
	    "\"inter_source\":\"measured:node-b\"}}",
	    "{\"node\":\"node-a\",\"perf\":{\"flops_per_s\":1,\"intra_bw_bytes_per_s\":1,"
	    "\"inter_bw_bytes_per_s\":1,\"intra_busy_sync_cpu_s\":-1e-4}}",
	    "{\"node\":\"node-a\",\"probe_port\":0}",
	    "{\"node\":\"node-a\",\"probe_port\":65536}",
	    "{\"node\":\"node-a\",\"probe_port\":\"29499\"}",
	};
	const char *field[] = {"perf",
	                       "perf.flops_per_s",
	                       "perf.gemm[1]",
	                       "perf.block",
	                       "perf.inter_source",
	                       "perf.inter_source",
	                       "perf.inter_source",
	                       "perf.inter_latency_s",
	                       "perf.inter_bw_bytes_per_s",
	                       "perf.intra_busy_sync_cpu_s",
	                       "probe_port",
	                       "probe_port",
	                       "probe_port"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *b = json_loads(bad[i], 0, NULL);
		memset(&err, 0, sizeof err);
		assert_null(sched_heartbeat(w->sched, "node-a", b, &err));
		assert_int_equal(err.code, YARD_EINVAL);
		if (strstr(err.msg, field[i]) == NULL)
			fail_msg("perf %zu: error '%s' does not name %s", i, err.msg, field[i]);
		json_decref(b);
	}
	world_free(w);
}

#define PERF_LOOPBACK                                                                              \
	"{\"flops_per_s\":5e10,\"intra_bw_bytes_per_s\":5e9,\"inter_bw_bytes_per_s\":2e9,"         \
	"\"inter_latency_s\":1e-5,\"inter_source\":\"tcp-loopback\"}"
#define PERF_MEASURED(peer)                                                                        \
	"{\"flops_per_s\":5e10,\"intra_bw_bytes_per_s\":5e9,\"inter_bw_bytes_per_s\":1e9,"         \
	"\"inter_latency_s\":3e-5,\"inter_source\":\"measured:" peer "\"}"

/* A heartbeat of node with its probe port and perf (NULL: none): the link probe the answer
 * asks for as "PEER HOST:PORT", or "" when it asks for none. */
static const char *beat_probe(struct sched_world *w, const char *node, int probe_port,
                              const char *perf)
{
	static char asked[128];
	char body[1024];
	snprintf(body, sizeof body, "{\"node\":\"%s\",\"ranks\":[],\"probe_port\":%d%s%s}", node,
	         probe_port, perf ? ",\"perf\":" : "", perf ? perf : "");
	json_t *answer = heartbeat_answer(w, node, body);
	const json_t *probe = json_object_get(answer, "link_probe");
	asked[0] = '\0';
	if (probe != NULL)
		snprintf(asked, sizeof asked, "%s %s:%lld",
		         json_string_value(json_object_get(probe, "node")),
		         json_string_value(json_object_get(probe, "host")),
		         (long long)json_integer_value(json_object_get(probe, "port")));
	json_decref(answer);
	return asked;
}

/* Link probes: a node whose perf has no peer measurement is asked to measure its link to the
 * next node by id that is up and listening; a node takes part in one probe at a time (as the
 * one measuring or the one measured); a probe that never reports is asked again after 20 s;
 * a measured or configured link is never probed. */
static void test_link_probes_are_assigned_one_at_a_time(void **state)
{
	struct sched_world *w = world_new();
	assert_int_equal(
	    apply(w, "node.register",
	          "{\"name\":\"node-c\",\"host\":\"10.0.0.3\",\"port_base\":29700,"
	          "\"devices\":[{\"index\":0,\"kind\":\"cpu\"}],\"token_hash\":\""
	          "0000000000000000000000000000000000000000000000000000000000000002\"}"),
	    200);
	/* heard, but no perf yet: nothing to measure */
	assert_string_equal(beat_probe(w, "node-a", 29499, NULL), "");
	assert_string_equal(beat_probe(w, "node-b", 29599, NULL), "");
	assert_string_equal(beat_probe(w, "node-c", 29699, NULL), "");
	run(w, 100);
	/* node-a (tcp loopback only) measures against the next node by id */
	assert_string_equal(beat_probe(w, "node-a", 29499, PERF_LOOPBACK), "node-b 10.0.0.2:29599");
	assert_string_equal(beat_probe(w, "node-a", 29499, NULL), ""); /* asked once */
	/* node-b is being measured and node-a measures: node-c waits, and so does node-b */
	assert_string_equal(beat_probe(w, "node-c", 29699, PERF_LOOPBACK), "");
	assert_string_equal(beat_probe(w, "node-b", 29599, PERF_LOOPBACK), "");
	/* node-a reports its measured link: node-b measures against node-c, node-c still waits
	 * (it is the one measured) */
	assert_string_equal(beat_probe(w, "node-a", 29499, PERF_MEASURED("node-b")), "");
	assert_string_equal(beat_probe(w, "node-b", 29599, NULL), "node-c 10.0.0.3:29699");
	assert_string_equal(beat_probe(w, "node-c", 29699, NULL), "");
	/* node-b's probe never reports: asked again 20 s later, not before; node-c keeps waiting
	 * all along; node-a, measured, is never asked again */
	int asked_b = 0;
	for (int t = 100; t <= 20000; t += 100) {
		advance(w, 100);
		sched_tick(w->sched);
		assert_string_equal(beat_probe(w, "node-a", 29499, NULL), "");
		const char *b = beat_probe(w, "node-b", 29599, NULL);
		if (t < 20000)
			assert_string_equal(b, "");
		else if (strcmp(b, "node-c 10.0.0.3:29699") == 0)
			asked_b++;
		assert_string_equal(beat_probe(w, "node-c", 29699, NULL), "");
	}
	assert_int_equal(asked_b, 1);
	/* node-b reports; then node-c measures against the first node by id (wrapping) */
	assert_string_equal(beat_probe(w, "node-b", 29599, PERF_MEASURED("node-c")), "");
	assert_string_equal(beat_probe(w, "node-c", 29699, NULL), "node-a 10.0.0.1:29499");
	assert_string_equal(beat_probe(w, "node-c", 29699, PERF_MEASURED("node-a")), "");
	/* a configured link is never probed, even with nothing else going on */
	assert_string_equal(beat_probe(w, "node-a", 29499, PERF), "");
	world_free(w);
}

/* Only a peer that is up and names a probe port (an older agent names none) is measured. */
static void test_link_probe_needs_a_listening_up_peer(void **state)
{
	struct sched_world *w = world_new();
	assert_string_equal(beat_probe(w, "node-a", 29499, NULL), "");
	json_decref(heartbeat(w, "node-b", "[]")); /* no probe port */
	run(w, 100);
	assert_string_equal(beat_probe(w, "node-a", 29499, PERF_LOOPBACK), "");
	/* node-b falls silent: suspect, then down */
	for (int t = 0; t < 4000; t += 100) {
		advance(w, 100);
		sched_tick(w->sched);
		assert_string_equal(beat_probe(w, "node-a", 29499, NULL), "");
	}
	assert_string_equal(node_state(w, "node-b"), "down");
	/* it comes back listening: not a peer while still down, then measured once up */
	assert_string_equal(beat_probe(w, "node-b", 29599, NULL), "");
	assert_string_equal(beat_probe(w, "node-a", 29499, NULL), "");
	run(w, 200); /* one tick commits "up", the next one reads it */
	assert_string_equal(node_state(w, "node-b"), "up");
	assert_string_equal(beat_probe(w, "node-a", 29499, NULL), "node-b 10.0.0.2:29599");
	world_free(w);
}

/* A heartbeat of node with its worker version, optionally a worker_upgrade report, and one
 * running rank started on worker w-1. Returns the answer (owned by the caller). */
static json_t *worker_heartbeat(struct sched_world *w, const char *node, const char *worker,
                                const char *report)
{
	char body[1024];
	snprintf(body, sizeof body,
	         "{\"node\":\"%s\",\"version\":\"1.0\",\"worker_version\":\"%s\"%s%s,"
	         "\"ranks\":[{\"job\":\"j-000009\",\"rank\":0,\"generation\":1,\"pid\":77,"
	         "\"state\":\"running\",\"worker_version\":\"w-1\"}]}",
	         node, worker, report ? ",\"worker_upgrade\":" : "", report ? report : "");
	return heartbeat_answer(w, node, body);
}

static json_t *rollout_now(struct sched_world *w)
{
	struct yard_err err = {0};
	json_t *ro = fsm_rollout_get(&w->fsm, "ro-000001", &err);
	assert_non_null(ro);
	return ro;
}

static const char *ro_node(json_t *ro, const char *node, const char *key)
{
	return json_string_value(
	    json_object_get(json_object_get(json_object_get(ro, "nodes"), node), key));
}

static void test_worker_rollout_follows_worker_versions(void **state)
{
	struct sched_world *w = world_new();
	struct yard_err err = {0};
	assert_int_equal(sqlite3_exec(w->fsm.db,
	                              "INSERT INTO builds(version, component, sha256, size, state,"
	                              " created_ms, updated_ms, actor) VALUES('w-2', 'worker',"
	                              " 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	                              "aaaaaaaa', 1234, 'ready', 1, 1, 'admin')",
	                              NULL, NULL, NULL),
	                 SQLITE_OK);
	json_decref(worker_heartbeat(w, "node-a", "w-1", NULL));
	json_decref(worker_heartbeat(w, "node-b", "w-1", NULL));
	/* the leader shows the node's worker and each rank's */
	json_t *n = fsm_node_get(&w->fsm, "node-a", &err);
	sched_overlay_node(w->sched, n);
	assert_string_equal(json_string_value(json_object_get(n, "worker_version")), "w-1");
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(json_object_get(n, "ranks"), 0), "worker_version")),
	                    "w-1");
	json_decref(n);
	/* a malformed report is refused, naming it */
	json_t *b = json_loads("{\"node\":\"node-a\",\"worker_upgrade\":{\"version\":\"w-2\","
	                       "\"rollout\":\"ro-1\",\"state\":\"sleeping\"}}",
	                       0, NULL);
	assert_null(sched_heartbeat(w->sched, "node-a", b, &err));
	assert_non_null(strstr(err.msg, "worker_upgrade.state"));
	json_decref(b);

	assert_int_equal(
	    apply(w, "rollout.start", "{\"build\":\"w-2\",\"waves\":[\"1\",\"100%\"]}"), 201);
	run(w, 300); /* pending -> cordon -> upgrade */
	json_t *ro = rollout_now(w);
	assert_string_equal(json_string_value(json_object_get(ro, "phase")), "upgrade");
	assert_string_equal(ro_node(ro, "node-a", "state"), "upgrading");
	assert_string_equal(ro_node(ro, "node-a", "from_version"), "w-1"); /* its worker's */
	json_decref(ro);
	/* the offer comes under worker_upgrade, never as an agent upgrade */
	json_t *answer = worker_heartbeat(w, "node-a", "w-1", NULL);
	json_t *offer = json_object_get(answer, "worker_upgrade");
	assert_non_null(offer);
	assert_null(json_object_get(answer, "upgrade"));
	assert_string_equal(json_string_value(json_object_get(offer, "url")),
	                    "/v1/builds/w-2/binary");
	json_decref(answer);
	/* an agent reporting its agent upgrade "done" on w-2 does not pass a worker gate */
	json_decref(heartbeat_answer(
	    w, "node-a",
	    "{\"node\":\"node-a\",\"version\":\"w-2\",\"worker_version\":\"w-1\",\"upgrade\":"
	    "{\"version\":\"w-2\",\"rollout\":\"ro-000001\",\"state\":\"done\"}}"));
	run(w, 200);
	ro = rollout_now(w);
	assert_string_equal(ro_node(ro, "node-a", "state"), "upgrading");
	json_decref(ro);
	json_decref(worker_heartbeat(w, "node-a", "w-2",
	                             "{\"version\":\"w-2\",\"rollout\":\"ro-000001\","
	                             "\"state\":\"done\",\"previous_version\":\"w-1\"}"));
	run(w, 200);
	ro = rollout_now(w);
	assert_string_equal(ro_node(ro, "node-a", "state"), "upgraded");
	json_decref(ro);
	/* the agent's version is not touched by a worker build */
	n = fsm_node_get(&w->fsm, "node-a", &err);
	assert_string_equal(json_string_value(json_object_get(n, "version")), "");
	json_decref(n);
	/* wave 2: node-b fails its install; the wave rolls back; node-a stays on w-2 */
	for (int i = 0; i < 20; i++) {
		json_decref(worker_heartbeat(w, "node-a", "w-2", NULL));
		json_decref(worker_heartbeat(w, "node-b", "w-1", NULL));
		run(w, 100);
	}
	ro = rollout_now(w);
	assert_int_equal(json_integer_value(json_object_get(ro, "wave")), 1);
	assert_string_equal(ro_node(ro, "node-b", "state"), "upgrading");
	json_decref(ro);
	json_decref(worker_heartbeat(w, "node-b", "w-1",
	                             "{\"version\":\"w-2\",\"rollout\":\"ro-000001\","
	                             "\"state\":\"failed\",\"error\":\"self-test failed\"}"));
	run(w, 500); /* node failed, wave rolling back, node back on w-1, rolled back */
	ro = rollout_now(w);
	assert_string_equal(json_string_value(json_object_get(ro, "state")), "rolled-back");
	assert_string_equal(ro_node(ro, "node-b", "state"), "rolled-back");
	assert_string_equal(ro_node(ro, "node-b", "error"), "self-test failed");
	assert_string_equal(ro_node(ro, "node-a", "state"), "upgraded");
	json_decref(ro);
	world_free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_leader_publishes_advisory_at_its_deadline),
	    cmocka_unit_test(test_node_probe_request_rides_on_answers),
	    cmocka_unit_test(test_grace_period_then_suspect_then_down),
	    cmocka_unit_test(test_failed_proposals_are_summarised_in_the_log),
	    cmocka_unit_test(test_a_stalled_leader_does_not_blame_the_nodes),
	    cmocka_unit_test(test_a_pass_flushes_proposals_before_it_runs),
	    cmocka_unit_test(test_after_waits_for_success_and_fails_with_a_failure),
	    cmocka_unit_test(test_start_estimate_follows_limits_rates_and_the_queue),
	    cmocka_unit_test(test_gang_placement_env_and_success),
	    cmocka_unit_test(test_cached_heartbeat_answers_follow_every_change),
	    cmocka_unit_test(test_first_step_timeout),
	    cmocka_unit_test(test_busy_devices_survive_a_node_joining),
	    cmocka_unit_test(test_placement_follows_a_node_moving_to_another_switch),
	    cmocka_unit_test(test_placement_at_submission_holds_its_devices),
	    cmocka_unit_test(test_queue_depth_defers_deep_jobs_to_the_full_pass),
	    cmocka_unit_test(test_proposals_under_way_are_bounded),
	    cmocka_unit_test(test_node_state_changes_under_way_are_bounded),
	    cmocka_unit_test(test_new_leader_rereads_jobs_in_chunks_before_deciding),
	    cmocka_unit_test(test_dropped_jobs_are_released_a_chunk_per_iteration),
	    cmocka_unit_test(test_restarts_backoff_and_failure),
	    cmocka_unit_test(test_node_death_moves_the_job),
	    cmocka_unit_test(test_shrink_on_node_death_and_grow_back),
	    cmocka_unit_test(test_straggler_report_and_recovery),
	    cmocka_unit_test(test_straggler_replace_moves_and_is_capped),
	    cmocka_unit_test(test_time_limit_ends_a_running_job_after_a_checkpoint),
	    cmocka_unit_test(test_time_limit_ends_a_restarting_job),
	    cmocka_unit_test(test_heartbeat_refuses_bad_input),
	    cmocka_unit_test(test_drain_moves_the_job_without_a_restart),
	    cmocka_unit_test(test_drain_waits_for_a_checkpoint_at_most_before_restart_s),
	    cmocka_unit_test(test_a_given_up_checkpoint_request_is_not_reused),
	    cmocka_unit_test(test_preemption_stops_the_lowest_priority_job_after_a_checkpoint),
	    cmocka_unit_test(test_no_preemption_behind_a_job_that_reserves),
	    cmocka_unit_test(test_devices_freed_by_a_preemption_are_held_for_its_job),
	    cmocka_unit_test(test_preemption_frees_one_switch),
	    cmocka_unit_test(test_checkpoint_now_asks_a_running_job),
	    cmocka_unit_test(test_heartbeat_logs_are_kept_once_and_read),
	    cmocka_unit_test(test_auto_job_is_planned_and_recorded),
	    cmocka_unit_test(test_auto_job_is_planned_again_when_the_cluster_shrinks),
	    cmocka_unit_test(test_auto_job_grows_when_nodes_are_measured_later),
	    cmocka_unit_test(test_auto_job_without_periodic_checkpoints_grows_from_one_asked_for),
	    cmocka_unit_test(test_admission_counts_submissions_in_flight_across_passes),
	    cmocka_unit_test(test_auto_job_says_why_it_does_not_grow_yet),
	    cmocka_unit_test(test_auto_job_says_why_it_stays),
	    cmocka_unit_test(test_auto_job_looks_again_when_rates_change),
	    cmocka_unit_test(test_plan_names_a_slow_node),
	    cmocka_unit_test(test_plan_refuses_bad_specs_and_perf),
	    cmocka_unit_test(test_link_probes_are_assigned_one_at_a_time),
	    cmocka_unit_test(test_link_probe_needs_a_listening_up_peer),
	    cmocka_unit_test(test_worker_rollout_follows_worker_versions),
	    cmocka_unit_test(test_shallow_pass_takes_the_first_jobs_in_queue_order),
	    cmocka_unit_test(test_ended_jobs_leave_the_queue_in_order),
	    cmocka_unit_test(test_heartbeat_interval_follows_the_cluster_size),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
