/* dp.h: the data plane's private header: the communicator, peers, the wire header, the
 * transfer engine every algorithm is written against, and the per-file entry points.
 * Nothing outside dataplane/ includes it; the public contract is yd.h.
 *
 * Layering, bottom up:
 *   transport_tcp.c / transport_shm.c  move bytes of one message part per peer, nonblocking
 *   xfer.c                             runs a set of concurrent sends/receives (with the
 *                                      reduction fused into the receive) to completion under
 *                                      the deadline, watching every peer's control socket
 *   coll_*.c                           algorithms as sequences of transfer sets
 *   coll.c                             public entry points, argument checks, sequence numbers
 *   progress.c                         requests and the per-communicator progress thread
 *   comm.c                             init, rendezvous, split, abort, errors */
#ifndef YD_DP_H
#define YD_DP_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dataplane/yd.h"

enum dp_kind {
	DP_ALLREDUCE = 1,
	DP_REDUCE_SCATTER,
	DP_ALLGATHER,
	DP_BROADCAST,
	DP_REDUCE,
	DP_BARRIER,
	DP_SPLIT,
	DP_P2P,
	DP_CALIBRATE,
};

#define DP_MAGIC 0x59445031u /* "YDP1" */
#define DP_MIN(a, b) ((a) < (b) ? (a) : (b))

/* Precedes every message on every transport. The receiver compares it with what it expects
 * (kind, dtype, op, algo, root/tag, count, seq, len) so that ranks calling different
 * collectives fail with YARD_EMISMATCH instead of reading each other's bytes as data. */
struct dp_hdr {
	uint32_t magic;
	uint8_t kind, dtype, op, algo;
	int32_t root; /* root, or tag for point-to-point */
	uint32_t flags; /* DP_HDR_*; builds before DP_HDR_DOING sent 0 and ignore it */
	uint64_t count;
	uint64_t seq;
	uint64_t len; /* bytes of this message (all parts) */
};

/* One send to or receive from one peer. A receive with reduce set stores
 * dst[i] = src[i] (op) incoming[i] (src may equal dst; src NULL means plain copy). */
struct dp_xfer {
	int peer;
	int is_send;
	int reduce;
	const void *src;
	void *dst;
	size_t len;
	struct dp_hdr hdr;
	const char *what; /* operation name for messages, e.g. "allreduce" */
	/* progress, owned by the engine */
	size_t done;
	int complete;
	int parts_left;
};

/* A set of transfers progressing together. Transfers to one peer in one direction complete
 * in array order (each direction of a peer is a FIFO stream); everything else overlaps. */
struct dp_xset {
	struct dp_xfer *x;
	int n;
	uint32_t bell; /* our doorbell as read before the last progress pass */
	int uses_shm;  /* some transfer goes over shared memory */
};

#define DP_TCP_MAX_SOCKS 8
#define DP_PIECE_BYTES (256u * 1024u)

/* One TCP data socket's progress through the current set: the part of transfer `cur` it
 * carries, with a piece buffer when the receive is reduced. */
struct dp_tcp_sock {
	int fd;
	int cur;  /* index into the set of the transfer in progress, -1 when idle */
	int last; /* index of the last transfer this socket finished, -1 at set start */
	size_t part_off, part_len, part_done;
	size_t hdr_done;
	struct dp_hdr hdr_in;
	unsigned char *piece; /* receive-reduce staging, DP_PIECE_BYTES */
	size_t piece_fill;
};

struct dp_shm_ring;
/* The shared-buffer allreduce's area at the end of every rank's shm segment (coll_shared.c):
 * two chunk slots the rank stages its data in, and counters of the chunks it has staged and
 * of the chunks whose slice it has reduced (a communicator's chunks are numbered from 1 on
 * every rank alike). hdr[s] describes the operation of the chunk in slot s, so that peers
 * compare it with their own before reading the data. */
#define DP_SHARED_SLOTS 2
#define DP_SHARED_CHUNK (1u << 20)
#define DP_SHARED_MAX_RANKS 1024 /* communicators larger than this use the other algorithms */
struct dp_shared_area {
	_Alignas(64) _Atomic uint64_t staged;
	_Alignas(64) _Atomic uint64_t reduced;
	_Alignas(64) struct dp_hdr hdr[DP_SHARED_SLOTS]; /* of the chunk in each slot */
	/* the collective the rank runs now, as its caller called it (dp_announce): op_seq is 0
	 * while op is being written */
	_Alignas(64) _Atomic uint64_t op_seq;
	struct dp_hdr op;
	_Alignas(64) unsigned char slot[DP_SHARED_SLOTS][DP_SHARED_CHUNK];
};
struct dp_rdma_peer;
struct dp_rdma_dev;

/* Control notices on the control socket (one per peer, always TCP): a goodbye before a clean
 * close, a failure report so that every survivor learns which rank failed, or the collective
 * a rank has waited in for DP_DOING_AFTER_MS (its dp_hdr in msg), so that ranks between hosts,
 * which share no announcements, find a mismatch where no message flows (dp_tell_doing). */
enum { DP_NOTE_GOODBYE = 1, DP_NOTE_FAIL = 2, DP_NOTE_DOING = 3 };
#define DP_DOING_AFTER_MS 100
/* dp_hdr.flags: the sender understands DP_NOTE_DOING (a build before it would take the note
 * for a failure report), so a rank tells a peer only once a message from it said so */
#define DP_HDR_DOING 1u
struct dp_note {
	uint32_t magic;
	uint32_t type;
	int32_t culprit; /* rank that failed or -1 */
	int32_t code;
	char msg[400];
};

struct dp_peer {
	int rank;
	char *endpoint;
	char *label;
	enum yd_transport transport;
	int ctl_fd;
	int said_goodbye;
	int eof;
	struct dp_note note_in;
	size_t note_fill;
	/* DP_NOTE_DOING: the collective the peer last said it waits in (seq 0: none), and the
	 * sequence number this rank last told it its own */
	struct dp_hdr doing;
	uint64_t told_seq;
	int hears_doing; /* a message from the peer carried DP_HDR_DOING */
	/* TCP */
	int nsock;
	struct dp_tcp_sock tx[DP_TCP_MAX_SOCKS], rx[DP_TCP_MAX_SOCKS];
	/* shm: tx ring lives in the peer's segment, rx ring in ours */
	struct dp_shm_ring *shm_tx, *shm_rx;
	_Atomic uint32_t *shm_doorbell; /* the peer's doorbell */
	_Atomic uint32_t *shm_waiting;
	int shm_tx_cur, shm_rx_cur;   /* transfer in progress, -1 when idle (shm and RDMA) */
	int shm_tx_last, shm_rx_last; /* last finished, -1 at set start (shm and RDMA) */
	/* RDMA: queue pair, registered rings, credits */
	struct dp_rdma_peer *rdma;
	pid_t pid;
};

struct yd_request;

/* Cost model parameters (seconds, seconds/byte); see algo_select.c. */
/* Sizes (bytes) at which calibrate.c times the candidate allreduce algorithms: every
 * candidate at all but the last, the finalists (those close to the best at the one before)
 * at the last too, where caches no longer hold the data. */
#define DP_CAL_POINTS 5
#define DP_CAL_FINALISTS 3
extern const size_t dp_cal_bytes[DP_CAL_POINTS];

/* What an allreduce costs here: the alpha-beta-gamma model's link figures, and once the
 * communicator is calibrated (calibrate.c), per algorithm the seconds measured at each of
 * dp_cal_bytes (the slowest rank's; INFINITY for an algorithm that was not a candidate; at
 * the last point, for a candidate that was no finalist, its earlier points' line). */
struct dp_costs {
	double alpha_shm, beta_shm, alpha_tcp, beta_tcp, gamma;
	int calibrated;
	double cal_s[YD_ALGO_COUNT][DP_CAL_POINTS];
	int cal_final[YD_ALGO_COUNT]; /* timed at the last point */
	double calibrate_s; /* how long the calibration took */
};

/* Online tuning of `auto` collectives (tune.c): per collective and size, the candidates (for
 * an allreduce those the calibration put close together), each timed in the first calls of
 * that size, then the one the ranks agree was fastest. */
#define DP_TUNE_SIZES 32              /* sizes tuned per communicator; later ones are not */
#define DP_TUNE_CAND 4                /* algorithms tried per size */
#define DP_TUNE_PASSES 4              /* passes over the candidates */
#define DP_TUNE_UNTIMED 1             /* calls of a candidate in a pass before the timed ones */
#define DP_TUNE_TIMED 3      /* timed calls of a candidate in a pass, back to back (from 256 KiB) */
#define DP_TUNE_TIMED_MAX 12 /* ... and below 16 KiB, where calls are short (dp_tune_timed) */
#define DP_TUNE_BIG (16u << 20) /* from here one timed call a pass: calls take milliseconds */
#define DP_TUNE_CALLS(n, timed) ((n)*DP_TUNE_PASSES * (DP_TUNE_UNTIMED + (timed)))
#define DP_TUNE_MAX_BYTES (256u << 20) /* larger calls keep the calibration's choice */
#define DP_TUNE_NEAR 1.5              /* tried: predicted within this factor of the best */
/* another algorithm replaces the issued choice when this much faster */
#define DP_TUNE_MARGIN 0.05
#define DP_SEQ_TUNE (1ull << 63) /* sequence bit of the ranks' agreement on a size */
struct dp_tune_size {
	enum dp_kind kind;
	size_t bytes; /* as algo_select.c sees the call (a reduce-scatter's whole vector) */
	enum yd_dtype dtype;
	uint64_t calls; /* `auto` calls of this collective and size run so far */
	int n;          /* candidates; the first is the choice the call was issued with */
	enum yd_algo cand[DP_TUNE_CAND];
	int timed; /* dp_tune_timed(bytes) */
	double t[DP_TUNE_CAND][DP_TUNE_PASSES * DP_TUNE_TIMED_MAX];
	_Atomic int chosen; /* YD_ALGO_AUTO while the candidates are being timed */
};
struct dp_tune {
	int on;
	size_t max_bytes;   /* DP_TUNE_MAX_BYTES (tests lower it) */
	_Atomic int nsizes; /* entries published to readers (yd_allreduce_algo) */
	struct dp_tune_size size[DP_TUNE_SIZES];
};
/* What one call contributes to the tuning: set by dp_tune_pick, used by dp_tune_done. */
struct dp_tune_call {
	struct dp_tune_size *s; /* NULL: the call is not timed */
	int slot, sample, last;
};

struct yd_comm {
	int rank, size;
	struct dp_peer *peers; /* size entries, peers[rank] is self */
	int timeout_ms;
	enum yd_algo algo;
	enum yd_transport transport_cfg;
	int socks_per_peer;
	int calibrate_cfg; /* yd_config.calibrate, passed on to splits */
	/* fixed once the transports are set up (dp_algo_init): whether any peer is reached
	 * over a network, and the allreduce algorithms `auto` chooses from */
	int any_net;
	int ncand;
	enum yd_algo cand[YD_ALGO_COUNT];
	uint64_t nonce;
	uint64_t seq;       /* collectives issued */
	uint64_t split_seq; /* splits issued, for unique child names */
	/* hosts: host index of each rank, in first-appearance order */
	int *host_of;
	int nhosts;
	/* failure state: first error wins */
	pthread_mutex_t err_lock;
	/* control notes are written whole, one writer at a time (yd_comm_abort may send from
	 * another thread while the operations' thread tells a peer what it waits in) */
	pthread_mutex_t note_lock;
	uint64_t ctl_drained_ms; /* the operations' thread last read every control socket */
	_Atomic int failed;
	_Atomic int aborted;
	char errmsg[512];
	int wake_fd; /* eventfd: abort and new requests wake a poll() */
	/* shm */
	char shm_name[64];
	void *shm_self;
	size_t shm_self_len;
	struct dp_rdma_dev *rdma; /* the device, protection domain (transport_rdma.c) */
	void **shm_map;
	size_t *shm_map_len;
	_Atomic uint32_t *doorbell, *waiting;
	uint64_t shared_chunks; /* chunks the shared-buffer allreduce has run (coll_shared.c) */
	/* the collective this rank runs now or ran last (dp_announce; seq 0 before the first),
	 * for DP_NOTE_DOING; used only by the thread that runs the operations */
	struct dp_hdr doing;
	/* scratch owned by the communicator, grown on demand */
	void *scratch;
	size_t scratch_len;
	struct dp_costs costs;
	/* online tuning (tune.c); used only by the thread that runs the operations */
	struct dp_tune tune;
	/* progress thread (progress.c) */
	pthread_t thread;
	int thread_started;
	int thread_stop;
	int thread_busy;
	pthread_mutex_t q_lock;
	pthread_cond_t q_cond;
	struct yd_request *q_head, *q_tail;
	/* CUDA (cuda.c): buffers are classified only once enabled; one GPU per communicator */
	int cuda_enabled;
	int cuda_device; /* ordinal of the first device buffer seen, -1 before */
	void *cuda;      /* struct dp_cuda: stream, pinned staging, NCCL communicator */
};

/* An operation, as the public call described it. */
struct dp_op {
	enum dp_kind kind;
	const void *sendbuf;
	void *recvbuf;
	size_t count;
	enum yd_dtype dtype;
	enum yd_op op;
	int root; /* root, or peer for point-to-point */
	int tag;
	int is_send;
	enum yd_algo algo;
	uint64_t seq;
	int device;       /* 1 + CUDA ordinal of the buffers, 0 = host memory (cuda.c) */
	int no_avg_scale; /* YD_AVG: leave the sum undivided (the caller divides on the GPU) */
	int tune;         /* a collective whose algorithm `auto` chose (tune.c may change it) */
};

/* comm.c */
int dp_fail(yd_comm *c, int code, int culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *dp_peer_desc(yd_comm *c, int rank, char *buf, size_t len);
void *dp_scratch(yd_comm *c, size_t len);
void dp_wake(yd_comm *c);
const char *dp_kind_name(enum dp_kind k);

/* xfer.c */
int dp_xfer_run(yd_comm *c, struct dp_xfer *x, int n);
void dp_xset_begin(yd_comm *c, struct dp_xset *s);
/* One pass over every pending transfer; *progressed says whether a byte moved. */
int dp_xset_progress(yd_comm *c, struct dp_xset *s, int *progressed);
/* Blocks until something may have changed, at most max_wait_ms. */
int dp_xset_wait(yd_comm *c, struct dp_xset *s, int max_wait_ms);
int dp_xset_check_deadline(yd_comm *c, struct dp_xset *s, uint64_t last_progress_ms);
void dp_hdr_fill(struct dp_hdr *h, const struct dp_op *op, size_t len);
void dp_xfer_prepare(yd_comm *c, struct dp_xfer *x);
int dp_xset_next(const struct dp_xset *s, int after, int peer, int is_send);
int dp_xset_pending(const struct dp_xset *s);
/* Shorthands the algorithms use to fill transfer arrays. */
void dp_x_send(struct dp_xfer *x, const struct dp_op *o, int peer, const void *buf, size_t len);
void dp_x_recv(struct dp_xfer *x, const struct dp_op *o, int peer, void *buf, size_t len);
void dp_x_recv_reduce(struct dp_xfer *x, const struct dp_op *o, int peer, void *dst,
                      const void *src, size_t len);
/* dst = a (op) b for count elements of the operation's dtype (average sums). */
void dp_op_reduce(const struct dp_op *o, void *dst, const void *a, const void *b, size_t count);
int dp_hdr_check(yd_comm *c, struct dp_xfer *x, const struct dp_hdr *got);
/* A ring transport's frame (shm, RDMA) for receive x: checks its header and offset, reduces
 * or copies its len bytes into place, advances x->done. transport names it in errors. */
int dp_frame_deliver(yd_comm *c, struct dp_xfer *x, const struct dp_hdr *h, uint64_t off,
                     uint64_t len, const void *data, const char *transport);
int dp_poll_ctl(yd_comm *c, int timeout_ms);
/* Same, naming operation o if a peer turns out to be dead (for waits outside the engine). */
int dp_poll_ctl_op(yd_comm *c, const struct dp_op *o, int timeout_ms);
/* The data path lost peer p: fails the communicator, preferring the peer's own failure
 * notice if one is on its way. */
int dp_peer_lost(yd_comm *c, struct dp_peer *p, const struct dp_xfer *x, const char *why);
void dp_send_note(yd_comm *c, int type, int culprit, int code, const char *msg);

/* transport_tcp.c */
int dp_tcp_listen(const char *host, int port, int *fd_out, int *port_out, char *err, size_t len);
int dp_tcp_connect_mesh(yd_comm *c, int listen_fd, char *err, size_t errlen);
void dp_tcp_set_begin(yd_comm *c, struct dp_peer *p);
int dp_tcp_progress_tx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed);
int dp_tcp_progress_rx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed);
int dp_tcp_parts(yd_comm *c, struct dp_peer *p, size_t len);
int dp_write_full(int fd, const void *buf, size_t len, int timeout_ms);
int dp_read_full(int fd, void *buf, size_t len, int timeout_ms);

/* transport_shm.c */
int dp_shm_setup(yd_comm *c, char *err, size_t errlen);
void dp_shm_teardown(yd_comm *c);
int dp_shm_progress_tx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed);
int dp_shm_progress_rx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed);
/* Sleep on c's doorbell (at most timeout_ms) unless it no longer reads `seen`, the value read
 * before the caller last looked for work: a ring after that look wakes it or keeps it from
 * sleeping (re-reading the doorbell here would lose it and sleep the whole timeout). */
void dp_shm_wait(yd_comm *c, uint32_t seen, int timeout_ms);
/* The same on any doorbell; 1 when it was rung (no longer reads `seen`) before the timeout,
 * else 0. */
int dp_doorbell_wait(_Atomic uint32_t *doorbell, _Atomic uint32_t *waiting, uint32_t seen,
                     int timeout_ms);
void dp_shm_ring_doorbell(_Atomic uint32_t *doorbell, _Atomic uint32_t *waiting);
/* The header of the first frame waiting in p's inbound ring, or NULL. */
const struct dp_hdr *dp_shm_peek(struct dp_peer *p);
/* rank's shared-buffer area, NULL unless rank is this rank or a shared-memory peer */
struct dp_shared_area *dp_shm_shared_area(yd_comm *c, int rank);
/* One spin round of a waiter that has not slept yet: a pause, and a yield every 64 rounds so
 * that more ranks than cores do not burn the core the peer needs. */
static inline void dp_spin(int round)
{
	if (round % 64 == 63) {
		sched_yield();
		return;
	}
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}
/* Spin rounds before sleeping on the doorbell. */
#define DP_SPIN_ROUNDS 2000

/* transport_rdma.c (stubs without HAVE_IBVERBS) */
/* 1 if an RDMA device with an active port exists; else 0 and why says what is missing. */
int dp_rdma_device_present(char *why, size_t len);
/* After the TCP mesh: sets up a queue pair with every peer that should use RDMA (forced, or
 * auto between hosts) and switches those pairs to YD_TRANSPORT_RDMA; auto falls back to TCP
 * per pair (logged). Uses the control sockets. */
int dp_rdma_setup(yd_comm *c, char *err, size_t errlen);
void dp_rdma_teardown(yd_comm *c);
int dp_rdma_progress(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed);
/* The fd that becomes readable when p's completion queue has news (-1 if none), and the
 * call that consumes those events after poll(). */
int dp_rdma_wait_fd(struct dp_peer *p);
void dp_rdma_ack_events(struct dp_peer *p);

/* cuda.c (stubs without HAVE_CUDA) */
/* Enables device buffers on c; YARD_EUNSUPPORTED with the reason in why when impossible. */
int dp_cuda_enable(yd_comm *c, char *why, size_t len);
/* 1 + the CUDA ordinal p lives on, or 0 for host memory (always 0 until enabled). */
int dp_cuda_buffer_device(yd_comm *c, const void *p);
/* Runs an operation whose buffers are device memory (o->device != 0). */
int dp_cuda_execute(yd_comm *c, struct dp_op *o);
void dp_cuda_comm_free(yd_comm *c);

/* reduce.c */
void dp_reduce(void *dst, const void *a, const void *b, size_t count, enum yd_dtype dt,
               enum yd_op op);
/* buf[i] /= n (for YD_AVG after a sum). */
void dp_scale_avg(void *buf, size_t count, enum yd_dtype dt, int n);
float dp_f16_to_f32(uint16_t h);
uint16_t dp_f32_to_f16(float f);
float dp_bf16_to_f32(uint16_t h);
uint16_t dp_f32_to_bf16(float f);

/* Groups: algorithms run over a list of comm ranks (all of them, or one host's, or one
 * rank per host); gi is this rank's index in the list. Blocks of the buffer are the
 * balanced partition of count into n (dp_block). */
struct dp_group {
	const int *ranks;
	int n, me;
};
void dp_block(size_t count, int n, int i, size_t *off, size_t *cnt);

/* coll_*.c: every function takes the op (for headers, dtype and op) and works on bytes. */
int dp_ring_reduce_scatter(yd_comm *c, const struct dp_op *o, struct dp_group g, const void *src,
                           void *dst, const size_t *boff, const size_t *bcnt, void *out);
int dp_ring_allgather(yd_comm *c, const struct dp_op *o, struct dp_group g, void *buf,
                      const size_t *boff, const size_t *bcnt);
int dp_ring_allreduce(yd_comm *c, const struct dp_op *o, struct dp_group g, const void *src,
                      void *dst, size_t count);
int dp_chain_broadcast(yd_comm *c, const struct dp_op *o, void *buf, size_t count, int root);
int dp_chain_reduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count,
                    int root);
int dp_pow2_floor(int n);
int dp_fold_real(int q, int rem);
int dp_fold_in(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t bytes,
               int *q_out, const void **mine);
int dp_fold_out(yd_comm *c, const struct dp_op *o, void *dst, size_t bytes);
int dp_rd_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count);
int dp_hd_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count);
int dp_tree_broadcast(yd_comm *c, const struct dp_op *o, void *buf, size_t count, int root);
int dp_tree_reduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count,
                   int root);
int dp_tree_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count);
int dp_naive_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count);
int dp_naive_reduce_scatter(yd_comm *c, const struct dp_op *o, const void *src, void *dst,
                            size_t recvcount);
int dp_naive_allgather(yd_comm *c, const struct dp_op *o, void *buf, size_t sendcount);
int dp_naive_broadcast(yd_comm *c, const struct dp_op *o, void *buf, size_t count, int root);
int dp_naive_reduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count,
                    int root);
int dp_direct_reduce_scatter(yd_comm *c, const struct dp_op *o, const void *src, void *out,
                             const size_t *boff, const size_t *bcnt);
int dp_direct_allgather(yd_comm *c, const struct dp_op *o, void *buf, const size_t *boff,
                        const size_t *bcnt);
int dp_ps_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count);
int dp_hier_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count);
int dp_hier_usable(yd_comm *c);
/* coll_shared.c: allreduce through the shared-buffer areas of each host's ranks (all of a
 * host's ranks over shm; between hosts, as many ranks on every host) */
int dp_shared_usable(yd_comm *c);
int dp_shared_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst,
                        size_t count);
/* one host only (dp_shared_usable and c->nhosts == 1): count is per rank's block; the
 * allgather's buf already holds this rank's block in place */
int dp_shared_reduce_scatter(yd_comm *c, const struct dp_op *o, const void *src, void *dst,
                             size_t count);
int dp_shared_allgather(yd_comm *c, const struct dp_op *o, void *buf, size_t count);
/* Publishes the collective o (as the application called it, before it runs) to the host's
 * peers, so that a rank waiting in another collective of the same sequence number, where no
 * message would ever tell it (every rank receiving first), reports the mismatch; and keeps
 * it for the DP_NOTE_DOING a stalled transfer sends to peers on other hosts (xfer.c). */
void dp_announce(yd_comm *c, const struct dp_op *o);
/* For a rank about to sleep in the engine on transfer x: a peer that staged a shared-buffer
 * chunk of the same operation (same sequence number) runs another collective or algorithm:
 * YARD_EMISMATCH naming it; else 0. */
int dp_shared_check_peers(yd_comm *c, const struct dp_xfer *x);

/* algo_select.c */
enum yd_algo dp_algo_select(yd_comm *c, enum dp_kind kind, size_t bytes);
/* The bytes a collective's algorithm is chosen by: a reduce-scatter's or allgather's whole
 * vector, else the call's buffer. */
size_t dp_op_select_bytes(const yd_comm *c, const struct dp_op *o);
int dp_algo_supported(enum dp_kind kind, enum yd_algo a);
double dp_algo_cost(yd_comm *c, enum yd_algo a, size_t bytes);
/* Computes what algorithm selection needs of c's fixed shape (transports, hosts); called
 * once the transports are set up. */
void dp_algo_init(yd_comm *c);
/* The algorithms `auto` chooses an allreduce from on c; returns how many (≤ YD_ALGO_COUNT). */
int dp_algo_candidates(yd_comm *c, enum yd_algo out[YD_ALGO_COUNT]);
/* Times every candidate on c (all ranks at once, at creation); 0 or the error of a failed
 * collective (c's error message names the rank). calibrate.c */
int dp_calibrate(yd_comm *c);
/* Seconds for an allreduce of `bytes` with a on calibrated c: piecewise linear through the
 * measured points, extended past the last by its slope (INFINITY if a was not measured). */
double dp_calibrated_cost(const yd_comm *c, enum yd_algo a, size_t bytes);

/* tune.c */
/* Before an operation runs: an `auto` collective of a size being tuned gets the algorithm
 * whose turn it is, one of a tuned size the agreed algorithm; *tc says whether to time it. */
void dp_tune_pick(yd_comm *c, struct dp_op *o, struct dp_tune_call *tc);
/* After it ran in `seconds`: records the time; after the last timed call of its size the
 * ranks agree (one small allreduce) on the fastest. 0 or that allreduce's error. */
int dp_tune_done(yd_comm *c, const struct dp_op *o, const struct dp_tune_call *tc, double seconds);
/* The agreed algorithm for a collective of kind over `bytes` (as dp_algo_select takes them)
 * of dtype, or YD_ALGO_AUTO if none yet. */
enum yd_algo dp_tune_chosen(yd_comm *c, enum dp_kind kind, size_t bytes, enum yd_dtype dt);
/* Timed calls per candidate and pass for a call of `bytes`: DP_TUNE_TIMED from 256 KiB, more
 * below (up to DP_TUNE_TIMED_MAX), where single calls are a few microseconds and the time
 * slices of ranks sharing cores decide more of each; one from DP_TUNE_BIG, where a call takes
 * milliseconds and a time slice is a small part of it. */
int dp_tune_timed(size_t bytes);
/* An algorithm's figure from its DP_TUNE_PASSES * timed calls (pass by pass): the median over
 * the passes of each pass's mean. */
double dp_tune_figure(const double *t, int timed);
/* Of n summed times, the calibrated choice (index 0) unless another is `margin` faster. */
int dp_tune_decide(const double *t, int n, double margin);

/* coll.c */
int dp_op_execute(yd_comm *c, struct dp_op *o);

/* progress.c */
int dp_submit(yd_comm *c, struct dp_op *o, yd_request **req);
int dp_run_blocking(yd_comm *c, struct dp_op *o);
void dp_progress_stop(yd_comm *c);

#endif
