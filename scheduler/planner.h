/* planner.h: the parallelism planner behind `parallel: "auto"` and `yardctl plan`.
 *
 * Enumerates layouts (dp × tp × pp, schedule, virtual stages v, micro-batches m) of the
 * built-in trainer's model on the devices at hand, drops those that break a rule of the
 * trainer or do not fit in device memory, and ranks the rest by a predicted step time from
 * an alpha-beta cost model whose rates (FLOP/s, bandwidths, latency) come from what the
 * agents measured. Pure: no I/O, no clock; the same input gives the same ranking.
 *
 * Cost model, per optimiser step, for the slowest pipeline stage (all stages are cut to
 * within one block of each other):
 *   compute   = blocks × m × the measured block cost at (micro-batch rows, d_model,
 *               d_ff/tp) (matmuls, a pass over the weights per micro-batch, GELU,
 *               layernorm and a per-call cost, fitted by the agent's probe), plus the
 *               input projection / head as 3 × forward FLOPs at the measured GEMM rate for
 *               their size (interpolated on the measured curve: small GEMMs run far below
 *               peak). Without a block cost: 3 × forward FLOPs / rate. Divided by the
 *               measured availability (the share of a core a lone process gets)
 *   sync      = the measured wall time one exchange within a node adds in the trainer's
 *               pattern (ranks compute, then each waits for a peer's message), with cores
 *               to spare: once per allreduce (its ranks meet once; the ring's later steps
 *               follow at the back-to-back latency) and once per pipeline message, on top
 *               of the messages' latency and bandwidth
 *   tp comm   = 2 allreduces per block per micro-batch (forward output + backward input
 *               gradient), each a ring: 2(tp−1)/tp · bytes / intra_bw + 2(tp−1) · latency,
 *               plus a sync; messages within a node whose ranks outnumber what it computes
 *               at once cost the measured busy latency instead of the two-device one
 *   pp comm   = one activation forward and one gradient backward per micro-batch per chunk
 *               boundary, on the link between the stages (intra-node when p·tp fits in a
 *               node, else inter-node); intra-node messages add a sync each, for the ranks
 *               on the node (2 ranks: sync; every device: the busy figure, where the
 *               receiver waits for its descheduled producer to get a core; linear
 *               between), at most the compute of one message's worth of the stage (the
 *               producer's chunk: the longest a receiver can wait for it once it runs)
 *   bubble    = (p−1)/(v·m + p−1) of the pipelined time
 *   optimiser = the device's parameters × the measured step cost per parameter, after the
 *               pipeline drains (not part of the bubble), at the rank's share of the node:
 *               every rank starts it when the loss allreduce (below) returns, so all of
 *               the node's ranks run theirs at once, a pipeline's stages included
 *   dp comm   = ring allreduce of the stage's gradients over dp replicas, in the trainer's
 *               buckets (train.bucket_mb), each an allreduce of its own on the progress
 *               thread: per bucket 2(dp−1) ring steps, each costing the latency and the
 *               pipeline message's sync; buckets start during the backward of the last
 *               micro-batch (gradients accumulate until then), so that backward hides up
 *               to its own length and only the rest is exposed, when the node has a core
 *               to spare for the progress thread (none is hidden on a crowded node)
 *   loss comm = the step's allreduce of 4 numbers (loss, accuracy, rows, gradient norm)
 *               over every rank, plus a sync, after the pipeline drains
 *   step      = forward and backward, the larger of the critical path
 *                 (compute + tp + pp) / (1 − bubble) + exposed dp + loss comm
 *               and the node's work over its capacity (when the ranks on a node outnumber
 *               what it computes at once: CPU devices on fewer cores, the measured
 *               parallel efficiency)
 *                 (compute + exchanges × sync CPU) × ranks on the node / capacity
 *               where sync CPU is the measured CPU time an exchange costs a rank (spins,
 *               system calls, thread switches) for the ranks on the node, and the
 *               exchanges are a rank's 2·blocks·m tensor-parallel allreduces, 2·v·m
 *               pipeline messages, its buckets' ring steps and its loss allreduce
 *               (a rank that waits for a message or in the bubble leaves its core to
 *               another rank, so a crowded node's step is its total work over its
 *               capacity, a pipeline's at least its critical path); then the optimiser.
 *               When the node's bound wins, compute is stretched to add up to it.
 * Memory per device = parameters + gradients + optimiser state (AdamW 2, SGD 1 extra copy)
 * + activations of the micro-batches in flight (GPipe m, 1F1B min(m, p), interleaved
 * Megatron's warm-up depth), all f32.
 */
#ifndef YARD_SCHED_PLANNER_H
#define YARD_SCHED_PLANNER_H

#include <stdint.h>

#include "common/err.h"

#define PLAN_RATE_POINTS_MAX 16

struct plan_model {
	int d_in, d_model, d_ff, layers, classes;
	int batch_size;      /* global samples per step */
	int adamw;           /* 1: AdamW (2 state tensors), 0: SGD with momentum (1) */
	double bucket_bytes; /* data-parallel gradient bucket (train.bucket_mb); 0: one bucket */
};

struct plan_cluster {
	int devices;          /* devices available to the job */
	int devices_per_node; /* largest group of devices on one node */
	double device_memory_bytes;
	double flops_per_s;          /* measured f32 matmul rate of one device */
	double intra_bw_bytes_per_s; /* measured between devices of one node (shm) */
	double inter_bw_bytes_per_s; /* measured between nodes (TCP/RDMA) */
	double latency_s;            /* per message between devices of one node */
	/* per message between devices of one node when all its devices run ranks (measured
	 * over all of them: higher when they outnumber the cores); 0: latency_s */
	double busy_latency_s;
	double inter_latency_s; /* per message between nodes; 0: latency_s */
	/* measured: what one exchange between ranks of one node adds in the trainer's pattern
	 * (ranks compute, then each waits for a peer's message), for a point-to-point message
	 * (pipeline) and a blocking allreduce (tensor-parallel, loss): the wall time with 2
	 * ranks (waits, spins, sleeps, wake-ups), and the CPU time per rank with 2 and with
	 * devices_per_node ranks (busy). 0: not measured (no such term; an allreduce figure of
	 * 0 falls back to the point-to-point one) */
	double sync_s, sync_cpu_s, busy_sync_cpu_s;
	/* the wall time of a point-to-point exchange with devices_per_node ranks (a crowded
	 * node: the receiver waits for its producer to get a core); 0: sync_s */
	double busy_sync_s;
	double allreduce_sync_s, allreduce_sync_cpu_s, busy_allreduce_sync_cpu_s;
	/* 1: the allreduce figures above were measured, and a 0 among them means the allreduce
	 * added nothing measurable (probes measure 0 to 31 µs here); 0: not measured (an older
	 * agent's perf), the point-to-point figures stand in for them */
	int allreduce_measured;
	/* optional measured GEMM curve: rate (flop/s) by the flops of one GEMM call, ascending;
	 * 0 points: flops_per_s at every size */
	int rate_points;
	double rate_call_flops[PLAN_RATE_POINTS_MAX];
	double rate_flops_per_s[PLAN_RATE_POINTS_MAX];
	/* measured: sum of the rates of devices_per_node devices computing at once over
	 * devices_per_node × one alone, in (0, 1]; 0 means 1 (devices do not share compute) */
	double parallel_efficiency;
	/* measured share of a core a lone process gets (other programs on the machine), in
	 * (0, 1]; 0 means 1. Scales every compute cost, as the parallel efficiency does */
	double availability;
	/* 1: the devices are the host's cores (CPU devices), so a rank's communication thread
	 * takes its core from some rank's compute; 0: accelerators, whose hosts have cores to
	 * spare for it */
	int host_compute;
	/* optional measured cost of one trainer block (forward + backward) of n rows, width d and
	 * local hidden width fl: block_mac_s·n·d·fl + block_weight_s·d·fl + block_hidden_s·n·fl
	 * + block_model_s·n·d + block_call_s seconds; block_mac_s 0: blocks are costed from the
	 * GEMM rate alone */
	double block_mac_s, block_weight_s, block_hidden_s, block_model_s, block_call_s;
	/* optional measured optimiser step (with zeroing the gradients), seconds per parameter */
	double adamw_s_per_param, sgd_s_per_param;
};

enum plan_schedule { PLAN_GPIPE, PLAN_1F1B, PLAN_INTERLEAVED };

struct plan_candidate {
	int dp, tp, pp, v, m;
	enum plan_schedule schedule;
	double step_s; /* predicted step time */
	double compute_s, tp_comm_s, pp_comm_s, dp_comm_s, dp_exposed_s;
	double loss_comm_s; /* the step's allreduce of loss, accuracy and gradient norm */
	double optim_s;     /* optimiser step after the loss allreduce: a node's ranks at once */
	double bubble_fraction;
	double memory_bytes; /* per device, the largest stage */
	double comm_bytes;   /* bytes each device sends per step */
};

struct plan_result {
	int count;                         /* candidates that fit, best first */
	struct plan_candidate *candidates; /* owned */
	int rejected_memory;               /* layouts dropped for memory */
	int rejected_rules;                /* layouts dropped by trainer rules */
};

const char *plan_schedule_name(enum plan_schedule s);

/* The measured GEMM rate of one device for a call of call_flops (the curve, interpolated). */
double plan_device_rate(const struct plan_cluster *cluster, double call_flops);
/* The share (0, 1] of a device's compute each rank gets when ranks_on_node ranks (on
 * average: a fraction for the ranks of a pipeline that compute at once) share a node (see
 * the cost model above). */
double plan_device_share(const struct plan_cluster *cluster, double ranks_on_node);
/* The CPU time one exchange (allreduce: an allreduce, else a pipeline message) costs a rank
 * when ranks_on_node ranks share a node (measured with 2 and devices_per_node; linear
 * between). */
double plan_sync_cpu(const struct plan_cluster *cluster, int ranks_on_node, int allreduce);
/* The wall time a pipeline message adds when ranks_on_node ranks share a node (the same
 * interpolation, between sync_s and busy_sync_s). */
double plan_pipeline_sync(const struct plan_cluster *cluster, int ranks_on_node);
/* Data-parallel gradient buckets on the stage with the head (see the cost model). */
int plan_dp_buckets(const struct plan_model *model, const struct plan_candidate *c);
/* Predicts one layout (no rule checks). */
void plan_predict(const struct plan_model *model, const struct plan_cluster *cluster,
                  struct plan_candidate *c);
/* 0 if the trainer can run the layout; otherwise a reason naming the rule. */
int plan_layout_valid(const struct plan_model *model, const struct plan_cluster *cluster,
                      const struct plan_candidate *c, char *why, int why_len);
/* Enumerates and ranks every layout. YARD_ENOSPACE with err when nothing fits. */
int plan_run(const struct plan_model *model, const struct plan_cluster *cluster,
             struct plan_result *out, struct yard_err *err);
/* One sentence on why the first candidate won over the runner-up. */
void plan_explain(const struct plan_result *r, char *out, int out_len);
void plan_result_free(struct plan_result *r);

#endif
