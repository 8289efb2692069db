/* desired.c: the desired entry of one rank (see desired.h). */
#include "scheduler/desired.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

json_t *desired_job(const json_t *job, const json_t *slots, const json_t *nodes,
                    int64_t restore_step, json_t **common_env)
{
	const char *job_id = json_string_value(json_object_get(job, "id"));
	const json_t *spec = json_object_get(job, "spec");
	json_int_t generation = json_integer_value(json_object_get(job, "generation"));
	if (job_id == NULL || !json_is_object(spec))
		return NULL;
	struct job_view v;
	if (job_view_init(&v, slots, nodes) != 0 || v.world == 0) {
		job_view_free(&v);
		return NULL;
	}
	const json_t *command = json_object_get(spec, "command");
	json_t *argv =
	    json_is_array(command) ? json_deep_copy(command) : json_pack("[s]", "yard-worker");
	/* parallel "auto": the ranks run the layout the job's recorded plan chose */
	const json_t *layout = json_object_get(json_object_get(job, "plan"), "layout");
	json_t *run_spec = json_deep_copy(spec);
	if (json_is_string(json_object_get(spec, "parallel")) && json_is_object(layout)) {
		json_object_set_new(run_spec, "parallel", json_deep_copy(layout));
		json_object_set_new(run_spec, "ranks", json_integer(v.world));
	}
	/* re-placed with fewer data-parallel replicas (failure.allow_shrink_dp): the ranks run
	 * the spec with the committed, smaller dp */
	const json_t *effective = json_object_get(job, "effective");
	if (json_is_true(json_object_get(effective, "shrunk"))) {
		struct yard_err err = {0};
		json_t *shrunk = jobspec_with_dp(
		    spec, (int)json_integer_value(json_object_get(effective, "dp")), &err);
		json_decref(run_spec);
		run_spec = shrunk;
		if (shrunk == NULL ||
		    json_integer_value(json_object_get(shrunk, "ranks")) != v.world) {
			json_decref(run_spec);
			json_decref(argv);
			job_view_free(&v);
			return NULL;
		}
	}
	char ckpt[1024];
	int controller_store =
	    desired_ckpt_dir(
	        json_string_value(json_object_get(json_object_get(spec, "checkpoint"), "store")),
	        job_id, ckpt, sizeof ckpt) != 0;
	/* what every rank's environment shares */
	json_t *common = json_object();
	const char *key;
	json_t *value;
	json_object_foreach((json_t *)json_object_get(spec, "env"), key, value)
	{
		if (json_is_string(value))
			json_object_set(common, key, value);
	}
	set_int(common, "WORLD_SIZE", v.world);
	set_str(common, "MASTER_ADDR", v.master_host);
	set_int(common, "MASTER_PORT", v.master_port);
	set_int(common, "YARD_WORLD_SIZE", v.world);
	set_str(common, "YARD_PEERS", v.peers);
	set_str(common, "YARD_HOSTS", v.hosts);
	set_int(common, "YARD_GENERATION", generation);
	if (!controller_store)
		set_str(common, "YARD_CKPT_DIR", ckpt);
	if (generation > 1)
		set_str(common, "YARD_RESUME", "1");

	json_t *entries = json_array();
	for (int rank = 0; rank < v.world; rank++) {
		int k = v.node_index[rank];
		json_t *env = json_copy(common); /* shallow: the shared strings are not copied */
		set_int(env, "RANK", rank);
		set_int(env, "LOCAL_RANK", v.local_rank[rank]);
		set_int(env, "LOCAL_WORLD_SIZE", v.node_ranks[k]);
		set_int(env, "NODE_RANK", k);
		set_int(env, "GROUP_RANK", k);
		set_int(env, "YARD_RANK", rank);
		set_str(env, "YARD_NODE", v.node[rank]);
		set_int(env, "YARD_DEVICE", v.device[rank]);
		if (v.node_cuda[k])
			set_int(env, "CUDA_VISIBLE_DEVICES", v.device[rank]);
		json_t *entry = json_pack("{s:s,s:i,s:I,s:i,s:i,s:s,s:o,s:O,s:O}", "job", job_id,
		                          "rank", rank, "generation", generation, "world_size",
		                          v.world, "device", v.device[rank], "kind",
		                          json_is_array(command) ? "command" : "trainer", "env",
		                          env, "argv", argv, "spec", run_spec);
		if (entry != NULL && controller_store)
			json_object_set_new(entry, "checkpoint",
			                    json_pack("{s:s,s:I}", "store", "controller",
			                              "restore_step", (json_int_t)restore_step));
		json_array_append_new(entries, entry != NULL ? entry : json_null());
	}
	if (common_env != NULL)
		*common_env = json_incref(common);
	json_decref(common);
	json_decref(argv);
	json_decref(run_spec);
	job_view_free(&v);
	return entries;
}
