/* rollout.h: the rollout driver, the leader-only half of rollouts (the replicated half is
 * jobs/fsm_rollout.c). It owns the soft state rollouts need from heartbeats (each node's
 * running agent and worker versions, its upgrade reports, the step time of its ranks),
 * answers heartbeats with upgrade or rollback offers computed from the committed rollout, and
 * proposes the next step of the active rollout when its condition holds. For an agent build
 * "the build" below is the agent's version and its "upgrade" report; for a worker build
 * (component "worker") the node's "worker_version", the yard-worker its new ranks start with,
 * and its "worker_upgrade" report (installed: downloaded, verified, --version and --self-test
 * passed; running ranks keep their binary):
 *
 *   pending            → wave 1 cordon
 *   cordon             → upgrade (the step time of the wave's ranks is kept as the baseline)
 *   upgrade            a node heartbeating on the build with its upgrade "done" (downloaded,
 *                      verified, self-test passed, exec'd, healthy) → node upgraded; a node
 *                      reporting "failed" or "rolled-back" for this rollout, a down node, or
 *                      gate_timeout_ms without the build → node failed. More failures than
 *                      the failure budget → rolling-back at once; every node decided → verify
 *   verify             every upgraded node still heartbeats on the build → soak (policy
 *                      "restart": the jobs with ranks on the wave restart now, from their
 *                      newest checkpoint, on the upgraded agents or the new worker; "keep"
 *                      and "next" leave running ranks alone: a worker build reaches them
 *                      when they next restart)
 *   soak               soak_ms with every node still on the build and up; then the optional
 *                      step-time gate (mean step_ms of the wave's ranks against the baseline)
 *                      → uncordon, else rolling-back
 *   uncordon           → the next wave's cordon, or completed
 *   rolling-back       a node heartbeating on its previous build → node rolled-back; all back
 *                      (or 2 × gate_timeout_ms passed) → rolled-back
 *
 * One proposal is in flight at a time; the state machine refuses a step that does not follow
 * the committed one, so a stale decision changes nothing. */
#ifndef YARD_SCHED_ROLLOUT_H
#define YARD_SCHED_ROLLOUT_H

#include <jansson.h>
#include <stdint.h>

#include "common/err.h"
#include "jobs/fsm.h"
#include "scheduler/leader.h"

struct rollout_driver;

struct rollout_driver *rollout_driver_create(struct fsm *fsm, const struct sched_io *io);
void rollout_driver_destroy(struct rollout_driver *d);
/* Leadership changed: soft state is dropped, late proposals are ignored. */
void rollout_driver_leading(struct rollout_driver *d, int leading);
/* Validates the optional "upgrade" or "worker_upgrade" report (named by what) of a heartbeat
 * body, before anything is kept. */
int rollout_driver_check_report(const json_t *upgrade, const char *what, struct yard_err *err);
/* Records a validated heartbeat of node (version, upgrade report, ranks' step times). */
void rollout_driver_heartbeat(struct rollout_driver *d, const char *node, const json_t *body);
/* The offer of node's heartbeat answer (new reference), or NULL; *key is the answer's key for
 * it ("upgrade" for an agent build, "worker_upgrade" for a worker build). */
json_t *rollout_driver_offer(struct rollout_driver *d, const char *node, const char **key);
void rollout_driver_tick(struct rollout_driver *d);
/* Policy "restart": before the driver restarts a running job, ready(data, job, reason, len)
 * says whether it may go now (1) or waits (0: asked again on the next tick); it may add to
 * reason (the restart's). Without it (NULL) a job restarts at once. */
typedef int (*rollout_restart_ready_fn)(void *data, const char *job, char *reason, size_t len);
void rollout_driver_restart_gate(struct rollout_driver *d, rollout_restart_ready_fn ready,
                                 void *data);
/* Calls cb for each node the active rollout has an offer for (rollout_driver_offer) that it
 * did not have when this last called it for that node: the leader then tells the node's
 * agent, through its watch, to fetch it now rather than with its next regular heartbeat.
 * Looks only when the committed rollouts changed. */
void rollout_driver_new_offers(struct rollout_driver *d, void (*cb)(void *data, const char *node),
                               void *data);
/* Adds each target's live view ("live": version, upgrade state and error, heartbeat age) to
 * a rollout object from fsm_rollout_get. */
void rollout_driver_overlay(struct rollout_driver *d, json_t *rollout);

#endif
