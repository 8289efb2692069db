/* sched_world.c: see sched_world.h. */
#include "tests/unit/sched_world.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const json_t *apply_object(struct sched_world *w, const char *op, json_t *args,
                                  const char *actor)
{
	size_t len = 0;
	char *cmd = fsm_command_encode(op, args, NULL, w->wall, actor, "admin", &len);
	const json_t *r = fsm_apply(&w->fsm, cmd, len);
	free(cmd);
	w->applied++;
	return r;
}

struct sched_world_held {
	char op[32];
	json_t *args;
	sched_done_cb done;
	void *cb_data;
};

static int fake_propose(void *data, const char *op, json_t *args, sched_done_cb done, void *cb_data)
{
	struct sched_world *w = data;
	if (w->propose_status != 0) {
		json_decref(args);
		done(cb_data, w->propose_status, NULL);
		return 0;
	}
	if (w->hold) {
		if (w->n_held == w->cap_held) {
			int cap = w->cap_held ? 2 * w->cap_held : 64;
			struct sched_world_held *grown = realloc(w->held, (size_t)cap * sizeof *grown);
			if (grown == NULL) {
				json_decref(args);
				return -1;
			}
			w->held = grown;
			w->cap_held = cap;
		}
		struct sched_world_held *h = &w->held[w->n_held++];
		snprintf(h->op, sizeof h->op, "%s", op);
		h->args = args;
		h->done = done;
		h->cb_data = cb_data;
		if (w->n_held > w->max_held)
			w->max_held = w->n_held;
		return 0;
	}
	done(cb_data, 0, apply_object(data, op, args, "scheduler"));
	return 0;
}

int sched_world_release(struct sched_world *w)
{
	int n = 0;
	for (int i = 0; i < w->n_held; i++, n++) { /* done() may hold more: they come too */
		struct sched_world_held h = w->held[i];
		h.done(h.cb_data, 0, apply_object(w, h.op, h.args, "scheduler"));
	}
	w->n_held = 0;
	return n;
}

static int fake_ready(void *data)
{
	return 1;
}

static uint64_t fake_applied(void *data)
{
	return ((struct sched_world *)data)->applied;
}

static void fake_flush(void *data)
{
	struct sched_world *w = data;
	w->flushes++;
	w->applied_at_flush = w->applied;
}

static uint64_t fake_mono(void *data)
{
	return ((struct sched_world *)data)->mono;
}

static int64_t fake_wall(void *data)
{
	return ((struct sched_world *)data)->wall;
}

struct sched_io sched_world_io(struct sched_world *w)
{
	return (struct sched_io){.data = w,
	                         .propose = fake_propose,
	                         .is_ready = fake_ready,
	                         .applied_index = fake_applied,
	                         .flush = fake_flush,
	                         .mono_ms = fake_mono,
	                         .wall_ms = fake_wall};
}

int sched_world_apply(struct sched_world *w, const char *op, const char *args)
{
	json_t *a = json_loads(args, 0, NULL);
	if (a == NULL)
		return -1;
	return (int)json_integer_value(json_object_get(apply_object(w, op, a, "test"), "status"));
}

int sched_world_add_node_labelled(struct sched_world *w, int n, const char *labels)
{
	char args[768];
	snprintf(args, sizeof args,
	         "{\"name\":\"node-%c\",\"host\":\"10.0.0.%d\",\"port_base\":%d,\"devices\":"
	         "[{\"index\":0,\"kind\":\"cpu\"},{\"index\":1,\"kind\":\"cpu\"},"
	         "{\"index\":2,\"kind\":\"cpu\"},{\"index\":3,\"kind\":\"cpu\"}],"
	         "\"labels\":%s,\"token_hash\":\"%064d\"}",
	         'a' + n, n + 1, 29500 + 100 * n, labels != NULL ? labels : "{}", n);
	return sched_world_apply(w, "node.register", args);
}

int sched_world_add_node(struct sched_world *w, int n)
{
	return sched_world_add_node_labelled(w, n, NULL);
}

void sched_world_restart(struct sched_world *w, struct sched_config *cfg)
{
	sched_destroy(w->sched);
	uv_run(&w->loop, UV_RUN_NOWAIT);
	cfg->tick_ms = 0;
	struct sched_io io = sched_world_io(w);
	w->sched = sched_create(&w->loop, &w->fsm, cfg, &io);
	sched_leader_up(w->sched);
}

int sched_world_init(struct sched_world *w, int queue_depth, char *why, size_t why_len)
{
	struct yard_err err = {0};
	struct sched_config cfg;
	memset(w, 0, sizeof *w);
	if (fsm_init(&w->fsm, &err) != 0) {
		snprintf(why, why_len, "fsm_init: %s", err.msg);
		return -1;
	}
	uv_loop_init(&w->loop);
	w->mono = 1000000;
	w->wall = 1763740000000LL;
	sched_config_defaults(&cfg);
	cfg.tick_ms = 0;
	cfg.queue_depth = queue_depth;
	struct sched_io io = sched_world_io(w);
	w->sched = sched_create(&w->loop, &w->fsm, &cfg, &io);
	for (int n = 0; n < 2; n++) {
		int status = sched_world_add_node(w, n);
		if (status != 200) {
			snprintf(why, why_len, "node.register of node-%c: status %d", 'a' + n,
			         status);
			sched_world_close(w);
			return -1;
		}
	}
	sched_leader_up(w->sched);
	return 0;
}

void sched_world_close(struct sched_world *w)
{
	for (int i = 0; i < w->n_held; i++)
		json_decref(w->held[i].args);
	free(w->held);
	sched_destroy(w->sched);
	uv_run(&w->loop, UV_RUN_NOWAIT);
	uv_loop_close(&w->loop);
	fsm_close(&w->fsm);
}
