/* consensus.c: canonical raft 0.15 behind one small API, with the library's pitfalls
 * handled (the list is in consensus.h; each has a test in tests/unit/test_consensus.c or
 * tests/integration/). This file does not know what the commands mean. */
#include "raft/consensus.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/clock.h"
#include "common/log.h"
#include "jobs/codec.h"
#include "raft/datadir.h"

enum op_kind { OP_APPLY, OP_BATCH, OP_BARRIER, OP_ADD, OP_ASSIGN, OP_REMOVE, OP_TRANSFER };

struct consensus_op {
	struct consensus_op *next;
	struct consensus *c;
	enum op_kind kind;
	struct raft_buffer buf; /* OP_APPLY/OP_BATCH: the frame, ours until raft_apply takes it */
	void *payload;          /* OP_APPLY: the command (owned) until it is framed */
	size_t len;
	struct consensus_op **members; /* OP_BATCH: the OP_APPLYs it carries, in order (owned) */
	int n_members;
	uint64_t id; /* member for ADD/ASSIGN/REMOVE/TRANSFER */
	char addr[CONSENSUS_ADDR_MAX];
	int voter;
	uint64_t submit_ns; /* OP_APPLY: when consensus_submit took it */
	uint64_t issue_ns;  /* OP_APPLY/OP_BATCH: when raft_apply took its entry */
	consensus_apply_cb apply_cb;
	consensus_done_cb done_cb;
	void *data;
	union {
		struct raft_apply apply;
		struct raft_barrier barrier;
		struct raft_change change;
		struct raft_transfer transfer;
	} req;
};

#define CONSENSUS_OF(ptr, member)                                                                  \
	((struct consensus *)((char *)(ptr)-offsetof(struct consensus, member)))

void consensus_config_defaults(struct consensus_config *cfg)
{
	cfg->election_timeout_ms = CONSENSUS_DEFAULT_ELECTION_TIMEOUT_MS;
	cfg->heartbeat_ms = CONSENSUS_DEFAULT_HEARTBEAT_MS;
	cfg->connect_retry_ms = CONSENSUS_DEFAULT_CONNECT_RETRY_MS;
	cfg->snapshot_threshold = CONSENSUS_DEFAULT_SNAPSHOT_THRESHOLD;
	cfg->snapshot_trailing = CONSENSUS_DEFAULT_SNAPSHOT_TRAILING;
	cfg->min_free_mb = CONSENSUS_DEFAULT_MIN_FREE_MB;
	cfg->batch_max = CONSENSUS_DEFAULT_BATCH_MAX;
	cfg->batch_max_bytes = CONSENSUS_DEFAULT_BATCH_MAX_BYTES;
}

/* raft 0.15's raft_strerror says "unknown error" for several codes; name them ourselves. */
static int map_status(int rv, const char **msg)
{
	switch (rv) {
	case 0:
		*msg = "ok";
		return 0;
	case RAFT_NOTLEADER:
		*msg = "not the leader";
		return YARD_ENOTLEADER;
	case RAFT_LEADERSHIPLOST:
		*msg = "leadership lost before the entry committed: outcome unknown, retry with "
		       "the same request id";
		return YARD_EUNKNOWN;
	case RAFT_NOSPACE:
		*msg = "no space left on the raft log device";
		return YARD_ENOSPACE;
	case RAFT_SHUTDOWN:
	case RAFT_CANCELED:
		*msg = "controller shutting down";
		return YARD_EABORTED;
	case RAFT_CANTCHANGE:
	case RAFT_BUSY:
		*msg = "a membership change or transfer is already in progress";
		return YARD_EBUSY;
	case RAFT_BADID:
	case RAFT_DUPLICATEID:
	case RAFT_DUPLICATEADDRESS:
	case RAFT_BADROLE:
		*msg = raft_strerror(rv);
		return YARD_EINVAL;
	case RAFT_NOMEM:
		*msg = "out of memory";
		return YARD_ENOMEM;
	default:
		*msg = raft_strerror(rv);
		return YARD_EIO;
	}
}

/* ---- FSM glue: apply never fails ---- */

static void batch_results_release(struct consensus *c)
{
	for (int i = 0; i < c->n_batch_results; i++)
		if (c->batch_results[i] != NULL && c->ops.result_release != NULL)
			c->ops.result_release(c->ops.data, c->batch_results[i]);
	c->n_batch_results = 0;
}

/* ---- snapshots ---- */

unsigned consensus_snapshot_threshold(const struct consensus_config *cfg)
{
	unsigned step = cfg->snapshot_threshold / 8;
	return cfg->snapshot_threshold + (unsigned)((cfg->id + 3) % 4) * step;
}

static void snapshot_free(struct consensus *c, void *data)
{
	if (data != NULL && data == c->snap_own) {
		c->snap_own = NULL;
		snapbuf_release(&c->snapbuf, data);
	} else {
		c->ops.snapshot_free(c->ops.data, data);
	}
}

/* Entries before raft's snapshot threshold comes due at which the memory for the copy is
 * asked for: a quarter of the threshold, so a worker has time to touch it. */
static unsigned prepare_margin(const struct consensus *c)
{
	unsigned t = c->raft.snapshot.threshold;
	return t / 4 > 0 ? t / 4 : 1;
}

/* Called for each entry applied: once the next snapshot is a margin away, memory for its
 * copy is prepared off the loop (raft/snapbuf.h). Its size: the image now, plus what the
 * remaining entries will add at the rate the image grew since the last snapshot (or since
 * this member started), a fifth more and 1 MiB (batches grow as load does). */
static void snapshot_prepare(struct consensus *c)
{
	if (c->ops.image == NULL || c->snap_asked || c->snap_in_flight)
		return;
	raft_index applying = raft_last_applied(&c->raft) + 1;
	const void *img;
	size_t len;
	if (c->snap_base_index == 0 || c->snap_base_index > applying) {
		if (c->ops.image(c->ops.data, &img, &len) != 0)
			return;
		c->snap_base_index = applying;
		c->snap_base_len = len;
		return;
	}
	raft_index since = c->raft.log.snapshot.last_index;
	raft_index due = since + c->raft.snapshot.threshold;
	if (applying < since || applying + prepare_margin(c) < due)
		return;
	if (c->ops.image(c->ops.data, &img, &len) != 0)
		return;
	double per_entry =
	    len > c->snap_base_len && applying > c->snap_base_index
	        ? (double)(len - c->snap_base_len) / (double)(applying - c->snap_base_index)
	        : 0;
	double want = (double)len + per_entry * (double)(due > applying ? due - applying : 0);
	c->snap_asked = 1;
	size_t cap = (size_t)(want * 1.2) + ((size_t)1 << 20);
	log_debug("consensus: preparing %zu bytes for the snapshot due at index %llu (image %zu "
	          "bytes at %llu)",
	          cap, (unsigned long long)due, len, (unsigned long long)applying);
	snapbuf_prepare(&c->snapbuf, cap);
}

/* The image copied into memory prepared for it (grown by realloc when the image outgrew
 * the guess), or allocated here when none was prepared: the copy raft writes from the
 * thread pool while later entries apply. *prepared: 0 none, 1 prepared, 2 grown. 1: the
 * FSM gives no image (its own snapshot op is the way), -1: no memory. */
static int snapshot_copy(struct consensus *c, void **data, size_t *len, int *prepared)
{
	const void *img;
	size_t cap = 0;
	if (c->ops.image == NULL || c->ops.image(c->ops.data, &img, len) != 0)
		return 1;
	void *buf = snapbuf_take(&c->snapbuf, &cap);
	*prepared = buf != NULL;
	if (buf != NULL && cap < *len) {
		void *grown = realloc(buf, *len);
		if (grown == NULL) {
			snapbuf_release(&c->snapbuf, buf);
			return -1;
		}
		buf = grown;
		*prepared = 2;
	}
	if (buf != NULL)
		c->stats.snapshots_prepared++;
	else if ((buf = malloc(*len > 0 ? *len : 1)) == NULL)
		return -1;
	if (*len > 0)
		memcpy(buf, img, *len);
	c->snap_own = buf;
	*data = buf;
	return 0;
}

/* A batch entry's commands are applied one by one, each result held; *result points at
 * the results array, which apply_cb hands out to the batch's callers. */
static int apply_batch(struct consensus *c, const void *const *payloads, const size_t *lens, int n,
                       void **result)
{
	/* batch_results has room for CODEC_BATCH_MAX (allocated by consensus_init) */
	if (c->ops.apply_batch_begin != NULL)
		c->ops.apply_batch_begin(c->ops.data);
	for (int i = 0; i < n; i++) {
		const void *r = c->ops.apply(c->ops.data, payloads[i], lens[i]);
		if (r != NULL && c->ops.result_hold != NULL)
			c->ops.result_hold(c->ops.data, r);
		c->batch_results[c->n_batch_results++] = r;
	}
	if (c->ops.apply_batch_end != NULL && c->ops.apply_batch_end(c->ops.data) != 0)
		c->on_fatal(c, "the state machine could not keep a batch entry it applied");
	*result = (void *)c->batch_results;
	return 0;
}

static int fsm_apply_entry(struct consensus *c, const struct raft_buffer *buf, void **result)
{
	const void *payloads[CODEC_BATCH_MAX];
	size_t lens[CODEC_BATCH_MAX];
	int n = 0, is_batch = 0;
	struct yard_err err = {0};
	c->stats.applies++;
	batch_results_release(c);
	if (codec_decode_entry(buf->base, buf->len, payloads, lens, CODEC_BATCH_MAX, &n, &is_batch,
	                       &err) != 0) {
		/* Returning non-zero would freeze a follower in RAFT_UNAVAILABLE forever
		 * (raft-probe.md §3); apply it as a no-op and say so. */
		c->stats.corrupt_entries++;
		log_error("consensus: entry %llu skipped: %s",
		          (unsigned long long)raft_last_applied(&c->raft) + 1, err.msg);
		*result = NULL;
		return 0;
	}
	c->stats.commands += (uint64_t)n;
	snapshot_prepare(c);
	if (is_batch)
		return apply_batch(c, payloads, lens, n, result);
	*result = (void *)c->ops.apply(c->ops.data, payloads[0], lens[0]);
	return 0;
}

static int fsm_apply_cb(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
	struct consensus *c = fsm->data;
	c->apply_start_ns = yard_now_mono_ns();
	int rv = fsm_apply_entry(c, buf, result);
	yard_hist_note(&c->stats.apply_ms, (double)(yard_now_mono_ns() - c->apply_start_ns) / 1e6);
	return rv;
}

static int fsm_snapshot_cb(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
	struct consensus *c = fsm->data;
	void *data;
	size_t len;
	int prepared = 0;
	uint64_t t0 = yard_now_mono_ns();
	int rc = snapshot_copy(c, &data, &len, &prepared);
	int own = rc == 0;
	if (rc == 1)
		rc = c->ops.snapshot(c->ops.data, &data, &len);
	c->snap_asked = 0;
	if (rc != 0)
		return RAFT_NOMEM;
	*bufs = raft_malloc(sizeof **bufs);
	if (*bufs == NULL) {
		snapshot_free(c, data);
		return RAFT_NOMEM;
	}
	(*bufs)[0].base = data;
	(*bufs)[0].len = len;
	*n_bufs = 1;
	c->snap_in_flight = 1;
	c->snap_base_index = raft_last_applied(&c->raft);
	c->snap_base_len = len;
	c->stats.snapshots++;
	c->stats.snapshot_last_us = (yard_now_mono_ns() - t0) / 1000;
	log_info("consensus: snapshot of %zu bytes at index %llu (%.1f ms on the loop%s)", len,
	         (unsigned long long)raft_last_applied(&c->raft),
	         (double)c->stats.snapshot_last_us / 1000,
	         !own            ? ""
	         : prepared == 0 ? ", into memory not prepared"
	         : prepared == 2 ? ", prepared memory grown"
	                         : "");
	return 0;
}

/* FSM v2: the snapshot memory is ours or SQLite's, so it goes back here, not to raft_free. */
static int fsm_snapshot_finalize_cb(struct raft_fsm *fsm, struct raft_buffer *bufs[],
                                    unsigned *n_bufs)
{
	struct consensus *c = fsm->data;
	if (*bufs != NULL) {
		for (unsigned i = 0; i < *n_bufs; i++)
			snapshot_free(c, (*bufs)[i].base);
		raft_free(*bufs);
	}
	c->snap_in_flight = 0;
	*bufs = NULL;
	*n_bufs = 0;
	return 0;
}

static int fsm_restore_cb(struct raft_fsm *fsm, struct raft_buffer *buf)
{
	struct consensus *c = fsm->data;
	uint64_t t0 = yard_now_mono_ns();
	int rc = c->ops.restore(c->ops.data, buf->base, buf->len);
	if (rc != 0) {
		log_error("consensus: snapshot restore of %zu bytes failed", buf->len);
		return RAFT_CORRUPT;
	}
	/* On success the FSM owns buf->base (raft-probe.md §3); we copied it. */
	raft_free(buf->base);
	if (c->started) {
		c->stats.restores++;
		log_info("consensus: installed a snapshot of %zu bytes from the leader (%.1f ms)",
		         buf->len, (double)(yard_now_mono_ns() - t0) / 1e6);
	}
	return 0;
}

/* ---- the request queue: nothing is issued from inside a raft callback ---- */

static void op_free(struct consensus_op *op)
{
	if (op->buf.base != NULL)
		raft_free(op->buf.base);
	free(op->payload);
	free(op->members);
	free(op);
}

/* For OP_BATCH, result is the array of the members' results (or NULL on failure). */
static void op_finish(struct consensus_op *op, int status, const char *msg, const void *result)
{
	if (op->kind == OP_ADD || op->kind == OP_ASSIGN || op->kind == OP_REMOVE)
		op->c->change_pending = 0;
	if (op->kind == OP_BATCH) {
		const void *const *results = result;
		for (int i = 0; i < op->n_members; i++) {
			const void *r = results != NULL ? results[i] : NULL;
			int st = status == 0 && r == NULL ? YARD_ECORRUPT : status;
			op_finish(op->members[i], st, msg, st == 0 ? r : NULL);
		}
	} else if (op->kind == OP_APPLY) {
		if (status == 0)
			yard_hist_note(&op->c->stats.commit_ms,
			               (double)(yard_now_mono_ns() - op->submit_ns) / 1e6);
		op->apply_cb(op->data, status, result);
	} else if (op->done_cb != NULL)
		op->done_cb(op->data, status, msg);
	op_free(op);
}

static void idle_cb(uv_idle_t *h);

static void enqueue(struct consensus *c, struct consensus_op *op)
{
	op->next = NULL;
	if (c->queue_tail != NULL)
		c->queue_tail->next = op;
	else
		c->queue_head = op;
	c->queue_tail = op;
	uv_idle_start(&c->idle, idle_cb);
}

static struct consensus_op *op_new(struct consensus *c, enum op_kind kind)
{
	struct consensus_op *op = calloc(1, sizeof *op);
	if (op != NULL) {
		op->c = c;
		op->kind = kind;
	}
	return op;
}

static void apply_cb(struct raft_apply *req, int status, void *result)
{
	struct consensus_op *op = req->data;
	const char *msg;
	int st = map_status(status, &msg);
	if (st == 0 && result == NULL)
		st = YARD_ECORRUPT;
	if (st == 0 && op->kind == OP_BATCH && op->c->n_batch_results != op->n_members)
		st = YARD_ECORRUPT; /* not the entry we proposed: cannot happen, never trust it */
	if (st == YARD_ECORRUPT)
		msg = "the committed entry did not decode";
	if (st == 0 && op->c->apply_start_ns > op->issue_ns) /* raft calls back after the apply */
		yard_hist_note(&op->c->stats.replicate_ms,
		               (double)(op->c->apply_start_ns - op->issue_ns) / 1e6);
	op_finish(op, st, msg, st == 0 ? result : NULL);
}

static void barrier_cb(struct raft_barrier *req, int status)
{
	struct consensus_op *op = req->data;
	const char *msg;
	int st = map_status(status, &msg);
	op_finish(op, st, msg, NULL);
}

static void change_cb(struct raft_change *req, int status)
{
	struct consensus_op *op = req->data;
	struct consensus *c = op->c;
	const char *msg;
	int st = map_status(status, &msg);
	if (st == 0 && op->kind == OP_ADD && op->voter && !c->closing) {
		/* Promote from the next loop iteration, never from inside this callback. */
		log_info("consensus: member %llu added as spare; catching it up before it votes",
		         (unsigned long long)op->id);
		op->kind = OP_ASSIGN;
		enqueue(c, op);
		return;
	}
	if (st == 0)
		log_info("consensus: membership change for member %llu done",
		         (unsigned long long)op->id);
	op_finish(op, st, msg, NULL);
}

static void transfer_cb(struct raft_transfer *req)
{
	struct consensus_op *op = req->data;
	raft_id leader = 0;
	const char *addr = NULL;
	char msg[128];
	raft_leader(&op->c->raft, &leader, &addr);
	if (leader == op->id) {
		log_info("consensus: leadership transferred to %llu", (unsigned long long)op->id);
		op_finish(op, 0, "transferred", NULL);
		return;
	}
	snprintf(msg, sizeof msg, "leadership did not move to member %llu (leader is now %llu)",
	         (unsigned long long)op->id, (unsigned long long)leader);
	op_finish(op, YARD_ETIMEDOUT, msg, NULL);
}

static void issue(struct consensus *c, struct consensus_op *op)
{
	const char *msg;
	int rv;
	if (c->closing) {
		op_finish(op, YARD_EABORTED, "controller shutting down", NULL);
		return;
	}
	/* Re-check: leadership may have changed since the request was queued. */
	if (c->state_fn(&c->raft) != RAFT_LEADER || (op->kind != OP_TRANSFER && !c->ready)) {
		op_finish(op, YARD_ENOTLEADER, "not the leader", NULL);
		return;
	}
	switch (op->kind) {
	case OP_APPLY:
	case OP_BATCH:
		op->req.apply.data = op;
		op->issue_ns = yard_now_mono_ns();
		rv = raft_apply(&c->raft, &op->req.apply, &op->buf, 1, apply_cb);
		if (rv == 0)
			op->buf.base = NULL; /* raft owns it now */
		break;
	case OP_BARRIER:
		op->req.barrier.data = op;
		rv = raft_barrier(&c->raft, &op->req.barrier, barrier_cb);
		break;
	case OP_ADD:
		op->req.change.data = op;
		rv = raft_add(&c->raft, &op->req.change, op->id, op->addr, change_cb);
		break;
	case OP_ASSIGN:
		op->req.change.data = op;
		rv = raft_assign(&c->raft, &op->req.change, op->id, RAFT_VOTER, change_cb);
		break;
	case OP_REMOVE:
		op->req.change.data = op;
		rv = raft_remove(&c->raft, &op->req.change, op->id, change_cb);
		break;
	case OP_TRANSFER:
		op->req.transfer.data = op;
		rv = raft_transfer(&c->raft, &op->req.transfer, op->id, transfer_cb);
		break;
	default:
		rv = RAFT_INVALID;
	}
	if (rv != 0) {
		int st = map_status(rv, &msg);
		op_finish(op, st, msg, NULL);
	}
}

/* Frames ops[0..n) (consecutive OP_APPLYs) as one entry and issues it: a version-1 frame
 * for one command, else a version-2 batch that owns the ops. */
static void issue_applies(struct consensus *c, struct consensus_op **ops, int n)
{
	const void *payloads[CODEC_BATCH_MAX];
	size_t lens[CODEC_BATCH_MAX];
	struct consensus_op *op = ops[0];
	if (n > 1) {
		op = op_new(c, OP_BATCH);
		struct consensus_op **members = op ? malloc((size_t)n * sizeof *members) : NULL;
		if (members == NULL) {
			free(op);
			for (int i = 0; i < n; i++)
				op_finish(ops[i], YARD_ENOMEM, "out of memory for a batch", NULL);
			return;
		}
		memcpy(members, ops, (size_t)n * sizeof *members);
		op->members = members;
		op->n_members = n;
		for (int i = 0; i < n; i++) {
			payloads[i] = ops[i]->payload;
			lens[i] = ops[i]->len;
		}
		op->buf.len = codec_batch_len(lens, n);
	} else {
		op->buf.len = codec_frame_len(op->len);
	}
	op->buf.base = raft_malloc(op->buf.len);
	if (op->buf.base == NULL) {
		op_finish(op, YARD_ENOMEM, "out of memory for a raft entry", NULL);
		return;
	}
	if (n > 1) {
		codec_batch_encode(op->buf.base, payloads, lens, n);
		c->stats.batches_sent++;
		c->stats.batched_commands += (uint64_t)n;
	} else {
		codec_encode(op->buf.base, op->payload, op->len);
	}
	issue(c, op);
}

/* Issues what was queued: consecutive applies packed into batch entries. */
static void issue_queued(struct consensus *c)
{
	struct consensus_op *op = c->queue_head;
	struct consensus_op *group[CODEC_BATCH_MAX];
	int n_group = 0;
	size_t group_bytes = 0;
	unsigned batch_max = c->cfg.batch_max < 1                 ? 1
	                     : c->cfg.batch_max > CODEC_BATCH_MAX ? CODEC_BATCH_MAX
	                                                          : c->cfg.batch_max;
	if (c->ops.result_hold == NULL || c->ops.result_release == NULL)
		batch_max = 1;
	uv_idle_stop(&c->idle);
	c->queue_head = c->queue_tail = NULL;
	/* Only what was queued before this pass: callbacks may queue more for the next one.
	 * Consecutive applies are packed, in order; anything else keeps its place. */
	while (op != NULL) {
		struct consensus_op *next = op->next;
		if (op->kind == OP_APPLY) {
			if (n_group > 0 && ((unsigned)n_group == batch_max ||
			                    group_bytes + op->len > c->cfg.batch_max_bytes)) {
				issue_applies(c, group, n_group);
				n_group = 0;
				group_bytes = 0;
			}
			group[n_group++] = op;
			group_bytes += op->len;
		} else {
			if (n_group > 0)
				issue_applies(c, group, n_group);
			n_group = 0;
			group_bytes = 0;
			issue(c, op);
		}
		op = next;
	}
	if (n_group > 0)
		issue_applies(c, group, n_group);
}

static void idle_cb(uv_idle_t *h)
{
	struct consensus *c = CONSENSUS_OF(h, idle);
	if (c->closing)
		return; /* active only to keep poll from blocking until check_cb closes raft */
	issue_queued(c);
}

void consensus_flush(struct consensus *c)
{
	if (!c->closing && c->queue_head != NULL)
		issue_queued(c);
}

/* ---- state polling, watchdog, the leader's first barrier ---- */

static void ready_barrier_cb(struct raft_barrier *req, int status)
{
	struct consensus *c = CONSENSUS_OF(req, ready_barrier);
	c->barrier_pending = 0;
	if (c->closing)
		return;
	if (status == 0 && c->state_fn(&c->raft) == RAFT_LEADER &&
	    c->raft.current_term == c->leader_term) {
		c->ready = 1;
		/* req->index: in 0.15 raft_last_applied() still lags by one inside callbacks */
		c->stats.leader_ready_index = req->index;
		log_info("consensus: leader for term %llu, ready at index %llu",
		         (unsigned long long)c->leader_term,
		         (unsigned long long)c->stats.leader_ready_index);
		if (c->cfg.on_leader_up != NULL)
			c->cfg.on_leader_up(c, c->cfg.cb_data);
	} else if (c->state_fn(&c->raft) == RAFT_LEADER) {
		c->barrier_wanted = 1; /* from the next poll, not from here */
	}
}

static void default_fatal(struct consensus *c, const char *why)
{
	log_error("consensus: %s; exiting so a supervisor restarts this member", why);
	exit(1);
}

static void raft_closed(struct raft *r);

/* raft_close, issued from the check phase only. raft_uv (0.15) closes the open segment's
 * writer (loop handles, closed in the loop's closing phase) and finalizes the segment (thread
 * pool) on raft_close, and fires its close callback once the finalize is reported, without
 * waiting for the writer (canonical/raft#341). Were a poll phase to report the finalize
 * before that closing phase, raft_closed would free raft_uv and the writer's close would
 * then run on freed memory: raft's close callback a second time, a double free or SIGSEGV.
 * After the check phase comes the closing phase, before any poll: the writer closes first. */
static void close_raft(struct consensus *c)
{
	uv_idle_stop(&c->idle);
	uv_check_stop(&c->check);
	raft_close(&c->raft, raft_closed);
}

/* The election timer raft is running now. raft 0.15's raft_set_election_timeout only sets
 * the base for later draws, so the current draw (a public field of struct raft, shared by
 * the follower and candidate states) is set here too. */
static void set_current_election_timeout(struct consensus *c, unsigned ms)
{
	int state = c->state_fn(&c->raft);
	if (state == RAFT_FOLLOWER)
		c->raft.follower_state.randomized_election_timeout = ms;
	else if (state == RAFT_CANDIDATE)
		c->raft.candidate_state.randomized_election_timeout = ms;
}

/* A follower polls the TCP state of its connection to the leader: the leader's end closed
 * (FIN or reset) means its process most likely died. An election timeout of half a
 * heartbeat, for the current timer and for a candidate's retries, starts the pre-vote at
 * raft's next tick; both followers see the close, so neither keeps refusing votes because
 * it still believes in the old leader. */
static void leader_watch_cb(uv_timer_t *h)
{
	struct consensus *c = CONSENSUS_OF(h, leader_watch);
	raft_id leader = 0;
	const char *addr = NULL;
	if (c->closing || !c->started || c->fast_election || c->state_fn(&c->raft) != RAFT_FOLLOWER)
		return;
	raft_leader(&c->raft, &leader, &addr);
	if (leader == 0 || !c->peer_closed_fn(&c->transport, leader))
		return;
	c->stats.leader_conn_lost++;
	unsigned fast = c->cfg.heartbeat_ms / 2 > 0 ? c->cfg.heartbeat_ms / 2 : 1;
	log_info("consensus: leader %llu closed its connection; election timeout %u ms until a "
	         "leader is heard from",
	         (unsigned long long)leader, fast);
	c->fast_election = 1;
	c->fast_since_ms = yard_now_mono_ms();
	c->fast_timer_start = c->raft.election_timer_start;
	raft_set_election_timeout(&c->raft, fast);
	set_current_election_timeout(c, fast);
}

/* Back to the configured election timeout once a leader has been heard from since the fast
 * election began (a new one, or the old one after all), on becoming leader (a leader's
 * election timeout is its check-quorum period), or when two election timeouts passed. A
 * follower's running timer is redrawn from the configured range, as raft would. */
static void fast_election_check(struct consensus *c, int state, raft_id leader)
{
	int heard = state == RAFT_FOLLOWER && leader != 0 &&
	            c->raft.election_timer_start != c->fast_timer_start;
	uint64_t since = yard_now_mono_ms() - c->fast_since_ms;
	unsigned base = c->cfg.election_timeout_ms;
	if (state != RAFT_LEADER && !heard && since < 2ull * base)
		return;
	c->fast_election = 0;
	c->fast_ended = state == RAFT_LEADER ? "leading" : heard ? "leader heard" : "no leader yet";
	raft_set_election_timeout(&c->raft, base);
	set_current_election_timeout(c, base + (unsigned)random() % (base > 0 ? base : 1));
	log_info("consensus: election timeout back to %u ms (%s, %llu ms after the leader's "
	         "connection closed)",
	         base, c->fast_ended, (unsigned long long)since);
}

/* How long a closing member waits for its log writes in flight before raft_close. */
#define CLOSE_WRITES_WAIT_MS 2000

/* Whether raft_close may be issued now: no entry is being written (raft has stored every
 * entry of its log). A write in flight goes through the thread pool when the kernel
 * declines a non-blocking one, and raft_uv 0.15 then closes the open segment's writer only
 * after that write has finished, while the segment's finalize (also the thread pool) may
 * finish first and fire raft's close callback: raft_closed frees raft_uv, and the writer's
 * close then calls into the freed memory (SIGSEGV in raft's io close callback; seen in
 * test_consensus when two members closed while entries reached them: 2 runs of 180 on a
 * loaded machine). Past CLOSE_WRITES_WAIT_MS (a disk that stopped answering) it closes
 * anyway. */
static int close_may_start(struct consensus *c)
{
	if (raft_last_index(&c->raft) <= c->raft.last_stored)
		return 1;
	if (yard_now_mono_ms() < c->close_until_ms)
		return 0;
	log_warn("consensus: closing with log writes still in flight after %d ms (stored up to "
	         "%llu of %llu)",
	         CLOSE_WRITES_WAIT_MS, (unsigned long long)c->raft.last_stored,
	         (unsigned long long)raft_last_index(&c->raft));
	return 1;
}

static void check_cb(uv_check_t *h)
{
	struct consensus *c = CONSENSUS_OF(h, check);
	if (c->closing) {
		if (close_may_start(c)) {
			close_raft(c);
		} else {
			/* the write's completion wakes the loop (raft's timer does too): no spin */
			uv_idle_stop(&c->idle);
		}
		return;
	}
	if (!c->started)
		return;
	int state = c->state_fn(&c->raft);
	if (state == RAFT_UNAVAILABLE) {
		char why[384];
		snprintf(why, sizeof why, "raft member %llu became unavailable (%s)",
		         (unsigned long long)c->cfg.id, raft_errmsg(&c->raft));
		c->on_fatal(c, why);
		return;
	}
	raft_id leader = 0;
	const char *addr = NULL;
	raft_leader(&c->raft, &leader, &addr);
	if (c->fast_election)
		fast_election_check(c, state, leader);
	if (leader != c->known_leader) {
		uint64_t term = c->raft.current_term;
		if (leader != 0 && leader == c->last_leader && term == c->last_leader_term) {
			/* its election timer ran out (a stalled loop, a slow link), then the same
			 * leader's messages came again: no election took place */
			c->stats.leader_regained++;
			log_info("consensus: heard from leader %llu again (term %llu, no election)",
			         (unsigned long long)leader, (unsigned long long)term);
		} else if (leader != 0) {
			c->stats.leader_changes++;
			log_info("consensus: leader is now %llu (%s, term %llu)",
			         (unsigned long long)leader, addr, (unsigned long long)term);
		}
		if (leader != 0) {
			c->last_leader = leader;
			c->last_leader_term = term;
		}
		c->known_leader = leader;
	}
	if (leader != 0) {
		c->leaderless_since_ms = c->leaderless_warned_ms = 0;
	} else {
		uint64_t now = yard_now_mono_ms();
		if (c->leaderless_since_ms == 0)
			c->leaderless_since_ms = now;
		if (now - c->leaderless_since_ms >= CONSENSUS_LEADERLESS_WARN_MS &&
		    (c->leaderless_warned_ms == 0 || now - c->leaderless_warned_ms >= 60000)) {
			c->leaderless_warned_ms = now;
			log_warn(
			    "consensus: no leader for %.0f s (this member: %s, term %llu): a "
			    "majority of the voters must answer to elect one; if it is lost for "
			    "good, see README, \"Replacing a member, and losing a majority of the "
			    "controllers\"",
			    (double)(now - c->leaderless_since_ms) / 1000,
			    state == RAFT_CANDIDATE ? "a candidate" : "a follower",
			    (unsigned long long)c->raft.current_term);
		}
	}
	if (state == RAFT_LEADER) {
		if (!c->leader_seen || c->leader_term != c->raft.current_term) {
			c->leader_seen = 1;
			c->leader_term = c->raft.current_term;
			c->ready = 0;
			c->stats.elected_index = raft_last_index(&c->raft);
			memset(c->contact, 0, sizeof c->contact);
			c->barrier_wanted = 1;
		}
		if (c->barrier_wanted && !c->barrier_pending) {
			int rv = raft_barrier(&c->raft, &c->ready_barrier, ready_barrier_cb);
			if (rv == 0) {
				c->barrier_pending = 1;
				c->barrier_wanted = 0;
			}
		}
	} else if (c->leader_seen) {
		c->leader_seen = 0;
		if (c->ready) {
			c->ready = 0;
			log_info("consensus: no longer leader (term %llu)",
			         (unsigned long long)c->raft.current_term);
			if (c->cfg.on_leader_down != NULL)
				c->cfg.on_leader_down(c, c->cfg.cb_data);
		}
	}
}

static void contact_note(struct consensus *c, uint64_t id, uint64_t now_ms)
{
	int free_slot = -1;
	for (int i = 0; i < CONSENSUS_MAX_MEMBERS; i++) {
		if (c->contact[i].id == id) {
			c->contact[i].last_contact_ms = now_ms;
			return;
		}
		if (c->contact[i].id == 0 && free_slot < 0)
			free_slot = i;
	}
	if (free_slot >= 0) {
		c->contact[free_slot].id = id;
		c->contact[free_slot].last_contact_ms = now_ms;
	}
}

/* raft resets recent_recv once per election timeout; sampling it every heartbeat tells
 * which followers answered lately. */
static void sample_contacts(struct consensus *c)
{
	if (c->closing || c->state_fn(&c->raft) != RAFT_LEADER ||
	    c->raft.leader_state.progress == NULL)
		return;
	uint64_t now = yard_now_mono_ms();
	for (unsigned i = 0; i < c->raft.configuration.n; i++) {
		uint64_t id = c->raft.configuration.servers[i].id;
		if (id != c->cfg.id && c->raft.leader_state.progress[i].recent_recv)
			contact_note(c, id, now);
	}
}

static void health_cb(uv_timer_t *h)
{
	sample_contacts(CONSENSUS_OF(h, health));
}

int consensus_member_healthy(struct consensus *c, uint64_t id)
{
	if (id == c->cfg.id)
		return 1;
	/* Sampled now as well: a leader asked within a heartbeat of its election has answers
	 * from the followers that elected it but no sample of them yet (a transfer request then
	 * found "no healthy voter"). */
	sample_contacts(c);
	uint64_t now = yard_now_mono_ms();
	for (int i = 0; i < CONSENSUS_MAX_MEMBERS; i++)
		if (c->contact[i].id == id && c->contact[i].last_contact_ms != 0)
			return now - c->contact[i].last_contact_ms <=
			       2ull * c->cfg.election_timeout_ms;
	return 0;
}

int consensus_member_progress(struct consensus *c, uint64_t id, uint64_t *behind, int *healthy)
{
	if (c->closing || c->state_fn(&c->raft) != RAFT_LEADER ||
	    c->raft.leader_state.progress == NULL)
		return -1;
	uint64_t last = raft_last_index(&c->raft);
	for (unsigned i = 0; i < c->raft.configuration.n; i++) {
		if (c->raft.configuration.servers[i].id != id)
			continue;
		uint64_t match =
		    id == c->cfg.id ? last : c->raft.leader_state.progress[i].match_index;
		*behind = match < last ? last - match : 0;
		*healthy = consensus_member_healthy(c, id);
		return 0;
	}
	return -1;
}

uint64_t consensus_pick_transfer_target(const struct consensus_candidate *cands, int n,
                                        uint64_t self)
{
	const struct consensus_candidate *best = NULL;
	for (int i = 0; i < n; i++) {
		const struct consensus_candidate *x = &cands[i];
		if (x->id == self || !x->voter || !x->healthy)
			continue;
		if (best == NULL || x->match_index > best->match_index ||
		    (x->match_index == best->match_index && x->id < best->id))
			best = x;
	}
	return best ? best->id : 0;
}

static uint64_t pick_target(struct consensus *c)
{
	struct consensus_candidate cands[CONSENSUS_MAX_MEMBERS];
	int n = 0;
	if (c->raft.leader_state.progress == NULL)
		return 0;
	for (unsigned i = 0; i < c->raft.configuration.n && n < CONSENSUS_MAX_MEMBERS; i++) {
		const struct raft_server *s = &c->raft.configuration.servers[i];
		cands[n].id = s->id;
		cands[n].voter = s->role == RAFT_VOTER;
		cands[n].healthy = consensus_member_healthy(c, s->id);
		cands[n].match_index = c->raft.leader_state.progress[i].match_index;
		n++;
	}
	return consensus_pick_transfer_target(cands, n, c->cfg.id);
}

/* ---- lifecycle ---- */

/* The newest snapshot data file in dir (snapshot-TERM-INDEX-TIME, not .meta) into name; 0 when
 * there is one. */
static int newest_snapshot(const char *dir, char *name, size_t len)
{
	DIR *d = opendir(dir);
	unsigned long long best = 0;
	int found = 0;
	struct dirent *e;
	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		unsigned long long term, index, stamp;
		int end = 0;
		if (sscanf(e->d_name, "snapshot-%llu-%llu-%llu%n", &term, &index, &stamp, &end) ==
		        3 &&
		    e->d_name[end] == '\0' && (!found || index >= best)) {
			best = index;
			found = 1;
			snprintf(name, len, "%s", e->d_name);
		}
	}
	closedir(d);
	return found ? 0 : -1;
}

/* What to tell an operator whose member did not start: raft 0.15 says only "I/O error" when
 * the raft address is taken, and names no file when a snapshot does not decompress. */
static void start_failure_hint(struct consensus *c, const char *why, char *hint, size_t len)
{
	char snap[128];
	hint[0] = '\0';
	if (strstr(why, "checksum") != NULL || strstr(why, "LZ4F") != NULL ||
	    strstr(why, "corrupt") != NULL || strstr(why, "load closed segment") != NULL) {
		int named = strstr(why, "LZ4F") != NULL &&
		            newest_snapshot(c->data_dir, snap, sizeof snap) == 0;
		snprintf(
		    hint, len,
		    "%s%s%s: this member's raft state is damaged; replace it (yardctl cluster "
		    "remove %llu, then add it back with an empty data dir; README, \"Replacing a "
		    "member\")",
		    named ? " (in the newest snapshot, " : "", named ? snap : "", named ? ")" : "",
		    (unsigned long long)c->cfg.id);
		return;
	}
	if (strcmp(why, raft_strerror(RAFT_IOERR)) != 0)
		return;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char host[32];
	int port = 0;
	if (yard_addr_parse(c->raft_address, host, sizeof host, &port) == 0 &&
	    inet_pton(AF_INET, host, &sa.sin_addr) == 1) {
		sa.sin_port = htons((uint16_t)port);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int in_use = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 &&
		             errno == EADDRINUSE;
		if (fd >= 0)
			close(fd);
		if (in_use) {
			snprintf(hint, len, ": the raft address %s is in use by another process",
			         c->raft_address);
			return;
		}
	}
	snprintf(hint, len, " (the data dir not writable?)");
}

/* raft's message for the last failure, or the code's name when raft left it empty (raft_start
 * of raft_uv 0.15 does for some listen and I/O failures). */
static const char *raft_reason(struct raft *r, int rv)
{
	const char *msg = raft_errmsg(r);
	return msg != NULL && msg[0] != '\0' ? msg : raft_strerror(rv);
}

/* libraft 0.15 answers an AppendEntries whose entries it was still writing when a step-down
 * cleared its leader: the result goes to server id 0 at address NULL, and raft_uv crashes on
 * strlen(NULL) while looking up a connection to it (canonical/raft#350; seen here as a
 * follower's SIGSEGV under leader churn). A message to no server is refused instead: raft
 * drops a send that fails, as it does one to an unreachable peer, and the leader, if any,
 * re-sends the entries. */
int consensus_guarded_send(struct raft_io *io, struct raft_io_send *req,
                           const struct raft_message *message, raft_io_send_cb cb)
{
	struct consensus *c = (struct consensus *)((char *)io - offsetof(struct consensus, io));
	if (message->server_id == 0 || message->server_address == NULL) {
		c->stats.sends_to_nobody++;
		return RAFT_NOCONNECTION;
	}
	if (c->closing) /* leaving: its writes may finish (check_cb), it takes no more part */
		return RAFT_NOCONNECTION;
	return c->uv_send(io, req, message, cb);
}

int consensus_init(struct consensus *c, uv_loop_t *loop, const struct consensus_config *cfg,
                   const struct consensus_fsm_ops *ops, struct yard_err *err)
{
	int rv;
	memset(c, 0, sizeof *c);
	snapbuf_init(&c->snapbuf);
	c->loop = loop;
	c->cfg = *cfg;
	c->ops = *ops;
	c->state_fn = raft_state;
	c->peer_closed_fn = nodelay_transport_peer_closed;
	c->on_fatal = default_fatal;
	snprintf(c->data_dir, sizeof c->data_dir, "%s", cfg->data_dir);
	snprintf(c->raft_address, sizeof c->raft_address, "%s", cfg->raft_address);
	c->cfg.data_dir = c->data_dir;
	c->cfg.raft_address = c->raft_address;
	c->cfg.members = NULL;

	if ((rv = nodelay_transport_init(&c->transport, loop)) != 0)
		return yard_err_set(err, YARD_EIO, "raft transport: %s", raft_strerror(rv));
	if ((rv = raft_uv_init(&c->io, loop, c->data_dir, &c->transport.super)) != 0)
		return yard_err_set(err, YARD_EIO, "raft storage in %s: %s", c->data_dir,
		                    c->io.errmsg);
	raft_uv_set_connect_retry_delay(&c->io, cfg->connect_retry_ms);
	c->uv_send = c->io.send;
	c->io.send = consensus_guarded_send;

	c->fsm.version = 2;
	c->fsm.data = c;
	c->fsm.apply = fsm_apply_cb;
	c->fsm.snapshot = fsm_snapshot_cb;
	c->fsm.snapshot_finalize = fsm_snapshot_finalize_cb;
	c->fsm.restore = fsm_restore_cb;
	if ((rv = raft_init(&c->raft, &c->io, &c->fsm, cfg->id, c->raft_address)) != 0)
		return yard_err_set(err, YARD_EIO, "raft init: %s", raft_errmsg(&c->raft));

	if (!cfg->join) {
		struct raft_configuration conf;
		raft_configuration_init(&conf);
		for (int i = 0; i < cfg->n_members; i++) {
			rv = raft_configuration_add(&conf, cfg->members[i].id,
			                            cfg->members[i].raft_address, RAFT_VOTER);
			if (rv != 0) {
				raft_configuration_close(&conf);
				return yard_err_set(err, YARD_EINVAL, "member %llu (%s): %s",
				                    (unsigned long long)cfg->members[i].id,
				                    cfg->members[i].raft_address,
				                    raft_strerror(rv));
			}
		}
		rv = raft_bootstrap(&c->raft, &conf);
		raft_configuration_close(&conf);
		if (rv != 0 && rv != RAFT_CANTBOOTSTRAP)
			return yard_err_set(err, YARD_EIO, "raft bootstrap in %s: %s", c->data_dir,
			                    raft_reason(&c->raft, rv));
	}
	raft_set_election_timeout(&c->raft, cfg->election_timeout_ms);
	raft_set_heartbeat_timeout(&c->raft, cfg->heartbeat_ms);
	raft_set_pre_vote(&c->raft, true);
	raft_set_snapshot_threshold(&c->raft, consensus_snapshot_threshold(cfg));
	raft_set_snapshot_trailing(&c->raft, cfg->snapshot_trailing);

	c->batch_results = calloc(CODEC_BATCH_MAX, sizeof *c->batch_results);
	if (c->batch_results == NULL)
		return yard_err_set(err, YARD_ENOMEM, "no memory for batch results");
	uv_check_init(loop, &c->check);
	uv_idle_init(loop, &c->idle);
	uv_timer_init(loop, &c->health);
	uv_timer_init(loop, &c->leader_watch);
	c->handles_open = 4;
	if ((rv = raft_start(&c->raft)) != 0) {
		char hint[512];
		const char *why = raft_reason(&c->raft, rv);
		start_failure_hint(c, why, hint, sizeof hint);
		return yard_err_set(err, YARD_EIO, "raft start in %s (raft address %s): %s%s",
		                    c->data_dir, c->raft_address, why, hint);
	}
	c->started = 1;
	/* raft listens at --raft-address but the others dial the address in the configuration:
	 * a member restarted at another address would be cut off, silently */
	for (unsigned i = 0; i < c->raft.configuration.n; i++) {
		const struct raft_server *srv = &c->raft.configuration.servers[i];
		if (srv->id == cfg->id && strcmp(srv->address, c->raft_address) != 0)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "--raft-address %s: the raft configuration in %s has member %llu at "
			    "%s, "
			    "where the other members reach it (start it there, or move it: "
			    "yardctl cluster remove %llu, then add it back with a new data dir)",
			    c->raft_address, c->data_dir, (unsigned long long)cfg->id, srv->address,
			    (unsigned long long)cfg->id);
	}
	uv_check_start(&c->check, check_cb);
	uv_timer_start(&c->health, health_cb, cfg->heartbeat_ms, cfg->heartbeat_ms);
	{
		unsigned every = cfg->heartbeat_ms / 4 > 0 ? cfg->heartbeat_ms / 4 : 1;
		uv_timer_start(&c->leader_watch, leader_watch_cb, every, every);
	}
	log_info(
	    "consensus: member %llu at %s started (election %u ms, heartbeat %u ms, pre-vote on)",
	    (unsigned long long)cfg->id, c->raft_address, cfg->election_timeout_ms,
	    cfg->heartbeat_ms);
	return 0;
}

static void handle_closed(uv_handle_t *h)
{
	struct consensus *c = h->data;
	if (--c->handles_open > 0)
		return;
	snapbuf_release(&c->snapbuf, c->snap_own); /* raft never finalized it */
	c->snap_own = NULL;
	snapbuf_destroy(&c->snapbuf);
	if (c->close_cb != NULL)
		c->close_cb(c);
}

static void raft_closed(struct raft *r)
{
	struct consensus *c = CONSENSUS_OF(r, raft);
	batch_results_release(c);
	free(c->batch_results);
	c->batch_results = NULL;
	raft_uv_close(&c->io);
	nodelay_transport_close(&c->transport);
	c->check.data = c->idle.data = c->health.data = c->leader_watch.data = c;
	uv_close((uv_handle_t *)&c->check, handle_closed);
	uv_close((uv_handle_t *)&c->idle, handle_closed);
	uv_close((uv_handle_t *)&c->health, handle_closed);
	uv_close((uv_handle_t *)&c->leader_watch, handle_closed);
}

void consensus_close(struct consensus *c, void (*cb)(struct consensus *c))
{
	if (c->closing)
		return;
	c->closing = 1;
	c->close_cb = cb;
	c->close_until_ms = yard_now_mono_ms() + CLOSE_WRITES_WAIT_MS;
	struct consensus_op *op = c->queue_head;
	c->queue_head = c->queue_tail = NULL;
	while (op != NULL) {
		struct consensus_op *next = op->next;
		op_finish(op, YARD_EABORTED, "controller shutting down", NULL);
		op = next;
	}
	uv_timer_stop(&c->health);
	uv_timer_stop(&c->leader_watch);
	if (!c->started) { /* raft_start failed: no segment, nothing in the thread pool */
		close_raft(c);
		return;
	}
	/* check_cb issues raft_close (see close_raft); the idle handle keeps the loop from
	 * blocking in poll until then */
	uv_idle_start(&c->idle, idle_cb);
}

struct shutdown_ctx {
	struct consensus *c;
	void (*cb)(struct consensus *c);
};

static void shutdown_transferred(void *data, int status, const char *msg)
{
	struct shutdown_ctx *s = data;
	struct consensus *c = s->c;
	void (*cb)(struct consensus * c) = s->cb;
	free(s);
	if (status != 0)
		log_warn("consensus: handing over leadership before shutdown failed: %s", msg);
	consensus_close(c, cb);
}

void consensus_shutdown(struct consensus *c, void (*cb)(struct consensus *c))
{
	struct yard_err err = {0};
	struct shutdown_ctx *s = calloc(1, sizeof *s);
	if (s != NULL && c->state_fn(&c->raft) == RAFT_LEADER && pick_target(c) != 0) {
		s->c = c;
		s->cb = cb;
		if (consensus_transfer(c, 0, shutdown_transferred, s, &err) == 0) {
			log_info("consensus: shutting down: handing leadership over first");
			return;
		}
		log_warn("consensus: no leadership handover before shutdown: %s", err.msg);
	}
	free(s);
	consensus_close(c, cb);
}

/* ---- requests ---- */

static int refuse_unless_leader(struct consensus *c, struct yard_err *err)
{
	if (c->closing)
		return yard_err_set(err, YARD_EABORTED, "controller shutting down");
	if (c->state_fn(&c->raft) != RAFT_LEADER)
		return yard_err_set(err, YARD_ENOTLEADER, "not the leader");
	if (!c->ready)
		return yard_err_set(err, YARD_ENOTLEADER,
		                    "leader elected but not ready yet (barrier pending)");
	return 0;
}

/* The free-space floor for writes. statvfs is asked again after SPACE_RECHECK_MS, and on
 * every write while the last answer was under twice the floor (a syscall per write was about
 * 1 % of a busy leader's CPU); what a leader writes in that time is far below any floor. */
#define SPACE_RECHECK_MS 100

static int check_space(struct consensus *c, struct yard_err *err)
{
	uint64_t min = c->cfg.min_free_mb, now = yard_now_mono_ms();
	if (min == 0)
		return 0;
	if (c->space_at_ms == 0 || now - c->space_at_ms >= SPACE_RECHECK_MS ||
	    c->space_free_mb / 2 < min) {
		uint64_t free_mb = 0;
		int rc = datadir_free_mb(c->data_dir, &free_mb, err);
		if (rc != 0)
			return rc;
		c->space_free_mb = free_mb;
		c->space_at_ms = now ? now : 1;
	}
	return datadir_refuse_below(c->data_dir, c->space_free_mb, min, err);
}

int consensus_submit(struct consensus *c, const void *payload, size_t len, consensus_apply_cb cb,
                     void *data, struct yard_err *err)
{
	int rc = refuse_unless_leader(c, err);
	if (rc != 0)
		return rc;
	if ((rc = check_space(c, err)) != 0)
		return rc;
	if (len > CODEC_MAX_PAYLOAD)
		return yard_err_set(err, YARD_EINVAL,
		                    "command of %zu bytes is over the %u-byte limit", len,
		                    CODEC_MAX_PAYLOAD);
	struct consensus_op *op = op_new(c, OP_APPLY);
	if (op == NULL)
		return yard_err_set(err, YARD_ENOMEM, "out of memory");
	op->payload = malloc(len ? len : 1);
	if (op->payload == NULL) {
		free(op);
		return yard_err_set(err, YARD_ENOMEM, "out of memory for a %zu-byte command", len);
	}
	memcpy(op->payload, payload, len);
	op->len = len;
	op->submit_ns = yard_now_mono_ns();
	op->apply_cb = cb;
	op->data = data;
	enqueue(c, op);
	return 0;
}

int consensus_barrier(struct consensus *c, consensus_done_cb cb, void *data, struct yard_err *err)
{
	int rc = refuse_unless_leader(c, err);
	if (rc != 0)
		return rc;
	struct consensus_op *op = op_new(c, OP_BARRIER);
	if (op == NULL)
		return yard_err_set(err, YARD_ENOMEM, "out of memory");
	op->done_cb = cb;
	op->data = data;
	enqueue(c, op);
	return 0;
}

static int queue_change(struct consensus *c, enum op_kind kind, uint64_t id, const char *addr,
                        int voter, consensus_done_cb cb, void *data, struct yard_err *err)
{
	int rc = refuse_unless_leader(c, err);
	if (rc != 0)
		return rc;
	if ((rc = check_space(c, err)) != 0)
		return rc;
	if (c->change_pending || c->raft.leader_state.change != NULL)
		return yard_err_set(err, YARD_EBUSY, "a membership change is already in progress");
	struct consensus_op *op = op_new(c, kind);
	if (op == NULL)
		return yard_err_set(err, YARD_ENOMEM, "out of memory");
	op->id = id;
	if (addr != NULL)
		snprintf(op->addr, sizeof op->addr, "%s", addr);
	op->voter = voter;
	op->done_cb = cb;
	op->data = data;
	c->change_pending = 1;
	enqueue(c, op);
	return 0;
}

int consensus_add(struct consensus *c, uint64_t id, const char *raft_address, int voter,
                  consensus_done_cb cb, void *data, struct yard_err *err)
{
	if (id == 0 || raft_address == NULL || strlen(raft_address) >= CONSENSUS_ADDR_MAX ||
	    yard_addr_parse(raft_address, NULL, 0, NULL) != 0)
		return yard_err_set(err, YARD_EINVAL,
		                    "member %llu: id must be > 0 and an address a.b.c.d:port",
		                    (unsigned long long)id);
	for (unsigned i = 0; i < c->raft.configuration.n; i++) {
		if (c->raft.configuration.servers[i].id == id)
			return yard_err_set(err, YARD_EEXIST,
			                    "member %llu is already in the configuration",
			                    (unsigned long long)id);
		if (strcmp(c->raft.configuration.servers[i].address, raft_address) == 0)
			return yard_err_set(
			    err, YARD_EEXIST, "address %s is already used by member %llu",
			    raft_address, (unsigned long long)c->raft.configuration.servers[i].id);
	}
	return queue_change(c, OP_ADD, id, raft_address, voter, cb, data, err);
}

int consensus_remove(struct consensus *c, uint64_t id, consensus_done_cb cb, void *data,
                     struct yard_err *err)
{
	int found = 0;
	for (unsigned i = 0; i < c->raft.configuration.n; i++)
		found |= c->raft.configuration.servers[i].id == id;
	if (!found)
		return yard_err_set(err, YARD_ENOTFOUND, "member %llu is not in the configuration",
		                    (unsigned long long)id);
	if (id == c->cfg.id)
		return yard_err_set(
		    err, YARD_EBUSY,
		    "member %llu is the leader: transfer leadership first, then remove it",
		    (unsigned long long)id);
	return queue_change(c, OP_REMOVE, id, NULL, 0, cb, data, err);
}

int consensus_transfer(struct consensus *c, uint64_t id, consensus_done_cb cb, void *data,
                       struct yard_err *err)
{
	int rc = refuse_unless_leader(c, err);
	if (rc != 0)
		return rc;
	if (c->raft.transfer != NULL)
		return yard_err_set(err, YARD_EBUSY,
		                    "a leadership transfer is already in progress");
	if (id == 0) {
		id = pick_target(c);
		if (id == 0)
			return yard_err_set(err, YARD_EBUSY,
			                    "no healthy voter to transfer leadership to");
	} else {
		int voter = -1;
		for (unsigned i = 0; i < c->raft.configuration.n; i++)
			if (c->raft.configuration.servers[i].id == id)
				voter = c->raft.configuration.servers[i].role == RAFT_VOTER;
		if (voter != 1)
			return yard_err_set(err, YARD_EINVAL, "member %llu is not a voter",
			                    (unsigned long long)id);
		if (id == c->cfg.id)
			return yard_err_set(err, YARD_EINVAL, "member %llu already leads",
			                    (unsigned long long)id);
		if (!consensus_member_healthy(c, id))
			return yard_err_set(err, YARD_EBUSY,
			                    "member %llu has not answered within %u ms",
			                    (unsigned long long)id, 2 * c->cfg.election_timeout_ms);
	}
	struct consensus_op *op = op_new(c, OP_TRANSFER);
	if (op == NULL)
		return yard_err_set(err, YARD_ENOMEM, "out of memory");
	op->id = id;
	op->done_cb = cb;
	op->data = data;
	enqueue(c, op);
	return 0;
}

/* ---- state ---- */

int consensus_state(struct consensus *c)
{
	return c->state_fn(&c->raft);
}

uint64_t consensus_leaderless_ms(struct consensus *c)
{
	return c->leaderless_since_ms == 0 ? 0 : yard_now_mono_ms() - c->leaderless_since_ms;
}

int consensus_is_ready(struct consensus *c)
{
	return !c->closing && c->ready && c->state_fn(&c->raft) == RAFT_LEADER;
}

void consensus_leader(struct consensus *c, uint64_t *id, const char **raft_address)
{
	raft_id leader = 0;
	const char *addr = NULL;
	raft_leader(&c->raft, &leader, &addr);
	*id = leader;
	if (raft_address != NULL)
		*raft_address = addr;
}

int consensus_configuration(struct consensus *c, uint64_t *ids, const char **addrs, int *roles,
                            int max)
{
	int n = 0;
	for (unsigned i = 0; i < c->raft.configuration.n && n < max; i++, n++) {
		ids[n] = c->raft.configuration.servers[i].id;
		addrs[n] = c->raft.configuration.servers[i].address;
		roles[n] = c->raft.configuration.servers[i].role;
	}
	return n;
}
