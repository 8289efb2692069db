/* yd_impl.h: the data plane's internal types, shared by its files (not installed).
 *
 * One yd_net per yd_comm_init: a progress thread (net.c) owning one TCP connection to every
 * other rank. Communicators (the initial one and every split) multiplex over their net's
 * connections with a 64-bit comm id in each message header. Every operation is a yd_request:
 * sends queue per peer, receives are matched by (comm, source, channel, tag) in posting order
 * against an unexpected-message queue. Collectives run in FIFO order on a per-communicator
 * worker thread (coll.c) as a sequence of nonblocking sends and receives.
 *
 * Locking: one mutex per net (net->mu) protects every queue, every request's done/rc, and
 * every communicator's failure state; net->cond is broadcast on every completion. Only the
 * progress thread reads or writes sockets, and only it completes requests that it has
 * started moving bytes for (so a failing communicator never frees a buffer mid-copy).
 */
#ifndef YD_IMPL_H
#define YD_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "dataplane/yd.h"

#define WIRE_MAGIC 0x59445032u

enum wire_type { WIRE_DATA = 1, WIRE_ABORT = 2, WIRE_HEARTBEAT = 3 };
enum wire_chan { CHAN_P2P = 0, CHAN_COLL = 1 };
enum coll_kind {
	COLL_NONE,
	COLL_ALLREDUCE,
	COLL_REDUCE_SCATTER,
	COLL_ALLGATHER,
	COLL_BROADCAST,
	COLL_REDUCE,
	COLL_BARRIER,
	COLL_SPLIT,
	COLL_KIND_COUNT
};

/* What both sides of a collective message must agree on (compared on receipt). */
struct coll_meta {
	uint8_t coll, op, dtype, algo;
	int32_t root;
	uint64_t seq;
	uint64_t count;
};

/* On the wire before every payload, native byte order (all ranks run the same build). */
struct wire_hdr {
	uint32_t magic;
	uint8_t type, chan, pad[2];
	uint64_t comm_id;
	int64_t tag; /* p2p: the user's tag; collectives: the step within the operation */
	struct coll_meta meta;
	uint64_t len; /* payload bytes */
};

enum req_kind { REQ_SEND, REQ_RECV, REQ_COLL, REQ_ORPHAN };

struct coll_args {
	enum coll_kind kind;
	const void *sendbuf;
	void *recvbuf;
	size_t count;
	enum yd_dtype dt;
	enum yd_op op;
	int root;
	enum yd_algo algo; /* resolved (never AUTO) once the job starts */
};

struct yd_request {
	struct yd_request *next;    /* in the posted-receive list, a send queue or a job queue */
	struct yd_request *cx_next; /* in the owning collective's outstanding list */
	yd_comm *comm;
	enum req_kind kind;
	int peer;      /* net rank of the peer (p2p) */
	int comm_peer; /* the same peer's rank in comm */
	uint8_t chan;
	int64_t tag;
	struct coll_meta meta;
	void *buf;
	size_t len;
	const char *opname; /* "send", "allreduce", ... for error messages */
	uint64_t op_seq;
	int done, rc;
	int started; /* the progress thread is moving bytes for it (no one else completes it) */
	/* sends */
	struct wire_hdr hdr;
	size_t sent; /* bytes of header + payload written */
	void *owned; /* REQ_ORPHAN: payload copy owned by the request (freed on completion) */
	struct unexp *claimed; /* receive matched to an unexpected message still arriving */
	/* collectives */
	struct coll_args args;
};

/* A message that arrived before its receive was posted. */
struct unexp {
	struct unexp *next;
	int peer;
	struct wire_hdr hdr;
	char *data;
	int complete;
	struct yd_request *claimed;
};

struct net_peer {
	int fd;
	int dead;       /* failed: nothing more can be sent or received */
	int eof;        /* closed cleanly between messages: what arrived stays receivable */
	char addr[128]; /* "host:port" */
	char label[128];
	uint64_t last_rx_ns, last_tx_ns; /* liveness: heartbeats keep these fresh */
	/* receive state */
	struct wire_hdr rxhdr;
	size_t rxhdr_got;
	int rx_body;               /* reading a payload */
	struct yd_request *rx_req; /* payload goes to a posted receive... */
	struct unexp *rx_unexp;    /* ...or to an unexpected message... */
	char *rx_ctrl;             /* ...or is an abort reason... */
	size_t rx_len, rx_got;     /* ...or is discarded when all are NULL */
	/* send queue */
	struct yd_request *txq, *txq_tail;
};

struct yd_net {
	pthread_mutex_t mu;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	int rank, world;
	struct net_peer *peers; /* [world]; peers[rank] unused */
	int wake_fd;            /* eventfd that interrupts the progress thread's poll() */
	pthread_t thread;
	int stop;
	uint64_t fail_gen, swept_gen; /* failures the progress thread has yet to sweep */
	struct yd_request *posted, *posted_tail;
	struct unexp *unexp, *unexp_tail;
	yd_comm *comms; /* registered communicators (linked by comm->net_next) */
	int refs;
	int timeout_ms;
	char *discard; /* scratch for payloads nobody wants */
};

struct yd_comm {
	struct yd_net *net;
	yd_comm *net_next;
	uint64_t id;
	int rank, size;
	int *net_rank; /* [size]: comm rank -> net rank */
	char **labels; /* [size]: host label per comm rank (borrowed from the net's peers) */
	int timeout_ms;
	enum yd_algo algo;
	int failed_rc;   /* 0 while healthy; sticky */
	char cause[512]; /* why it failed, without the operation prefix */
	char last_error[640];
	uint64_t coll_seq, p2p_seq;
	/* collective worker */
	pthread_t worker;
	int worker_started, worker_stop;
	int worker_busy; /* the worker runs a job */
	int inline_busy; /* the application thread runs a blocking collective itself */
	pthread_cond_t worker_cond;
	struct yd_request *jobs, *jobs_tail;
	void *scratch[3];
	size_t scratch_len[3];
};

/* ---- net.c: the progress thread and the request layer ---- */
int net_start(struct yd_net *net);
/* Graceful: stops the thread, half-closes, drains until EOF (bounded), frees. */
void net_free(struct yd_net *net);
/* Queue a send/receive (req fully filled by the caller). Returns 0, or fails at once. */
int net_post_send(struct yd_net *net, struct yd_request *req);
int net_post_recv(struct yd_net *net, struct yd_request *req);
/* Waits until req is done or deadline_ns (monotonic; 0 = none). 0 if done, YARD_ETIMEDOUT. */
int net_wait_until(struct yd_net *net, struct yd_request *req, uint64_t deadline_ns);
/* Marks comm failed (first cause wins) and wakes everything. notify_peers: tell the other
 * members (abort message) so they fail promptly too. Caller holds net->mu. */
void comm_fail_locked(yd_comm *comm, int rc, int notify_peers, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void comm_fail(yd_comm *comm, int rc, int notify_peers, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "peer rank 3 (127.0.0.1:40113)" (with the world rank when it differs). */
void comm_describe_peer(const yd_comm *comm, int comm_peer, char *buf, size_t len);
/* Fails the calling operation: sets last_error "<op> #<seq>: <cause>" and returns rc. */
int comm_op_error(yd_comm *comm, const char *opname, uint64_t seq, int rc);
void net_wake(struct yd_net *net);
void net_shutdown_sockets(struct yd_net *net);

/* A wait on comm_peer passed the deadline: fails comm with YARD_ETIMEDOUT naming that peer
 * and, if another member has been silent for long, that one too (the likely culprit). */
void comm_fail_timeout(yd_comm *comm, int comm_peer, const char *what);
/* The member of comm (comm rank) silent for longest, if at least min_ms; -1 if none. */
int net_silent_peer(struct yd_net *net, const yd_comm *comm, uint64_t min_ms, uint64_t *silent_ms);

/* ---- net_connect.c ---- */
/* Listens on "host:port" (port 0: any); returns the fd and the chosen port. */
int net_listen(const char *endpoint, int *fd_out, int *port_out, char *err, size_t errlen);
/* Connects to every peer within the deadline, fills net->peers[*].fd. */
int net_connect_all(struct yd_net *net, int listen_fd, uint64_t deadline_ns, char *err,
                    size_t errlen);

/* ---- comm.c ---- */
uint64_t comm_deadline(const yd_comm *comm);
int comm_check(yd_comm *comm); /* failed_rc (under lock) */

/* ---- coll.c: worker, collective context ---- */
struct cx {
	yd_comm *comm;
	struct coll_args a;
	uint64_t seq;
	const char *name;
	size_t esize;
	struct yd_request *outstanding;
};
int cx_isend(struct cx *cx, int peer, int step, const void *buf, size_t bytes,
             struct yd_request **out);
int cx_irecv(struct cx *cx, int peer, int step, void *buf, size_t bytes, struct yd_request **out);
int cx_wait(struct cx *cx, struct yd_request *req); /* frees req */
int cx_sendrecv(struct cx *cx, int to, int sstep, const void *sbuf, size_t sbytes, int from,
                int rstep, void *rbuf, size_t rbytes);
void *cx_scratch(struct cx *cx, int slot, size_t bytes); /* per-comm, reused; NULL on ENOMEM */
int coll_run_job(yd_comm *comm, struct coll_args *a, uint64_t seq);
void coll_stop_worker(yd_comm *comm);
const char *coll_kind_name(enum coll_kind k);

/* ---- algorithms: the caller has handled size 1 and count 0 ---- */
int coll_ring_allreduce(struct cx *cx);
int coll_ring_reduce_scatter(struct cx *cx);
int coll_ring_allgather(struct cx *cx);
int coll_naive_allreduce(struct cx *cx);
int coll_naive_reduce_scatter(struct cx *cx);
int coll_naive_allgather(struct cx *cx);
int coll_tree_broadcast(struct cx *cx);
int coll_tree_reduce(struct cx *cx);

/* ---- algo_select.c ---- */
enum yd_algo algo_select(const yd_comm *comm, const struct coll_args *a);

/* chunk [begin, end) of count elements split into parts pieces (the first count%parts get one
 * more) */
static inline size_t part_begin(size_t count, int parts, int i)
{
	size_t base = count / (size_t)parts, extra = count % (size_t)parts;
	return (size_t)i * base + ((size_t)i < extra ? (size_t)i : extra);
}

#endif
