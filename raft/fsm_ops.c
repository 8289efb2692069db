/* fsm_ops.c: adapter from consensus_fsm_ops to jobs/fsm: apply, sqlite3_serialize
 * snapshots (released with sqlite3_free) and sqlite3_deserialize restores. */
#include "raft/fsm_ops.h"

static const void *ops_apply(void *data, const void *payload, size_t len)
{
	return fsm_apply(data, payload, len);
}

static void ops_result_hold(void *data, const void *result)
{
	json_incref((json_t *)result);
}

static void ops_result_release(void *data, const void *result)
{
	json_decref((json_t *)result);
}

static void ops_apply_batch_begin(void *data)
{
	fsm_apply_batch_begin(data);
}

static int ops_apply_batch_end(void *data)
{
	return fsm_apply_batch_end(data);
}

static int ops_snapshot(void *data, void **buf, size_t *len)
{
	struct yard_err err = {0};
	unsigned char *p = NULL;
	int rc = fsm_serialize(data, &p, len, &err);
	*buf = p;
	return rc;
}

static int ops_image(void *data, const void **buf, size_t *len)
{
	const unsigned char *p = NULL;
	int rc = fsm_image(data, &p, len);
	*buf = p;
	return rc;
}

static void ops_snapshot_free(void *data, void *buf)
{
	sqlite3_free(buf);
}

static int ops_restore(void *data, const void *buf, size_t len)
{
	struct yard_err err = {0};
	return fsm_restore(data, buf, len, &err);
}

void fsm_ops_init(struct consensus_fsm_ops *ops, struct fsm *f)
{
	ops->data = f;
	ops->apply = ops_apply;
	ops->result_hold = ops_result_hold;
	ops->result_release = ops_result_release;
	ops->apply_batch_begin = ops_apply_batch_begin;
	ops->apply_batch_end = ops_apply_batch_end;
	ops->snapshot = ops_snapshot;
	ops->snapshot_free = ops_snapshot_free;
	ops->image = ops_image;
	ops->restore = ops_restore;
}
