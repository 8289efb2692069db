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

json_t *desired_rank(const json_t *job, const json_t *slots, const json_t *nodes, int rank,
                     int64_t restore_step)
{
	const char *job_id = json_string_value(json_object_get(job, "id"));
	const json_t *spec = json_object_get(job, "spec");
	json_int_t generation = json_integer_value(json_object_get(job, "generation"));
	int world = (int)json_array_size(slots);
	if (job_id == NULL || !json_is_object(spec) || rank < 0 || rank >= world)
		return NULL;

	const char *my_node = NULL;
	int my_device = -1, local_rank = 0, local_world = 0, node_rank = -1, nodes_seen = 0;
	char *peers = NULL, *hosts = NULL;
	size_t peers_len = 0, peers_cap = 0, hosts_len = 0, hosts_cap = 0;
	const char *seen[256];
	const char *master_host = NULL;
	long master_port = 0;
	int cuda = 0;

	my_node = json_string_value(json_object_get(json_array_get(slots, (size_t)rank), "node"));
	my_device =
	    (int)json_integer_value(json_object_get(json_array_get(slots, (size_t)rank), "device"));
	for (int r = 0; r < world; r++) {
		const json_t *slot = json_array_get(slots, (size_t)r);
		const char *node = json_string_value(json_object_get(slot, "node"));
		const json_t *n = node ? json_object_get(nodes, node) : NULL;
		const char *host = json_string_value(json_object_get(n, "host"));
		long port = (long)json_integer_value(json_object_get(n, "port_base")) +
		            (long)json_integer_value(json_object_get(slot, "device"));
		char endpoint[128];
		if (node == NULL || host == NULL || my_node == NULL) {
			free(peers);
			free(hosts);
			return NULL;
		}
		int first_time = 1;
		for (int k = 0; k < nodes_seen; k++)
			if (strcmp(seen[k], node) == 0)
				first_time = 0;
		if (first_time && nodes_seen < (int)(sizeof seen / sizeof seen[0]))
			seen[nodes_seen++] = node;
		if (strcmp(node, my_node) == 0) {
			if (r < rank)
				local_rank++;
			local_world++;
			if (node_rank < 0)
				node_rank = nodes_seen - 1;
			const char *kind = json_string_value(json_object_get(
			    json_array_get(json_object_get(n, "devices"), 0), "kind"));
			cuda = kind != NULL && strcmp(kind, "cuda") == 0;
		}
		if (r == 0) {
			master_host = host;
			master_port = port;
		}
		snprintf(endpoint, sizeof endpoint, "%s:%ld", host, port);
		if (list_append(&peers, &peers_len, &peers_cap, endpoint) != 0 ||
		    list_append(&hosts, &hosts_len, &hosts_cap, node) != 0) {
			free(peers);
			free(hosts);
			return NULL;
		}
	}

	json_t *env = json_object();
	const char *key;
	json_t *value;
	json_object_foreach((json_t *)json_object_get(spec, "env"), key, value)
	{
		if (json_is_string(value))
			json_object_set(env, key, value);
	}
	set_int(env, "RANK", rank);
	set_int(env, "WORLD_SIZE", world);
	set_int(env, "LOCAL_RANK", local_rank);
	set_int(env, "LOCAL_WORLD_SIZE", local_world);
	set_int(env, "NODE_RANK", node_rank);
	set_int(env, "GROUP_RANK", node_rank);
	set_str(env, "MASTER_ADDR", master_host);
	set_int(env, "MASTER_PORT", master_port);
	set_int(env, "YARD_RANK", rank);
	set_int(env, "YARD_WORLD_SIZE", world);
	set_str(env, "YARD_PEERS", peers);
	set_str(env, "YARD_HOSTS", hosts);
	set_str(env, "YARD_NODE", my_node);
	set_int(env, "YARD_GENERATION", generation);
	set_int(env, "YARD_DEVICE", my_device);
	if (cuda)
		set_int(env, "CUDA_VISIBLE_DEVICES", my_device);
	char ckpt[1024];
	int controller_store =
	    desired_ckpt_dir(
	        json_string_value(json_object_get(json_object_get(spec, "checkpoint"), "store")),
	        job_id, ckpt, sizeof ckpt) != 0;
	if (!controller_store)
		set_str(env, "YARD_CKPT_DIR", ckpt);
	if (generation > 1)
		set_str(env, "YARD_RESUME", "1");
	free(peers);
	free(hosts);

	const json_t *command = json_object_get(spec, "command");
	json_t *argv =
	    json_is_array(command) ? json_deep_copy(command) : json_pack("[s]", "yard-worker");
	/* parallel "auto": the ranks run the layout the job's recorded plan chose */
	const json_t *layout = json_object_get(json_object_get(job, "plan"), "layout");
	json_t *run_spec = json_deep_copy(spec);
	if (json_is_string(json_object_get(spec, "parallel")) && json_is_object(layout)) {
		json_object_set_new(run_spec, "parallel", json_deep_copy(layout));
		json_object_set_new(run_spec, "ranks", json_integer(world));
	}
	/* re-placed with fewer data-parallel replicas (failure.allow_shrink_dp): the ranks run
	 * the spec with the committed, smaller dp */
	const json_t *effective = json_object_get(job, "effective");
	if (json_is_true(json_object_get(effective, "shrunk"))) {
		struct yard_err err = {0};
		json_t *shrunk = jobspec_with_dp(
		    spec, (int)json_integer_value(json_object_get(effective, "dp")), &err);
		json_decref(run_spec);
		if (shrunk == NULL ||
		    json_integer_value(json_object_get(shrunk, "ranks")) != world) {
			json_decref(shrunk);
			json_decref(env);
			json_decref(argv);
			return NULL;
		}
		run_spec = shrunk;
	}
	json_t *entry = json_pack("{s:s,s:i,s:I,s:i,s:i,s:s,s:o,s:o,s:o}", "job", job_id, "rank",
	                          rank, "generation", generation, "world_size", world, "device",
	                          my_device, "kind", json_is_array(command) ? "command" : "trainer",
	                          "env", env, "argv", argv, "spec", run_spec);
	if (entry != NULL && controller_store)
		json_object_set_new(entry, "checkpoint",
		                    json_pack("{s:s,s:I}", "store", "controller", "restore_step",
		                              (json_int_t)restore_step));
	return entry;
}
