/* desired.c: the desired entry of one rank (see desired.h). */
#include "scheduler/desired.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "jobs/spec.h"

int desired_ckpt_dir(const char *store, const char *job, char *out, size_t out_len)
{
	if (store == NULL || strncmp(store, "dir:", 4) != 0)
		return -1;
	snprintf(out, out_len, "%s/%s", store + 4, job);
	return 0;
}

static void set_str(json_t *env, const char *key, const char *value)
{
	json_object_set_new(env, key, json_string(value));
}

static void set_int(json_t *env, const char *key, long long value)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%lld", value);
	set_str(env, key, buf);
}

/* Appends text to a growing comma-separated list. */
static int list_append(char **list, size_t *len, size_t *cap, const char *item)
{
	size_t need = *len + strlen(item) + 2;
	if (need > *cap) {
		size_t grown = need * 2;
		char *p = realloc(*list, grown);
		if (p == NULL)
			return -1;
		*list = p;
		*cap = grown;
	}
	*len += (size_t)sprintf(*list + *len, "%s%s", *len ? "," : "", item);
	return 0;
}

/* What every rank of a job shares: the peer lists, each slot's node and device, and per node
 * its place among the job's nodes (first appearance in rank order), its rank count and kind. */
struct job_view {
	int world;
	const char **node; /* [rank] */
	int *device;       /* [rank] */
	int *node_index;   /* [rank]: index of the rank's node among the job's nodes */
	int *local_rank;   /* [rank]: ranks before it on its node */
	int *node_ranks;   /* [node index]: ranks on that node */
	int *node_cuda;    /* [node index]: its first device is CUDA */
	char *peers, *hosts;
	const char *master_host;
	long master_port;
};

static void job_view_free(struct job_view *v)
{
	free(v->node);
	free(v->device);
	free(v->node_index);
	free(v->local_rank);
	free(v->node_ranks);
	free(v->node_cuda);
	free(v->peers);
	free(v->hosts);
}

/* Fills v from the slots and nodes; -1 when a slot's node or its host is missing. */
static int job_view_init(struct job_view *v, const json_t *slots, const json_t *nodes)
{
	memset(v, 0, sizeof *v);
	v->world = (int)json_array_size(slots);
	size_t n = (size_t)v->world + 1;
	v->node = calloc(n, sizeof *v->node);
	v->device = calloc(n, sizeof *v->device);
	v->node_index = calloc(n, sizeof *v->node_index);
	v->local_rank = calloc(n, sizeof *v->local_rank);
	v->node_ranks = calloc(n, sizeof *v->node_ranks);
	v->node_cuda = calloc(n, sizeof *v->node_cuda);
	if (!v->node || !v->device || !v->node_index || !v->local_rank || !v->node_ranks ||
	    !v->node_cuda)
		return -1;
	size_t peers_len = 0, peers_cap = 0, hosts_len = 0, hosts_cap = 0;
	json_t *index_of = json_object(); /* node id -> node index */
	int n_nodes = 0, rc = 0;
	for (int r = 0; r < v->world && rc == 0; r++) {
		const json_t *slot = json_array_get(slots, (size_t)r);
		const char *node = json_string_value(json_object_get(slot, "node"));
		const json_t *row = node ? json_object_get(nodes, node) : NULL;
		const char *host = json_string_value(json_object_get(row, "host"));
		if (node == NULL || host == NULL) {
			rc = -1;
			break;
		}
		v->node[r] = node;
		v->device[r] = (int)json_integer_value(json_object_get(slot, "device"));
		long port =
		    (long)json_integer_value(json_object_get(row, "port_base")) + v->device[r];
		const json_t *seen = json_object_get(index_of, node);
		int k = seen != NULL ? (int)json_integer_value(seen) : n_nodes++;
		if (seen == NULL) {
			json_object_set_new(index_of, node, json_integer(k));
			const char *kind = json_string_value(json_object_get(
			    json_array_get(json_object_get(row, "devices"), 0), "kind"));
			v->node_cuda[k] = kind != NULL && strcmp(kind, "cuda") == 0;
		}
		v->node_index[r] = k;
		v->local_rank[r] = v->node_ranks[k]++;
		if (r == 0) {
			v->master_host = host;
			v->master_port = port;
		}
		char endpoint[128];
		snprintf(endpoint, sizeof endpoint, "%s:%ld", host, port);
		if (list_append(&v->peers, &peers_len, &peers_cap, endpoint) != 0 ||
		    list_append(&v->hosts, &hosts_len, &hosts_cap, node) != 0)
			rc = -1;
	}
	json_decref(index_of);
	return rc;
}

/* What desired_job and desired_job_text both start from. */
struct job_parts {
	const char *job_id;
	json_int_t generation;
	struct job_view v;
	const char *kind; /* "command" or "trainer" */
	json_t *argv;     /* owned */
	json_t *run_spec; /* owned: the spec the ranks run */
	int controller_store;
	json_t *common; /* owned: the environment every rank starts from */
};

static void job_parts_free(struct job_parts *p)
{
	json_decref(p->argv);
	json_decref(p->run_spec);
	json_decref(p->common);
	job_view_free(&p->v);
}

/* Fills p; -1 when the rows are inconsistent (p is then freed already). */
static int job_parts_init(struct job_parts *p, const json_t *job, const json_t *slots,
                          const json_t *nodes)
{
	memset(p, 0, sizeof *p);
	p->job_id = json_string_value(json_object_get(job, "id"));
	const json_t *spec = json_object_get(job, "spec");
	p->generation = json_integer_value(json_object_get(job, "generation"));
	if (p->job_id == NULL || !json_is_object(spec))
		return -1;
	struct job_view *v = &p->v;
	if (job_view_init(v, slots, nodes) != 0 || v->world == 0) {
		job_view_free(v);
		return -1;
	}
	const json_t *command = json_object_get(spec, "command");
	p->kind = json_is_array(command) ? "command" : "trainer";
	p->argv =
	    json_is_array(command) ? json_deep_copy(command) : json_pack("[s]", "yard-worker");
	/* parallel "auto": the ranks run the layout the job's recorded plan chose */
	const json_t *layout = json_object_get(json_object_get(job, "plan"), "layout");
	p->run_spec = json_deep_copy(spec);
	if (json_is_string(json_object_get(spec, "parallel")) && json_is_object(layout)) {
		json_object_set_new(p->run_spec, "parallel", json_deep_copy(layout));
		json_object_set_new(p->run_spec, "ranks", json_integer(v->world));
	}
	/* re-placed with fewer data-parallel replicas (failure.allow_shrink_dp): the ranks run
	 * the spec with the committed, smaller dp */
	const json_t *effective = json_object_get(job, "effective");
	if (json_is_true(json_object_get(effective, "shrunk"))) {
		struct yard_err err = {0};
		json_t *shrunk = jobspec_with_dp(
		    spec, (int)json_integer_value(json_object_get(effective, "dp")), &err);
		json_decref(p->run_spec);
		p->run_spec = shrunk;
		if (shrunk == NULL ||
		    json_integer_value(json_object_get(shrunk, "ranks")) != v->world) {
			job_parts_free(p);
			return -1;
		}
	}
	/* the controllers enforce the time limit and the jobs waited for; workers built before
	 * them would refuse the keys */
	json_object_del(p->run_spec, "time_limit_s");
	json_object_del(p->run_spec, "after");
	char ckpt[1024];
	p->controller_store =
	    desired_ckpt_dir(
	        json_string_value(json_object_get(json_object_get(spec, "checkpoint"), "store")),
	        p->job_id, ckpt, sizeof ckpt) != 0;
	/* what every rank's environment shares */
	p->common = json_object();
	const char *key;
	json_t *value;
	json_object_foreach((json_t *)json_object_get(spec, "env"), key, value)
	{
		if (json_is_string(value))
			json_object_set(p->common, key, value);
	}
	set_int(p->common, "WORLD_SIZE", v->world);
	set_str(p->common, "MASTER_ADDR", v->master_host);
	set_int(p->common, "MASTER_PORT", v->master_port);
	set_int(p->common, "YARD_WORLD_SIZE", v->world);
	set_str(p->common, "YARD_PEERS", v->peers);
	set_str(p->common, "YARD_HOSTS", v->hosts);
	set_int(p->common, "YARD_GENERATION", p->generation);
	if (!p->controller_store)
		set_str(p->common, "YARD_CKPT_DIR", ckpt);
	if (p->generation > 1)
		set_str(p->common, "YARD_RESUME", "1");
	return 0;
}

/* The variables each rank sets for itself, in the order it sets them; CUDA_VISIBLE_DEVICES
 * only on a node whose devices are CUDA. */
enum {
	OWN_RANK,
	OWN_LOCAL_RANK,
	OWN_LOCAL_WORLD_SIZE,
	OWN_NODE_RANK,
	OWN_GROUP_RANK,
	OWN_YARD_RANK,
	OWN_YARD_NODE,
	OWN_YARD_DEVICE,
	OWN_CUDA,
	OWN_N
};
static const char *const own_keys[OWN_N] = {"RANK",      "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                                            "NODE_RANK", "GROUP_RANK",  "YARD_RANK",
                                            "YARD_NODE", "YARD_DEVICE", "CUDA_VISIBLE_DEVICES"};

/* Rank r's own value of own_keys[k] into buf; NULL when the rank does not set it. */
static const char *own_value(const struct job_view *v, int r, int k, char *buf, size_t len)
{
	int node = v->node_index[r];
	long long n;
	switch (k) {
	case OWN_RANK:
	case OWN_YARD_RANK:
		n = r;
		break;
	case OWN_LOCAL_RANK:
		n = v->local_rank[r];
		break;
	case OWN_LOCAL_WORLD_SIZE:
		n = v->node_ranks[node];
		break;
	case OWN_NODE_RANK:
	case OWN_GROUP_RANK:
		n = node;
		break;
	case OWN_YARD_NODE:
		return v->node[r];
	case OWN_YARD_DEVICE:
		n = v->device[r];
		break;
	case OWN_CUDA:
		if (!v->node_cuda[node])
			return NULL;
		n = v->device[r];
		break;
	default:
		return NULL;
	}
	snprintf(buf, len, "%lld", n);
	return buf;
}

json_t *desired_job(const json_t *job, const json_t *slots, const json_t *nodes,
                    int64_t restore_step, json_t **common_env)
{
	struct job_parts p;
	if (job_parts_init(&p, job, slots, nodes) != 0)
		return NULL;
	const struct job_view *v = &p.v;
	json_t *entries = json_array();
	for (int rank = 0; rank < v->world; rank++) {
		json_t *env = json_copy(p.common); /* shallow: the shared strings are not copied */
		for (int k = 0; k < OWN_N; k++) {
			char buf[32];
			const char *value = own_value(v, rank, k, buf, sizeof buf);
			if (value != NULL)
				set_str(env, own_keys[k], value);
		}
		json_t *entry = json_pack("{s:s,s:i,s:I,s:i,s:i,s:s,s:o,s:O,s:O}", "job", p.job_id,
		                          "rank", rank, "generation", p.generation, "world_size",
		                          v->world, "device", v->device[rank], "kind", p.kind,
		                          "env", env, "argv", p.argv, "spec", p.run_spec);
		if (entry != NULL && p.controller_store)
			json_object_set_new(entry, "checkpoint",
			                    json_pack("{s:s,s:I}", "store", "controller",
			                              "restore_step", (json_int_t)restore_step));
		json_array_append_new(entries, entry != NULL ? entry : json_null());
	}
	if (common_env != NULL)
		*common_env = json_incref(p.common);
	job_parts_free(&p);
	return entries;
}

static void text_str(struct jsonx_buf *t, const char *s)
{
	jsonx_buf_put(t, s, strlen(s));
}

/* "key":"value" (both escaped), with a comma first unless first. */
static void text_member(struct jsonx_buf *t, int first, const char *key, const char *value)
{
	if (!first)
		jsonx_buf_put(t, ",", 1);
	jsonx_escape(key, strlen(key), jsonx_buf_put, t);
	jsonx_buf_put(t, ":", 1);
	jsonx_escape(value, strlen(value), jsonx_buf_put, t);
}

json_t *desired_job_text(const json_t *job, const json_t *slots, const json_t *nodes,
                         int64_t restore_step, int64_t restore_world)
{
	struct job_parts p;
	if (job_parts_init(&p, job, slots, nodes) != 0)
		return NULL;
	const struct job_view *v = &p.v;
	/* a key some rank sets itself is in every rank's own part, none in the shared one */
	int own_set[OWN_N];
	for (int k = 0; k < OWN_N; k++) {
		own_set[k] = k != OWN_CUDA;
		for (int r = 0; r < v->world && !own_set[k]; r++)
			own_set[k] = v->node_cuda[v->node_index[r]];
	}
	struct jsonx_buf tail = {0}, fixed = {0}, shared = {0}, close = {0};
	/* the tail: the shared variables, the env's "}", the spec, the entry's "}"; the shared
	 * part: {"env":{the shared variables},"spec":...}; the close: the env's "}" and the
	 * entry's reference to the shared part */
	const char *key;
	json_t *value;
	int first_shared = 1;
	text_str(&shared, "{\"env\":{");
	json_object_foreach(p.common, key, value)
	{
		int own = 0;
		for (int k = 0; k < OWN_N && !own; k++)
			own = own_set[k] && strcmp(key, own_keys[k]) == 0;
		if (!own) {
			text_member(&tail, 0, key, json_string_value(value));
			text_member(&shared, first_shared, key, json_string_value(value));
			first_shared = 0;
		}
	}
	size_t spec_len = 0;
	char *spec_text = jsonx_dumps_compact(p.run_spec, 0, &spec_len);
	text_str(&tail, "},\"spec\":");
	text_str(&shared, "},\"spec\":");
	if (spec_text != NULL) {
		jsonx_buf_put(&tail, spec_text, spec_len);
		jsonx_buf_put(&shared, spec_text, spec_len);
	}
	jsonx_buf_put(&tail, "}", 1);
	jsonx_buf_put(&shared, "}", 1);
	text_str(&close, "},\"shared\":");
	jsonx_escape(p.job_id, strlen(p.job_id), jsonx_buf_put, &close);
	jsonx_buf_put(&close, "}", 1);
	/* what every head shares after its first line: argv and the checkpoint */
	size_t argv_len = 0;
	char *argv_text = jsonx_dumps_compact(p.argv, 0, &argv_len);
	text_str(&fixed, ",\"argv\":");
	if (argv_text != NULL)
		jsonx_buf_put(&fixed, argv_text, argv_len);
	if (p.controller_store) {
		char ckpt[160];
		if (restore_step >= 0)
			snprintf(ckpt, sizeof ckpt,
			         ",\"checkpoint\":{\"store\":\"controller\",\"restore_step\":%lld,"
			         "\"restore_world\":%lld}",
			         (long long)restore_step, (long long)restore_world);
		else
			snprintf(ckpt, sizeof ckpt,
			         ",\"checkpoint\":{\"store\":\"controller\",\"restore_step\":%lld}",
			         (long long)restore_step);
		text_str(&fixed, ckpt);
	}
	text_str(&fixed, ",\"env\":{");
	json_t *heads = json_array();
	int ok = !tail.failed && !fixed.failed && !shared.failed && !close.failed &&
	         spec_text != NULL && argv_text != NULL && heads != NULL;
	for (int r = 0; ok && r < v->world; r++) {
		struct jsonx_buf head = {0};
		text_str(&head, "{\"job\":");
		jsonx_escape(p.job_id, strlen(p.job_id), jsonx_buf_put, &head);
		char line[200];
		snprintf(line, sizeof line,
		         ",\"rank\":%d,\"generation\":%lld,\"world_size\":%d,\"device\":%d,"
		         "\"kind\":\"%s\"",
		         r, (long long)p.generation, v->world, v->device[r], p.kind);
		text_str(&head, line);
		jsonx_buf_put(&head, fixed.text, fixed.len);
		int first = 1;
		for (int k = 0; k < OWN_N; k++) {
			if (!own_set[k])
				continue;
			char buf[32];
			const char *mine = own_value(v, r, k, buf, sizeof buf);
			/* set by other ranks only: this one keeps the job's own value, if any */
			const char *val =
			    mine != NULL
			        ? mine
			        : json_string_value(json_object_get(p.common, own_keys[k]));
			if (val == NULL)
				continue;
			text_member(&head, first, own_keys[k], val);
			first = 0;
		}
		ok = !head.failed && !first &&
		     json_array_append_new(heads, json_stringn_nocheck(head.text, head.len)) == 0;
		free(head.text);
	}
	json_t *answer = NULL;
	if (ok)
		answer =
		    json_pack("{s:o,s:s%,s:s%,s:s%}", "heads", heads, "tail", tail.text, tail.len,
		              "shared", shared.text, shared.len, "close", close.text, close.len);
	else
		json_decref(heads);
	free(spec_text);
	free(argv_text);
	free(tail.text);
	free(fixed.text);
	free(shared.text);
	free(close.text);
	job_parts_free(&p);
	return answer;
}
