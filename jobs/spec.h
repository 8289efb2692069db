/* spec.h: the job spec (DESIGN.md §5) as JSON and as a C struct, with strict validation.
 *
 * Every module that reads a job spec (the controller on submit, yard-run, yard-worker, the
 * agent) goes through jobspec_parse, so a bad spec is refused the same way everywhere: the
 * yard_err names the field ("parallel.tp: 3 does not divide model.d_ff (256)").
 * Documented for users in docs/jobspec.md with examples/ files.
 */
#ifndef YARD_JOBS_SPEC_H
#define YARD_JOBS_SPEC_H

#include <jansson.h>
#include <stdint.h>

#include "common/err.h"

#define JOBSPEC_NAME_MAX 63
#define JOBSPEC_TIME_LIMIT_MAX_S (366 * 86400)
#define JOBSPEC_AFTER_MAX 16  /* jobs a job may wait for */
#define JOBSPEC_JOB_ID_MAX 23 /* "j-" and up to 21 digits */
#define JOBSPEC_PATH_MAX 255
#define JOBSPEC_ARGV_MAX 64
#define JOBSPEC_ENV_MAX 64
/* failure.straggler.persist_s by default: a disturbance of a few seconds (a checkpoint
 * write, a neighbour's burst) flags no rank of a job whose steps are fast */
#define STRAGGLER_PERSIST_S 10.0

enum jobspec_schedule { JOBSPEC_GPIPE, JOBSPEC_1F1B, JOBSPEC_INTERLEAVED };
enum jobspec_optimizer { JOBSPEC_SGD, JOBSPEC_ADAMW };
enum jobspec_device { JOBSPEC_DEVICE_ANY, JOBSPEC_DEVICE_CPU, JOBSPEC_DEVICE_CUDA };
enum jobspec_straggler_policy {
	JOBSPEC_STRAGGLER_OFF,
	JOBSPEC_STRAGGLER_REPORT,
	JOBSPEC_STRAGGLER_REPLACE
};

struct jobspec_model { /* the built-in trainer's residual MLP classifier */
	int d_in;      /* input features */
	int d_model;   /* residual width d */
	int d_ff;      /* hidden width f of each block */
	int layers;    /* number of residual blocks */
	int classes;   /* output classes */
	uint64_t seed; /* parameter init */
};

struct jobspec_train {
	int64_t steps;
	int batch_size; /* global batch per step (split over dp and micro-batches) */
	double lr;
	enum jobspec_optimizer optimizer;
	double momentum;          /* sgd */
	double beta1, beta2, eps; /* adamw */
	double weight_decay;
	double clip_norm;                   /* 0 = no clipping */
	double bucket_mb;                   /* data-parallel gradient bucket size */
	char dataset[JOBSPEC_PATH_MAX + 1]; /* "synthetic" or a path in the documented format */
	uint64_t data_seed;
	int samples; /* synthetic dataset size */
};

struct jobspec_parallel {
	int is_auto; /* "parallel": "auto" — the planner fills the rest */
	int dp, tp, pp;
	enum jobspec_schedule schedule;
	int virtual_stages; /* v, interleaved only (1 otherwise) */
	int micro_batches;  /* m */
};

/* checkpoint.before_restart_s when the spec does not set it: asked of the built-in trainer's
 * ranks, not of a command job's (whose program may not honour YARD_CHECKPOINT_REQUEST) */
#define JOBSPEC_BEFORE_RESTART_S 30

struct jobspec_checkpoint {
	int64_t every_steps; /* 0 = never */
	int keep;
	/* a planned restart (drain, straggler replacement, growing back, a rollout's restart)
	 * first asks the ranks for a checkpoint and waits at most this long for it to be
	 * complete; 0: restart at once; -1: not set (jobspec_before_restart_s) */
	int before_restart_s;
	char store[JOBSPEC_PATH_MAX + 1]; /* "controller" or "dir:/path" */
};

struct jobspec_failure {
	int max_restarts;
	int hang_timeout_s; /* no step within this → the rank is hung */
	/* > 0: a rank that reports no step within this of its start is hung (then
	 * hang_timeout_s); 0: a trainer rank gets hang_timeout_s from its start and a command
	 * rank is judged only once it has reported a step */
	int first_step_timeout_s;
	/* > 0: a node's agent stops the job's ranks once it has reached no controller for this
	 * many seconds (fencing: the job may run again on the other side of a partition);
	 * 0: they keep running */
	double stop_on_disconnect_s;
	int allow_shrink_dp;
	enum jobspec_straggler_policy straggler_policy;
	double straggler_threshold; /* 0.2 = 20% over the median */
	int straggler_windows;      /* K consecutive windows */
	int straggler_window_steps; /* W */
	double straggler_persist_s; /* time constant of the slow share: flagged only when slow
	                             * over half of the recent ~persist_s (and in the last K
	                             * windows); 0: the windows alone decide */
	int max_replacements;
};

struct jobspec_debug {
	int slow_rank;                        /* -1 = none: test hook, slows that rank's compute */
	char slow_node[JOBSPEC_NAME_MAX + 1]; /* "" = none: slows every rank placed on that node */
	double slow_factor;
	double block_ms; /* 0 = none: each block's forward sleeps this long, backward 2x */
	int hang_rank;   /* -1 = none */
	int64_t hang_at_step;
	int crash_rank; /* -1 = none */
	int64_t crash_at_step;
};

struct jobspec {
	char name[JOBSPEC_NAME_MAX + 1];
	int priority;   /* -1000..1000, higher runs first */
	/* 0..JOBSPEC_TIME_LIMIT_MAX_S, 0 = none: the job fails this long after its first
	 * placement (restarts and waits included), its ranks asked for a checkpoint first */
	int time_limit_s;
	/* "after": jobs (ids) that must all succeed before this one is placed; it fails when
	 * one of them fails, is cancelled or is deleted */
	char after[JOBSPEC_AFTER_MAX][JOBSPEC_JOB_ID_MAX + 1];
	int n_after;
	int is_command; /* 1: run `command` with torchrun-style env; 0: built-in trainer */
	int argc;
	char *argv[JOBSPEC_ARGV_MAX + 1]; /* owned, NULL-terminated */
	int envc;
	char *env[JOBSPEC_ENV_MAX + 1]; /* owned "KEY=VALUE", NULL-terminated */
	int ranks;                      /* command jobs: world size (dp*tp*pp for trainer jobs) */
	struct jobspec_model model;
	struct jobspec_train train;
	struct jobspec_parallel parallel;
	enum jobspec_device device;
	int64_t memory_mb; /* per device, 0 = unspecified */
	struct jobspec_checkpoint checkpoint;
	struct jobspec_failure failure;
	struct jobspec_debug debug;
};

/* Fills spec with the defaults of every optional field. */
void jobspec_defaults(struct jobspec *spec);
/* Validates and converts. Unknown fields, wrong types, out-of-range values and
 * inconsistent combinations fail with YARD_EINVAL and err naming the field. On failure spec
 * holds nothing that needs freeing. */
int jobspec_parse(const json_t *json, struct jobspec *spec, struct yard_err *err);
/* Convenience: reads and parses a file (bounded size). */
int jobspec_load_file(const char *path, struct jobspec *spec, struct yard_err *err);
/* The normalized spec with every default filled in (new reference). */
/* The checkpoint.before_restart_s that applies: the spec's, else JOBSPEC_BEFORE_RESTART_S for
 * the built-in trainer and 0 for a command job. */
int jobspec_before_restart_s(const struct jobspec *spec);
json_t *jobspec_to_json(const struct jobspec *spec);
void jobspec_free(struct jobspec *spec);

/* The spec the ranks of a job run when its data-parallel degree is shrunk to dp
 * (failure.allow_shrink_dp): spec (a normalized spec) with parallel.dp = dp and ranks =
 * dp × tp × pp, validated like a submitted spec, so a layout the trainer would refuse
 * (train.batch_size not divisible by dp × micro_batches, a debug rank outside the smaller
 * world) is refused here. dp equal to the spec's dp returns the spec unchanged. Returns a new
 * reference, or NULL with err naming why: not a fixed-layout trainer job, allow_shrink_dp
 * false, dp outside 1..parallel.dp, or the rule the shrunk spec breaks. */
json_t *jobspec_with_dp(const json_t *spec, int dp, struct yard_err *err);

/* Rank layout (Megatron order, DESIGN.md §5): tp innermost, then pp, then dp. */
static inline int jobspec_rank(const struct jobspec_parallel *p, int dp_i, int pp_i, int tp_i)
{
	return (dp_i * p->pp + pp_i) * p->tp + tp_i;
}
static inline void jobspec_coords(const struct jobspec_parallel *p, int rank, int *dp_i, int *pp_i,
                                  int *tp_i)
{
	*tp_i = rank % p->tp;
	*pp_i = (rank / p->tp) % p->pp;
	*dp_i = rank / (p->tp * p->pp);
}

const char *jobspec_schedule_name(enum jobspec_schedule s);

#endif
