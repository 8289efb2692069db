/* probe.h: what a node measures at start for the parallelism planner (`yard-worker --probe`,
 * run by yard-agent): the f32 matmul rate of one device through the trainer's own matmul
 * (model_matmul_forward/backward, i.e. OpenBLAS single-threaded or the plain loops) at the
 * GEMM sizes the trainer runs, the trainer's residual block (fresh inputs every pass, inside
 * a chunk of blocks, as a stage runs it), how much of that rate survives when every device of
 * the node computes at once, the bandwidth and latency of a two-rank libyd allreduce between
 * two local processes over shared memory and over TCP (loopback), and what an exchange adds
 * to ranks that compute in lockstep (wall and CPU time, for a pipeline-style message and a
 * one-float allreduce, with 2 processes and one per device). The figures that depend on what
 * other programs leave of the cores are the median of 3 rounds spread over the probe.
 *
 * Bounded: the whole probe takes about budget_ms (a fraction per measurement), never hangs on
 * a communicator (its timeout is the budget), and reports what it could not measure as an
 * error rather than a guess. Not here: inter-node bandwidth between two machines (the agent
 * takes it from its configuration, see docs/api.md "perf").
 */
#ifndef YARD_DATAPLANE_PROBE_H
#define YARD_DATAPLANE_PROBE_H

#include <jansson.h>

#include "common/err.h"

#define PROBE_GEMM_POINTS 6
#define PROBE_BLOCK_SHAPES 8

struct probe_result {
	int devices; /* devices measured concurrently for parallel_efficiency */
	/* one device, alone: rate of forward + backward of one linear layer (n, i) -> o, keyed by
	 * the flops of one GEMM call (2·n·i·o), ascending */
	int gemm_points;
	double gemm_call_flops[PROBE_GEMM_POINTS];
	double gemm_flops_per_s[PROBE_GEMM_POINTS];
	double flops_per_s; /* the largest size's rate */
	/* sum of the rates of `devices` processes computing at once / (devices × alone rate):
	 * 1 when devices do not share compute, ~cores/devices when CPU devices oversubscribe */
	double parallel_efficiency;
	/* the share of a core one process got over a window, against its best slice: 1 on an
	 * idle machine, less when other programs compete for it; the GEMM curve and the block
	 * and optimiser costs are best-slice figures (what the device does undisturbed) */
	double availability;
	/* one residual block of the trainer (layernorm, two linears, GELU, residual: the real
	 * model_chunk_forward + model_chunk_backward) timed at PROBE_BLOCK_SHAPES (rows n, d,
	 * f) and fitted (least squares, relative error) as
	 *   seconds = mac_s·n·d·f + weight_s·d·f + hidden_s·n·f + model_s·n·d + call_s
	 * (weight_s: every micro-batch's backward reads and accumulates the whole weight
	 * matrices, which dominates for few rows) */
	double block_mac_s, block_weight_s, block_hidden_s, block_model_s, block_call_s;
	double block_fit_error; /* largest relative misfit over the shapes */
	/* optimiser step (optim_step + model_zero_grad) per parameter */
	double adamw_s_per_param, sgd_s_per_param;
	double shm_bw_bytes_per_s, shm_latency_s;
	/* per ring step of a 1-float allreduce over all the node's devices (at most 16) at once:
	 * above shm_latency_s when they outnumber the cores and every wait needs a switch */
	double shm_busy_latency_s;
	/* what one exchange of a float between ranks adds in the trainer's pattern: every
	 * process computes ~100 µs of work, then isends a float to the next and receives the
	 * previous one's (as pipeline stages do), against the same work without the exchange,
	 * in phases that alternate so that both see the machine alike. shm_sync_s: the wall
	 * time it adds with 2 processes (waits, spins, sleeps and wake-ups the back-to-back
	 * latency never sees); *_cpu_s: the CPU time it adds per process (spinning, system
	 * calls, thread switches), with 2 processes and with one per device (busy) */
	double shm_sync_s, shm_sync_cpu_s, shm_busy_sync_cpu_s;
	double shm_busy_sync_s; /* the wall time with one process per device */
	/* the same with a blocking one-float allreduce in place of the exchange (as
	 * tensor-parallel ranks do; isend hands its exchange to the progress thread) */
	double shm_allreduce_sync_s, shm_allreduce_sync_cpu_s, shm_busy_allreduce_sync_cpu_s;
	double tcp_bw_bytes_per_s, tcp_latency_s;
	double elapsed_s;
};

/* The i-th block shape (rows, d_model, d_ff) the probe times. */
void probe_block_shape(int i, int shape[3]);
/* Fits the block cost terms of r to seconds measured at the block shapes; -1 when the fit
 * has no positive matmul term. */
int probe_block_fit(const double times[PROBE_BLOCK_SHAPES], struct probe_result *r);
/* Marks in again[] the shapes whose time lies more than `limit` (relative) from r's fit, at
 * most `max` of them, the farthest first, and returns how many: a shape timed while other
 * work held the core (the largest gets two or three passes in its window) stands out of a fit
 * the others agree on, and is timed again. */
int probe_block_misfits(const double times[PROBE_BLOCK_SHAPES], const struct probe_result *r,
                        double limit, int max, int again[PROBE_BLOCK_SHAPES]);
/* Runs every measurement (forks helper processes). err names the part that failed. */
int probe_run(int devices, int budget_ms, struct probe_result *out, struct yard_err *err);
/* {"flops_per_s", "gemm": [[call_flops, flops_per_s]...], "parallel_efficiency",
 *  "block": {"mac_s", "weight_s", "hidden_s", "model_s", "call_s", "fit_error"},
 *  "optim_s_per_param": {"adamw", "sgd"}, "availability",
 *  "intra_bw_bytes_per_s", "intra_latency_s", "intra_busy_latency_s", "tcp_bw_bytes_per_s",
 *  "tcp_latency_s",
 *  "devices", "probe_ms"} (new reference). */
json_t *probe_to_json(const struct probe_result *r);

#endif
