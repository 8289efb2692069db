/* trainer.h: one rank of the built-in hybrid-parallel trainer. Runs the stage's pipeline
 * schedule (schedule.h) over its model slice (model.h), starts data-parallel gradient buckets
 * as backward completes them, clips by the global norm, steps the optimiser, and saves and
 * restores its checkpoint shard. Communication goes through a trainer_net (real data plane or
 * in-process threads); the process around it (environment, metrics sinks, debug hooks that
 * end the process) is yard-worker's (worker.c).
 *
 * Equivalence: the data order, the initial parameters and every reduction are defined on the
 * global batch, so any dp x tp x pp layout computes the loss of one process up to float
 * rounding: the loss is the mean over the global batch accumulated in double; backward scales
 * by 1/global batch and data-parallel gradients are summed. */
#ifndef YARD_TRAINER_H
#define YARD_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "dataplane/data.h"
#include "dataplane/model.h"
#include "dataplane/optim.h"
#include "dataplane/schedule.h"
#include "dataplane/trainer_net.h"
#include "jobs/spec.h"

struct trainer_metrics {
	int64_t step; /* 1-based number of the step just finished */
	double loss, accuracy, lr;
	double step_ms, compute_ms, comm_wait_ms, bubble_ms;
	double dp_wait_ms; /* part of comm_wait_ms spent waiting for gradient buckets */
	double samples_per_s;
	double grad_norm; /* global gradient norm before clipping (0 when clipping is off) */
	size_t peak_activation_bytes;
	/* some rank asked for a checkpoint this step (trainer.checkpoint_wanted): every rank
	 * sees the same answer at the same step, so all of them can save it */
	int checkpoint_agreed;
};

struct trainer_bucket {
	size_t offset, numel; /* range of the flat gradient array */
	int pending;          /* parameters whose gradient is not final yet this step */
	struct trainer_net_req *req;
	int started;
};

struct trainer {
	struct jobspec_model model_spec;
	struct jobspec_train train;
	struct jobspec_parallel par;
	char job_id[64];
	int rank, world, dp_i, pp_i, tp_i;
	int rows_per_micro; /* train.batch_size / (dp * m) */
	double slow_factor; /* > 1: this rank's compute is stretched by sleeping */
	/* benchmarks and debug.block_ms: every block's forward / backward additionally takes
	 * this long (sleeping), giving uniform, known stage costs on machines with fewer cores
	 * than ranks; slow_factor stretches it too */
	double block_forward_ms, block_backward_ms;
	/* set by the caller: this rank was asked for a checkpoint (the agent's request file,
	 * worker.c); the next step's loss allreduce tells every rank, and trainer_step clears it
	 * once told */
	int checkpoint_wanted;

	struct model model;
	struct optim optim;
	struct data_set data;
	struct sched_program program;
	struct trainer_net *net; /* borrowed */
	int64_t step;            /* steps completed */

	/* per step, indexed by mb * v + chunk */
	struct model_acts **acts;
	float **dresid;                 /* (rows, d) gradient buffers */
	float **sendbuf;                /* (rows, d) activations being sent */
	struct trainer_net_req **sends; /* 2 per (mb, chunk) */
	int nsends;
	int *backward_done; /* per chunk: backwards run this step */
	size_t act_bytes, peak_act_bytes;
	float *xbuf;   /* (rows, d_in) micro-batch features */
	int32_t *ybuf; /* (rows) micro-batch labels */

	struct trainer_bucket *buckets;
	int nbuckets, next_bucket;
	int *param_bucket; /* per parameter */

	double tp_ms; /* time in TP allreduces during this step */
};

/* Builds rank `rank` of spec's layout: model slice from model.seed, data (synthetic or
 * train.dataset), schedule, buckets. net is borrowed. err names the bad field or size. */
int trainer_init(struct trainer *t, const struct jobspec *spec, int rank, const char *job_id,
                 struct trainer_net *net, struct yard_err *err);
void trainer_free(struct trainer *t);

/* Runs one training step (collective over all ranks). */
int trainer_step(struct trainer *t, struct trainer_metrics *out, struct yard_err *err);

/* Checkpoints: DIR/step-NNNNNNNN/rank-NNNNN.shard, and DIR/step-NNNNNNNN/MANIFEST written by
 * rank 0 once every rank has written its shard (the step is complete only with it). Saving is
 * collective; keep > 0 removes all but the newest keep complete steps. */
int trainer_save(struct trainer *t, const char *dir, int keep, struct yard_err *err);
/* Restores the newest complete step in dir (collective: every rank must find the same).
 * YARD_ENOTFOUND when dir holds none. A step whose MANIFEST records a smaller world over the
 * same tp and pp (a smaller dp) restores too: rank r reads the shard of rank r mod that world;
 * a larger dp's shards restore into a smaller dp rank for rank. A step of another tp, pp, v or
 * m (its MANIFEST's layout line, else rank 0's shard, says so) is resharded: each rank
 * assembles its tensors from the shards of that layout's replica 0 (ckpt_read_resharded).
 * A shard missing from a complete step is an error (YARD_ECORRUPT), never YARD_ENOTFOUND. */
int trainer_restore(struct trainer *t, const char *dir, struct yard_err *err);

/* The per-step JSON line (no newline). */
int trainer_metrics_json(const struct trainer_metrics *m, int rank, char *buf, size_t len);

/* Runs this program again (same pid, arguments and environment) with OPENBLAS_NUM_THREADS=1
 * when that variable is unset, so that OpenBLAS never starts its thread pool; call first
 * thing in main. The pool starts when the library loads, before main, and its idle thread
 * (one per further core) spins in sched_yield for about 0.35 s even after
 * openblas_set_num_threads(1): a third of a 2-core node's CPU samples while a rank starts,
 * next to ranks that need the cores. Returns only when no exec was needed or it failed (then
 * the process runs on, with the pool). */
void trainer_blas_single_threaded(char **argv);

/* Maps the job spec's optimiser and schedule onto this module's enums. */
enum sched_kind trainer_sched_kind(enum jobspec_schedule s);

#endif
