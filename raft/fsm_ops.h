/* fsm_ops.h: plugs the jobs state machine (jobs/fsm.h) into consensus as its FSM. */
#ifndef YARD_RAFT_FSM_OPS_H
#define YARD_RAFT_FSM_OPS_H

#include "jobs/fsm.h"
#include "raft/consensus.h"

void fsm_ops_init(struct consensus_fsm_ops *ops, struct fsm *f);

#endif
