/* fsm_internal.h: helpers shared by fsm.c (apply) and fsm_query.c (reads); private to jobs/. */
#ifndef YARD_JOBS_FSM_INTERNAL_H
#define YARD_JOBS_FSM_INTERNAL_H

#include "jobs/fsm.h"

int fsm_exec(struct fsm *f, const char *sql);
sqlite3_stmt *fsm_prepare(struct fsm *f, const char *sql);
/* types: one letter per parameter, 's' text (NULL binds NULL), 'i' int64_t, 'd' double. */
int fsm_run(struct fsm *f, const char *sql, const char *types, ...);
/* hash = sha256(prev_hash || canonical JSON of the event with sorted keys). */
void fsm_event_hash(const char *prev_hash, int64_t seq, int64_t ts_ms, const char *type,
                    const char *job, const char *actor, const char *message,
                    char hash[SHA256_HEX_LEN + 1]);

#endif
