/* dev.h: `yardd --dev`: a one-member cluster in one data dir plus one yard-agent with N CPU
 * devices, started and supervised by yardd as a child process (restarted 1 s after it exits;
 * stopped with SIGTERM when yardd stops, which, like any agent stop, leaves its ranks running
 * to be re-adopted by the next `yardd --dev` on the same data dir).
 *
 * Once this member leads, dev mode makes sure a join token exists (its secret kept in
 * DATA_DIR/dev-join.token, 0600), starts the agent (data in DATA_DIR/agent, log in
 * DATA_DIR/agent.log, node name "dev") and prints the API URL and the admin token. */
#ifndef YARD_RAFT_DEV_H
#define YARD_RAFT_DEV_H

#include <uv.h>

#include "jobs/fsm.h"
#include "raft/consensus.h"

/* Strings are copied by dev_init. */
struct dev_options {
	const char *data_dir;
	const char *api_url;          /* http://a.b.c.d:port */
	int devices;                  /* CPU devices of the agent */
	int port_base;                /* the agent's rank ports */
	const char *admin_token_path; /* where the admin token secret is */
};

/* Prepares dev mode; nothing starts until dev_leader_up. */
int dev_init(uv_loop_t *loop, struct consensus *c, struct fsm *f, const struct dev_options *opt,
             struct yard_err *err);
/* Called when this member is the ready leader (and again after the admin token exists). */
void dev_leader_up(void);
/* Stops the agent (SIGTERM) and its supervision. */
void dev_stop(void);

#endif
