/* api_ckpt.c: the routes of the "controller" checkpoint store (docs/api.md, checkpoints).
 * Listing is for people; uploading and downloading shards is for the nodes that run the
 * job. Upload: declare (POST .../shards/RANK with generation, size, sha256), the chunks (PUT
 * .../chunks/INDEX, raw bytes), commit (POST .../commit); whether this node runs that rank in
 * the job's current generation is decided by the state machine (jobs/fsm_ckpt.c), which
 * knows the committed placement. Download: a node that runs any rank of the job, or a
 * principal with a jobs role, reads a shard of a complete checkpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "web/internal.h"

/* Path number params[i] into *out (step ≥ 1 or rank ≥ 0): 0, or -1 after answering 400. */
static int path_int(struct call *call, int i, const char *what, int64_t min, int64_t max,
                    int64_t *out)
{
	const char *s = call->params[i];
	char *end;
	long long v = strtoll(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end != '\0' || v < min || v > max) {
		call_error(call, 400, what, "%s: '%s' must be a number %lld..%lld", what, s,
		           (long long)min, (long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

/* job (params[0]), step (params[1]), rank (params[2]) into a new args object, or NULL
 * after answering 400. */
static json_t *shard_args(struct call *call, int64_t *step, int64_t *rank)
{
	if (path_int(call, 1, "step", 1, INT64_MAX / 2, step) != 0 ||
	    path_int(call, 2, "rank", 0, 65535, rank) != 0)
		return NULL;
	json_t *args = json_pack("{s:s,s:I,s:I}", "job", call->params[0], "step",
	                         (json_int_t)*step, "rank", (json_int_t)*rank);
	if (args == NULL)
		call_error(call, 500, NULL, "no memory for the shard's command");
	return args;
}

void h_checkpoints_list(struct call *call)
{
	struct yard_err err = {0};
	if (!api_job_known(call))
		return;
	json_t *list = fsm_checkpoints_list(call->s->fsm, call->params[0], &err);
	if (list == NULL) {
		call_yard_error(call, &err);
		return;
	}
	call_json(call, 200, json_pack("{s:o}", "checkpoints", list));
}

void h_checkpoint_shard_declare(struct call *call)
{
	int64_t step = 0, rank = 0;
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	json_t *args = shard_args(call, &step, &rank);
	if (args == NULL) {
		json_decref(body);
		return;
	}
	/* every other field (generation, size, sha256, and any unknown one) is checked by the
	 * state machine; a body cannot override the path */
	const char *key;
	json_t *value;
	json_object_foreach(body, key, value)
	{
		if (json_object_get(args, key) != NULL) {
			call_error(call, 400, key, "%s: given by the path, not the body", key);
			json_decref(body);
			json_decref(args);
			return;
		}
		json_object_set(args, key, value);
	}
	json_decref(body);
	call_submit(call, "checkpoint.shard", args, call_answer_result);
}

void h_checkpoint_shard_chunk(struct call *call)
{
	int64_t step = 0, rank = 0, index = 0;
	h2o_iovec_t e = call->req->entity;
	json_t *args = shard_args(call, &step, &rank);
	if (args == NULL)
		return;
	if (path_int(call, 3, "index", 0, INT32_MAX, &index) != 0) {
		json_decref(args);
		return;
	}
	if (e.len == 0 || e.len > FSM_CHUNK_MAX) {
		json_decref(args);
		call_error(call, e.len ? 413 : 400, "body",
		           "body: a chunk is 1..%u raw bytes, got %zu", FSM_CHUNK_MAX, e.len);
		return;
	}
	char *text = malloc(base64_encoded_len(e.len) + 1);
	if (text == NULL) {
		json_decref(args);
		call_error(call, 500, NULL, "no memory to encode chunk %lld", (long long)index);
		return;
	}
	base64_encode(e.base, e.len, text);
	json_object_set_new(args, "index", json_integer(index));
	json_object_set_new(args, "data", json_string(text));
	free(text);
	call_submit(call, "checkpoint.chunk", args, call_answer_result);
}

void h_checkpoint_shard_commit(struct call *call)
{
	int64_t step = 0, rank = 0;
	json_t *args = shard_args(call, &step, &rank);
	if (args != NULL)
		call_submit(call, "checkpoint.commit", args, call_answer_result);
}

/* A node may read the shards of a job only while it runs one of the job's ranks. */
static int node_runs_job(struct call *call, const char *job)
{
	json_t *layout = fsm_job_layout(call->s->fsm, job);
	size_t i;
	json_t *slot;
	int found = 0;
	json_array_foreach(layout, i, slot)
	{
		const char *node = json_string_value(json_object_get(slot, "node"));
		found |= node != NULL && strcmp(node, call->actor) == 0;
	}
	json_decref(layout);
	return found;
}

void h_checkpoint_shard_get(struct call *call)
{
	int64_t step = 0, rank = 0, size = 0;
	char sha[SHA256_HEX_LEN + 1];
	struct yard_err err = {0};
	const char *job = call->params[0];
	if (path_int(call, 1, "step", 1, INT64_MAX / 2, &step) != 0 ||
	    path_int(call, 2, "rank", 0, 65535, &rank) != 0)
		return;
	if (strcmp(call->role, "node") == 0 && !node_runs_job(call, job)) {
		call_error(call, 403, NULL,
		           "node %s runs no rank of job %s; it may not read its"
		           " checkpoints",
		           call->actor, job);
		return;
	}
	unsigned char *data = NULL;
	size_t len = 0;
	if (fsm_checkpoint_shard_info(call->s->fsm, job, step, rank, &size, sha, &err) != 0 ||
	    fsm_checkpoint_shard_read(call->s->fsm, job, step, rank, &data, &len, &err) != 0) {
		call_yard_error(call, &err);
		return;
	}
	h2o_req_t *req = call->req;
	h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-yard-sha256"), 0, NULL,
	                      h2o_strdup(&req->pool, sha, SIZE_MAX).base, strlen(sha));
	call_text(call, 200, "application/octet-stream", (char *)data, len);
}
