/* consensus.h: the one owner of canonical raft 0.15 (raft_uv over TCP) in trainyard.
 *
 * It wraps the library's sharp edges (shared/research/raft-probe.md §4) so callers never
 * meet them:
 *  - payloads go out in 8-byte-padded frames with a length/version header (jobs/codec.h);
 *  - every stream gets TCP_NODELAY (raft/transport.h);
 *  - raft_apply/raft_barrier/membership calls are never made from inside a raft callback:
 *    every request is queued and issued from a uv_idle handle after re-checking
 *    raft_state(), so a retry from a failed (LEADERSHIPLOST) callback cannot crash;
 *  - pre-vote is on;
 *  - leadership transfer always names a target this module chose: a voter heard from
 *    within two election timeouts with the highest match index;
 *  - the FSM apply given to raft never returns an error (errors travel in the result);
 *  - a node that turns RAFT_UNAVAILABLE outside shutdown logs and exits(1) (watchdog);
 *  - writes are refused while the data dir has less than min_free_mb free;
 *  - a new leader runs a raft_barrier before it reports leader-up and admits requests;
 *  - a follower whose connection to the leader is closed by the leader's end (its process
 *    died: raft/transport.h; polled every quarter heartbeat) shortens its election timeout
 *    to half a heartbeat until it hears from a leader again (or two election timeouts
 *    pass), so a crashed leader is replaced within a few heartbeats instead of one to two
 *    election timeouts. With pre-vote this cannot disrupt a leader that is in fact alive:
 *    the other voters still hear from it and refuse the pre-vote;
 *  - raft_close is issued from the loop's check phase, so raft_uv's open-segment writer has
 *    closed before raft_uv reports itself closed (0.15 fires that report early when a poll
 *    phase comes between: a double close callback, canonical/raft#341).
 * Commands submitted within one loop iteration are packed into one raft entry (a version-2
 * batch frame, jobs/codec.h; at most batch_max commands and batch_max_bytes), applied in
 * order, each on its own, and each caller gets its own result; a lone command still goes
 * out as a version-1 frame. One entry per batch (never raft_apply with n > 1, whose callback
 * fires after the first entry only: raft-probe.md §4.6).
 * State is polled from a uv_check handle, which emits leader-up / leader-down.
 *
 * Everything runs on the loop passed to consensus_init; nothing is thread-safe. */
#ifndef YARD_RAFT_CONSENSUS_H
#define YARD_RAFT_CONSENSUS_H

#include <raft.h>
#include <raft/uv.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/err.h"
#include "common/hist.h"
#include "raft/snapbuf.h"
#include "raft/transport.h"

#define CONSENSUS_MAX_MEMBERS 16
#define CONSENSUS_ADDR_MAX 64

/* LAN defaults, from the probe's loopback measurements (raft-probe.md §5): election
 * timeout 150 ms + pre-vote failed over in 185-381 ms (median ~280). 200 ms keeps the
 * expected failover near 350 ms while leaving room for fsync stalls and busy 2-core CI
 * machines, which at 150 ms caused spurious elections. Heartbeat (= raft's tick) is 1/5 of
 * it. Reconnects retry after 150 ms instead of the library's 1 s (§4.8). */
#define CONSENSUS_DEFAULT_ELECTION_TIMEOUT_MS 200
#define CONSENSUS_DEFAULT_HEARTBEAT_MS 40
#define CONSENSUS_DEFAULT_CONNECT_RETRY_MS 150
#define CONSENSUS_DEFAULT_SNAPSHOT_THRESHOLD 4096
#define CONSENSUS_DEFAULT_SNAPSHOT_TRAILING 4096
#define CONSENSUS_DEFAULT_MIN_FREE_MB 64
/* Commands per raft entry: bounded so one entry's apply stays short (a job.submit applies in
 * tens of microseconds) and a follower never decodes a huge entry. */
#define CONSENSUS_DEFAULT_BATCH_MAX 64
#define CONSENSUS_DEFAULT_BATCH_MAX_BYTES (1u << 20)

struct consensus;

struct consensus_member {
	uint64_t id;
	char raft_address[CONSENSUS_ADDR_MAX];
};

/* The state machine raft drives. apply must not fail; its result is borrowed until the
 * next apply. snapshot returns a copy released with snapshot_free; restore copies.
 * result_hold / result_release keep a result alive past the next apply (the commands of a
 * batch are all applied before their callbacks run); without them nothing is batched. */
struct consensus_fsm_ops {
	void *data;
	const void *(*apply)(void *data, const void *payload, size_t len);
	void (*result_hold)(void *data, const void *result);
	void (*result_release)(void *data, const void *result);
	/* Optional: bracket the commands of one batch entry (apply_batch_end non-zero: the
	 * state after them could not be kept; the member exits to replay its log). */
	void (*apply_batch_begin)(void *data);
	int (*apply_batch_end)(void *data);
	int (*snapshot)(void *data, void **buf, size_t *len);
	void (*snapshot_free)(void *data, void *buf);
	int (*restore)(void *data, const void *buf, size_t len);
	/* Optional: the state's image as it is, not a copy (valid until the next apply or
	 * restore); non-zero when it cannot be had that way. With it, a snapshot copies the
	 * image into memory prepared off the loop (raft/snapbuf.h) instead of calling
	 * snapshot, which copies on the loop into fresh memory. */
	int (*image)(void *data, const void **buf, size_t *len);
};

struct consensus_config {
	uint64_t id;
	const char *raft_address; /* numeric a.b.c.d:port (0.15 cannot resolve names) */
	const char *data_dir;     /* must exist; the caller holds its lock */
	const struct consensus_member *members; /* bootstrap configuration (all voters) */
	int n_members;
	int join; /* start with an empty configuration, to be added by the leader */
	unsigned election_timeout_ms, heartbeat_ms, connect_retry_ms;
	unsigned snapshot_threshold, snapshot_trailing;
	uint64_t min_free_mb;
	unsigned batch_max;     /* commands per entry; 1: no batching (e.g. mixed versions) */
	size_t batch_max_bytes; /* payload bytes per entry (a single bigger command still goes) */
	void (*on_leader_up)(struct consensus *c, void *data);
	void (*on_leader_down)(struct consensus *c, void *data);
	void *cb_data;
};

/* Fills in the defaults above. */
void consensus_config_defaults(struct consensus_config *cfg);

/* The snapshot threshold this member gives raft: snapshot_threshold, plus an eighth of it
 * for each step of (id - 1) mod 4. Members on one machine (tests, `yardd --dev`, a lab)
 * would otherwise all snapshot at the same index, and copying and compressing the state
 * at once on every member starved the leader's loop of CPU long enough to lose it (two
 * cores, a 240 MB state). */
unsigned consensus_snapshot_threshold(const struct consensus_config *cfg);

struct consensus_stats {
	uint64_t applies;            /* entries applied to the FSM */
	uint64_t commands;           /* commands applied (a batch entry holds several) */
	uint64_t batches_sent;       /* batch entries this member proposed as leader */
	uint64_t batched_commands;   /* commands those batches carried */
	uint64_t corrupt_entries;    /* entries whose frame failed to decode (applied as errors) */
	uint64_t snapshots;          /* snapshots taken */
	uint64_t snapshots_prepared; /* of those, copied into memory prepared off the loop */
	uint64_t snapshot_last_us;   /* how long the last one held the loop */
	uint64_t restores;           /* snapshots installed from the leader while running */
	uint64_t leader_changes;     /* times a new leader, or one elected again, became known */
	uint64_t leader_regained;    /* times the leader it knew came back in the same term */
	uint64_t leader_ready_index; /* last index when this node last became ready */
	uint64_t elected_index;      /* last index when this node last became raft leader */
	uint64_t sends_to_nobody;    /* messages raft addressed to no server, refused */
	uint64_t leader_conn_lost;   /* times the leader's end of our connection closed */
	/* this member's own commands, from consensus_submit to their apply here: queueing,
	 * the write and a majority's, the apply (as leader; failed ones are not counted) */
	struct yard_hist commit_ms;
	/* of those, from raft_apply to the start of their entry's apply: the log write here and
	 * on a majority, and the entries before it */
	struct yard_hist replicate_ms;
	struct yard_hist apply_ms; /* every entry's apply to the state machine (any role) */
};

typedef void (*consensus_apply_cb)(void *data, int status, const void *result);
typedef void (*consensus_done_cb)(void *data, int status, const char *msg);

struct consensus_op;

struct consensus {
	uv_loop_t *loop;
	struct raft raft;
	struct raft_io io;
	/* raft_uv's send: io.send is consensus_guarded_send, which refuses a message raft
	 * addresses to no server before it reaches raft_uv (see consensus.c) */
	int (*uv_send)(struct raft_io *io, struct raft_io_send *req,
	               const struct raft_message *message, raft_io_send_cb cb);
	struct raft_fsm fsm;
	struct nodelay_transport transport;
	struct consensus_fsm_ops ops;
	struct consensus_config cfg;
	char data_dir[4096];
	char raft_address[CONSENSUS_ADDR_MAX];
	uv_check_t check;        /* state polling, watchdog */
	uv_idle_t idle;          /* issues queued requests outside raft callbacks */
	uv_timer_t health;       /* samples follower contact while leader */
	uv_timer_t leader_watch; /* a follower's look at its leader's connection */
	struct consensus_op *queue_head, *queue_tail;
	/* results of the latest batch entry applied, held until the next entry applies (room
	 * for CODEC_BATCH_MAX, allocated once so an apply never fails for memory) */
	const void **batch_results;
	int n_batch_results;
	struct raft_barrier ready_barrier;
	int leader_seen;       /* raft says LEADER (as of the last poll) */
	int ready;             /* leader and its first barrier has applied */
	int barrier_pending;   /* the ready barrier is in flight */
	int barrier_wanted;    /* (re)issue the ready barrier from the next poll */
	raft_term leader_term; /* term in which leader_seen was set */
	uint64_t known_leader;
	/* the last leader known (never 0 once one was) and its term: a member that loses and
	 * then hears again from the same leader in the same term saw no leader change */
	uint64_t last_leader, last_leader_term;
	/* monotonic: since when it has known no leader (0: it knows one), and when it last
	 * warned of that */
	uint64_t leaderless_since_ms, leaderless_warned_ms;
	/* fast election after the leader's connection closed (see above) */
	int fast_election;
	uint64_t fast_since_ms;     /* monotonic */
	const char *fast_ended;     /* why the last one ended (tests, logs) */
	raft_time fast_timer_start; /* raft's election timer start when it began */
	int change_pending;         /* one membership change at a time */
	/* the data dir's free space as statvfs last said, and when (monotonic; 0: never) */
	uint64_t space_free_mb, space_at_ms;
	int started, closing, handles_open;
	struct {
		uint64_t id;
		uint64_t last_contact_ms;
	} contact[CONSENSUS_MAX_MEMBERS];
	struct consensus_stats stats;
	uint64_t apply_start_ns; /* when the entry being (or last) applied began */
	/* snapshot memory: prepared by a worker before raft's threshold comes due, the buffer
	 * raft holds until it has written it (snap_own: NULL when the FSM's own snapshot made
	 * it, or none is in flight), whether the next one was asked for, and the image's size
	 * at an index (the last snapshot, or the first entry this member applied) to tell
	 * how fast it grows */
	struct snapbuf snapbuf;
	void *snap_own;
	int snap_in_flight, snap_asked;
	uint64_t snap_base_index;
	size_t snap_base_len;
	void (*close_cb)(struct consensus *c);
	uint64_t close_until_ms; /* raft_close waits for writes in flight until then */
	/* Seams for tests; default raft_state, nodelay_transport_peer_closed and log+exit(1). */
	int (*state_fn)(struct raft *r);
	int (*peer_closed_fn)(struct nodelay_transport *t, raft_id id);
	void (*on_fatal)(struct consensus *c, const char *why);
};

/* io.send of every member: raft's message, unless it names no server (id 0 or no address)
 * or the member is closing (RAFT_NOCONNECTION, nothing sent, cb not called). */
int consensus_guarded_send(struct raft_io *io, struct raft_io_send *req,
                           const struct raft_message *message, raft_io_send_cb cb);

/* Creates data structures, bootstraps (RAFT_CANTBOOTSTRAP on restart is normal), applies
 * settings and starts raft (restoring any local snapshot synchronously). */
int consensus_init(struct consensus *c, uv_loop_t *loop, const struct consensus_config *cfg,
                   const struct consensus_fsm_ops *ops, struct yard_err *err);
/* Fails queued requests, closes raft and every handle, then calls cb. raft_close itself is
 * issued from the next check phase of the loop, so cb comes in a later loop iteration. */
void consensus_close(struct consensus *c, void (*cb)(struct consensus *c));
/* Graceful stop: a leader first hands leadership to a healthy voter (bounded by one
 * election timeout), then closes. */
void consensus_shutdown(struct consensus *c, void (*cb)(struct consensus *c));

/* Replicates a command payload. 0: queued, cb will be called exactly once with 0 and the
 * FSM result, or YARD_ENOTLEADER / YARD_EUNKNOWN (leadership lost: outcome unknown) /
 * YARD_ENOSPACE / YARD_EABORTED. Non-zero: refused now (cb not called), err says why. */
int consensus_submit(struct consensus *c, const void *payload, size_t len, consensus_apply_cb cb,
                     void *data, struct yard_err *err);
/* Linearizable read point: cb(…, 0) when every entry committed before now is applied. */
int consensus_barrier(struct consensus *c, consensus_done_cb cb, void *data, struct yard_err *err);
/* Hands what consensus_submit and the others queued to raft now instead of at the loop's
 * next idle phase (where they go otherwise, batched): for a caller about to hold the loop
 * for a while (a scheduling pass), so that the entries replicate meanwhile. */
void consensus_flush(struct consensus *c);
/* Adds a member as spare; with voter, then catches it up and makes it a voter. */
int consensus_add(struct consensus *c, uint64_t id, const char *raft_address, int voter,
                  consensus_done_cb cb, void *data, struct yard_err *err);
int consensus_remove(struct consensus *c, uint64_t id, consensus_done_cb cb, void *data,
                     struct yard_err *err);
/* Moves leadership to id, or with id 0 to the best healthy voter. cb status 0 once the
 * target leads. */
int consensus_transfer(struct consensus *c, uint64_t id, consensus_done_cb cb, void *data,
                       struct yard_err *err);

int consensus_state(struct consensus *c);    /* RAFT_FOLLOWER, ... */
int consensus_is_ready(struct consensus *c); /* leader and barrier done */
void consensus_leader(struct consensus *c, uint64_t *id, const char **raft_address);
/* How long this member has known no leader, in ms (0: it knows one). Past
 * CONSENSUS_LEADERLESS_WARN_MS it logs a warning, once a minute. */
#define CONSENSUS_LEADERLESS_WARN_MS 10000
uint64_t consensus_leaderless_ms(struct consensus *c);
/* Whether the leader heard from member id within two election timeouts. */
int consensus_member_healthy(struct consensus *c, uint64_t id);
/* On the leader: how far member id has replicated (*behind: entries of the leader's log it
 * has not acknowledged) and whether it answered lately (consensus_member_healthy). 0, or -1
 * when this member is not the leader or does not know id. */
int consensus_member_progress(struct consensus *c, uint64_t id, uint64_t *behind, int *healthy);
/* Writes the current configuration (id, address, role) into out; returns the count. */
int consensus_configuration(struct consensus *c, uint64_t *ids, const char **addrs, int *roles,
                            int max);

/* Transfer target choice, separated so tests can feed it cases: the healthy voter (not
 * self) with the highest match index; ties go to the lowest id; 0 if none. */
struct consensus_candidate {
	uint64_t id;
	int voter;
	int healthy;
	uint64_t match_index;
};
uint64_t consensus_pick_transfer_target(const struct consensus_candidate *cands, int n,
                                        uint64_t self);

#endif
