/* yd.h: the trainyard data plane, the public API user programs link (libyd.a).
 *
 * Communicators in the style of NCCL/MPI: every rank of a group creates one from the same
 * peer list, then runs collectives and point-to-point operations on CPU (or, where compiled
 * and present, CUDA) buffers. Transports are chosen per peer pair (shared memory on one host,
 * TCP between hosts, RDMA verbs when a device exists); algorithms by a cost model unless forced.
 *
 * Errors: every function returns 0 or a negative code from common/err.h (YARD_E*). After a
 * failure yd_comm_last_error() says what failed, naming the peer rank and host, the operation
 * and its sequence number, e.g.
 *   "allreduce #42: peer rank 3 (host 127.0.0.1:40113) closed the connection".
 * Every blocking wait has a deadline (yd_config.timeout_ms, or per call): a dead or silent peer
 * becomes YARD_EPEER or YARD_ETIMEDOUT on every survivor, never a hang. Once a communicator
 * has failed, later operations fail at once with the same error (no silent recovery).
 * Mismatched collectives across ranks (op, count, dtype, root) fail with YARD_EMISMATCH.
 *
 * Threads: one communicator is used by one application thread at a time. Nonblocking
 * operations (yd_i*) progress on the communicator's own progress thread; yd_comm_abort() may
 * be called from any thread or a signal-free context to fail everything pending promptly.
 */
#ifndef YD_H
#define YD_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct yd_comm yd_comm;
typedef struct yd_request yd_request;

enum yd_dtype { YD_F32, YD_F64, YD_F16, YD_BF16, YD_I32, YD_I64, YD_DTYPE_COUNT };
enum yd_op { YD_SUM, YD_PROD, YD_MIN, YD_MAX, YD_AVG, YD_OP_COUNT };

enum yd_algo {
	YD_ALGO_AUTO,   /* cost model picks by size, world size and topology */
	YD_ALGO_RING,   /* chunked, pipelined reduce-scatter + allgather */
	YD_ALGO_RD,     /* recursive doubling */
	YD_ALGO_HD,     /* halving-doubling (Rabenseifner), any world size */
	YD_ALGO_TREE,   /* binary tree reduce + broadcast */
	YD_ALGO_NAIVE,  /* everyone sends everything to everyone */
	YD_ALGO_PS,     /* parameter server, sharded across ranks */
	YD_ALGO_HIER,   /* intra-host reduce-scatter, inter-host ring, intra-host allgather */
	YD_ALGO_SHARED, /* one host: slices reduced straight out of shared buffers (allreduce) */
	YD_ALGO_COUNT
};

enum yd_transport {
	YD_TRANSPORT_AUTO, /* shm on the same host; between hosts RDMA where both ends have an
	                    * active RDMA port, else TCP (the fallback is logged) */
	YD_TRANSPORT_SHM,
	YD_TRANSPORT_TCP,
	YD_TRANSPORT_RDMA, /* every pair, one host included; init fails naming why if a rank
	                    * has no active RDMA port */
	YD_TRANSPORT_COUNT
};

struct yd_config {
	int rank;
	int world_size;
	/* endpoints[i] = "host:port" where rank i listens, for every rank. Copied. */
	const char *const *endpoints;
	/* host_labels[i] = which host rank i is on (ranks with equal labels are on one host; shm
	 * is used between them). NULL: derived from the endpoint's host. Lets one machine emulate
	 * several hosts. Copied. */
	const char *const *host_labels;
	int timeout_ms;            /* deadline of every blocking wait; 0 = 30000 */
	enum yd_transport transport; /* forced transport, or AUTO */
	enum yd_algo algo;         /* forced algorithm for every collective, or AUTO */
	int tcp_sockets_per_peer;  /* 0 = default */
	int cuda; /* 1: buffers may be CUDA device memory (yd_comm_use_cuda); where no GPU
	           * exists, ignored (one debug log line per process) */
	/* 0: with algo AUTO, time every allreduce algorithm at creation (each at 4 KiB,
	 * 256 KiB, 1 MiB and 4 MiB, the closest at 16 MiB too: 0.2 s for 2 ranks, 0.5 s for 4
	 * and 1.1 s for 8 on 2 cores, less with more cores) and let `auto` choose by what was
	 * measured; -1: choose by the built-in cost model instead. Communicators split from
	 * this one inherit it. */
	int calibrate;
	/* 0: on a calibrated communicator, `auto` also times, in the first calls of each
	 * collective and size (up to 16 MiB; at most 64-208 calls of it, each still a correct
	 * collective), the allreduce algorithms the calibration found close to the best and
	 * the other collectives' algorithms, and runs the fastest from then on
	 * (dataplane/tune.c); -1: the calibration's choice and the size rules only. Splits
	 * inherit it. */
	int tune;
};

const char *yd_dtype_name(enum yd_dtype d);
size_t yd_dtype_size(enum yd_dtype d);
const char *yd_op_name(enum yd_op op);
const char *yd_algo_name(enum yd_algo a);
/* Parses "ring", "rd", "hd", "tree", "naive", "ps", "hier", "auto"; -1 if unknown. */
int yd_algo_parse(const char *name);
const char *yd_transport_name(enum yd_transport t);
int yd_transport_parse(const char *name);

/* Connects to every peer (each rank listens on its own endpoint). Fails with YARD_ETIMEDOUT
 * naming the missing ranks if not all arrive within cfg->timeout_ms; a bad cfg (rank, world
 * size, an endpoint that is not host:port, transport, algorithm) with YARD_EINVAL naming the
 * field and its value. errbuf gets the message. */
int yd_comm_init(const struct yd_config *cfg, yd_comm **out, char *errbuf, size_t errbuf_len);

/* Same, from the environment: YARD_RANK, YARD_WORLD_SIZE, and either YARD_PEERS
 * (comma-separated host:port, one per rank) or YARD_RENDEZVOUS_FILE (a shared file each
 * rank appends "rank host:port" to, choosing a free port itself). Optional: YARD_HOSTS
 * (comma-separated host labels), YARD_TIMEOUT_MS, YARD_TCP_SOCKETS (data sockets per TCP
 * peer, 1-8), YARD_TRANSPORT, YARD_ALGO, YARD_CALIBRATE
 * (0: no calibration, see yd_config.calibrate), YARD_TUNE (0: no online tuning, see
 * yd_config.tune), YARD_CUDA (0|1),
 * YARD_NCCL (0|1|auto, read at the first device collective), YARD_RDMA_GID_INDEX (RoCE GID
 * table index 0-255, default 0). A variable that is not a whole number in range, an unknown
 * name or an endpoint that is not host:port fails with YARD_EINVAL naming it and its value. */
int yd_comm_init_env(yd_comm **out, char *errbuf, size_t errbuf_len);

/* Collective over comm: ranks with the same color form a new communicator, ordered by
 * (key, old rank). color < 0 means "not in any group" (*out = NULL). */
int yd_comm_split(yd_comm *comm, int color, int key, yd_comm **out);

/* Fails every pending and future operation with YARD_EABORTED; wakes peers' waits by closing
 * connections. Safe from any thread. */
void yd_comm_abort(yd_comm *comm);
void yd_comm_destroy(yd_comm *comm);

int yd_comm_rank(const yd_comm *comm);
int yd_comm_size(const yd_comm *comm);
const char *yd_comm_last_error(const yd_comm *comm);
/* Transport used between this rank and peer (after init). */
enum yd_transport yd_comm_transport(const yd_comm *comm, int peer);
void yd_comm_set_timeout(yd_comm *comm, int timeout_ms);
void yd_comm_set_algo(yd_comm *comm, enum yd_algo algo);
/* The algorithm an allreduce of count elements of dt runs on comm now: the forced one, or
 * what `auto` chooses (from the calibration, see yd_config.calibrate). */
enum yd_algo yd_allreduce_algo(yd_comm *comm, size_t count, enum yd_dtype dt);

/* CUDA device buffers (libyd built with the CUDA toolkit, a GPU present).
 *
 * Off by default: until enabled no CUDA call is made, so CPU programs never load the driver.
 * yd_comm_use_cuda(c) (or yd_config.cuda = 1, or YARD_CUDA=1 for yd_comm_init_env; split
 * children inherit it) enables it; YARD_EUNSUPPORTED, with the reason in
 * yd_comm_last_error(), where the library has no CUDA or no GPU exists (the communicator
 * stays usable with host buffers). Once enabled, every buffer is classified with
 * cudaPointerGetAttributes: device memory (cudaMalloc) takes the GPU path, anything else
 * (host, pinned, managed) the host path. Rules for device buffers:
 *  - send and receive buffers of one call are both on one GPU, and one communicator uses
 *    one GPU (else YARD_EINVAL, nothing changes);
 *  - every rank passes the same kind of memory to one collective: a mix is not supported
 *    (it fails with YARD_EMISMATCH once a message spans several staging chunks, and at the
 *    deadline when the device ranks use NCCL); send/recv may pair device and host buffers;
 *  - calls return when the result is in the receive buffer. Our stream is a blocking stream,
 *    so kernels on the legacy default stream finish before we read; work on non-blocking
 *    streams must be synchronised by the caller first;
 *  - yd_isend/yd_irecv refuse device buffers (YARD_EINVAL); yd_iallreduce accepts them.
 * Paths: with NCCL built in and YARD_NCCL=auto (default) or 1, allreduce, reduce_scatter,
 * allgather, broadcast and reduce go through an NCCL communicator created at the first
 * device collective (ncclUniqueId exchanged over libyd's transports; ranks agree, so all use
 * NCCL or none: auto falls back to staging, 1 fails). NCCL needs one GPU per rank and does
 * not detect mismatched arguments. Otherwise (YARD_NCCL=0, send/recv, no NCCL) buffers are
 * staged through pinned host memory in 4 MiB chunks per rank block, copies overlapping the
 * transfer, and reduced on the CPU as host buffers are; the average divides on the GPU.
 * Staged results equal the host path's bit for bit; NCCL's float reductions may round
 * differently (another summation order). */
int yd_cuda_device_count(void); /* GPUs visible to this process; 0 without CUDA */
int yd_comm_use_cuda(yd_comm *c);
/* "off" (not enabled), "undecided" (NCCL is tried at the first device collective),
 * "nccl" or "staged". */
const char *yd_comm_cuda_path(const yd_comm *c);

/* Collectives. sendbuf == recvbuf is in-place. count is elements per rank buffer as in
 * NCCL: allreduce count in and out; reduce_scatter recvcount per rank (send = count*size);
 * allgather sendcount per rank (recv = count*size). Buffers may be CUDA device pointers on a
 * communicator with CUDA enabled (see above). */
int yd_allreduce(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count, enum yd_dtype dt,
                 enum yd_op op);
int yd_reduce_scatter(yd_comm *c, const void *sendbuf, void *recvbuf, size_t recvcount,
                      enum yd_dtype dt, enum yd_op op);
int yd_allgather(yd_comm *c, const void *sendbuf, void *recvbuf, size_t sendcount,
                 enum yd_dtype dt);
int yd_broadcast(yd_comm *c, void *buf, size_t count, enum yd_dtype dt, int root);
int yd_reduce(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count, enum yd_dtype dt,
              enum yd_op op, int root);
int yd_barrier(yd_comm *c);
int yd_send(yd_comm *c, const void *buf, size_t count, enum yd_dtype dt, int peer, int tag);
int yd_recv(yd_comm *c, void *buf, size_t count, enum yd_dtype dt, int peer, int tag);

/* Nonblocking allreduce (bucketed gradient exchange overlapped with backward): starts at
 * once on the progress thread; yd_wait blocks until done (deadline applies) and frees req. */
int yd_iallreduce(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                  enum yd_dtype dt, enum yd_op op, yd_request **req);
int yd_isend(yd_comm *c, const void *buf, size_t count, enum yd_dtype dt, int peer, int tag,
             yd_request **req);
int yd_irecv(yd_comm *c, void *buf, size_t count, enum yd_dtype dt, int peer, int tag,
             yd_request **req);
int yd_wait(yd_request *req);
/* 1 if done (then yd_wait returns at once), 0 if not. */
int yd_test(yd_request *req);

#ifdef __cplusplus
}
#endif
#endif
