/* autoplan.h: the planner (planner.h) applied to a job spec and the cluster as the controller
 * sees it: the committed node rows plus the rates each agent measured (its heartbeat "perf",
 * leader soft state). Used by POST /v1/plan and by the scheduler when it places a job with
 * `parallel: "auto"`; the plan a job got is committed with its placement (job.assign "plan")
 * and turned back into a concrete layout for its ranks (desired.c).
 *
 * The cluster view for a job: up, uncordoned nodes whose devices match the job's device kind
 * and that have measured rates; devices = their devices (at most the spec's "ranks" when it
 * gives one); per-device figures are the slowest node's (a synchronous job runs at the pace
 * of its slowest rank): least FLOP rate (with that node's GEMM curve and parallel
 * efficiency), least device memory, least bandwidths, largest latencies.
 * Pure functions over JSON: no I/O, no clock. */
#ifndef YARD_SCHED_AUTOPLAN_H
#define YARD_SCHED_AUTOPLAN_H

#include <jansson.h>

#include "common/err.h"
#include "jobs/spec.h"
#include "scheduler/planner.h"

#define AUTOPLAN_DEFAULT_LIMIT 10

/* A node measured below this fraction of the fastest node's FLOP rate is a slow one; when
 * the cluster without the slow nodes has a plan predicted faster than AUTOPLAN_SLOW_GAIN of
 * the winner's step time, the answer names them (see autoplan_run). */
#define AUTOPLAN_SLOW_RATIO 0.8
#define AUTOPLAN_SLOW_GAIN 0.9
#define AUTOPLAN_SLOW_NAMED 8

/* Validates an agent's "perf" object; returns a clean copy (new reference) or NULL with err
 * naming the field ("perf.flops_per_s: must be a positive number"). */
json_t *autoplan_perf_clean(const json_t *perf, struct yard_err *err);

/* Fills the planner's model from a parsed trainer spec. */
void autoplan_model(const struct jobspec *spec, struct plan_model *out);

/* The cluster view described above. nodes: committed node rows (fsm_nodes_list);
 * perf_by_node: {"node-id": perf}. YARD_ENOSPACE with err when no node qualifies, naming how
 * many were unmeasured or of the wrong kind. */
int autoplan_cluster(const json_t *nodes, const json_t *perf_by_node, const struct jobspec *spec,
                     struct plan_cluster *out, struct yard_err *err);

/* How many ranks a plan of spec could have on the cluster now: the devices autoplan_cluster
 * counts (up, uncordoned, measured nodes of the job's kind; at most spec's ranks), 0 when
 * none qualifies, -1 for a spec that does not parse. */
int autoplan_capacity(const json_t *spec, const json_t *nodes, const json_t *perf_by_node);

/* The devices of up, uncordoned, measured nodes, by kind: what autoplan_capacity counts
 * for a CPU job (*cpu), a CUDA job (*cuda) or a job of any kind (their sum), before the
 * spec's "ranks" caps it; one walk of the nodes for every job that asks. */
void autoplan_devices(const json_t *nodes, const json_t *perf_by_node, int *cpu, int *cuda);

/* Plans spec (a normalized job spec object) for the cluster: {"cluster", "count",
 * "rejected_memory", "rejected_rules", "explanation", "candidates": [the best `limit`, or all
 * when limit ≤ 0]}; each candidate {"layout": {dp, tp, pp, schedule, virtual_stages,
 * micro_batches}, "world", "step_ms", "compute_ms", "tp_comm_ms", "pp_comm_ms", "dp_comm_ms",
 * "dp_exposed_ms", "bubble_fraction", "memory_mb", "comm_mb"}; with "slow_nodes" {"nodes",
 * "count", "slowest_ratio", "without": the best candidate on the other nodes} when leaving
 * out the nodes measured slow would be predicted faster (the candidates are still costed on
 * every node, at the slow ones' rates; the explanation names them and says to cordon them or
 * measure them again). NULL with err for a bad spec (YARD_EINVAL naming the field), a command
 * job, or a cluster where nothing fits. */
json_t *autoplan_run(const json_t *spec, const json_t *nodes, const json_t *perf_by_node, int limit,
                     struct yard_err *err);

/* How many of the best candidates a job's recorded plan keeps ("ranked"): what the
 * dashboard's candidates table shows, small enough for the committed plan's size limit. */
#define AUTOPLAN_RECORD_RANKED 5

/* The plan a job records: the winner with the cluster it was made for, the explanation, the
 * runner-up and the best AUTOPLAN_RECORD_RANKED candidates in rank order ("ranked", the
 * winner first) (new reference), from autoplan_run's answer; pass it an answer made with a
 * limit of at least AUTOPLAN_RECORD_RANKED. */
json_t *autoplan_record(const json_t *plan_answer);

/* Reads the layout of a recorded plan ({"layout": {...}}) into p (validated: positive sizes,
 * a known schedule). YARD_EINVAL with err naming the field otherwise. */
int autoplan_layout(const json_t *plan, struct jobspec_parallel *p, struct yard_err *err);

#endif
