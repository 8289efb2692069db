/* trainer_net.h: the few communication operations the trainer needs, behind a small table of
 * functions so the same trainer runs on the real data plane (trainer_net_yd.c: yd.h
 * communicators split into TP, PP and DP groups) and on an in-process backend in which every
 * rank is a thread (trainer_net_local.c), which the unit tests use to check that every
 * dp x tp x pp layout trains the same model without sockets.
 *
 * Groups follow the Megatron rank order of DESIGN.md §5. Point-to-point peers are pipeline
 * stage indices within this rank's PP group. Sends never block (the buffer must stay valid
 * until the request is waited); receives block until the message with that tag arrives or the
 * backend's deadline passes. Every failure returns a YARD_E* code and last_error names it. */
#ifndef YARD_TRAINER_NET_H
#define YARD_TRAINER_NET_H

#include <stddef.h>

#include "common/err.h"
#include "dataplane/yd.h"

enum trainer_group { TRAINER_WORLD, TRAINER_TP, TRAINER_PP, TRAINER_DP, TRAINER_GROUPS };

struct trainer_net;
struct trainer_net_req;

struct trainer_net_ops {
	/* In-place sum over the group (YD_F32 or YD_F64). */
	int (*allreduce)(struct trainer_net *net, enum trainer_group g, void *buf, size_t count,
	                 enum yd_dtype dt);
	/* Starts an in-place sum; *req is waited with wait. */
	int (*iallreduce)(struct trainer_net *net, enum trainer_group g, void *buf, size_t count,
	                  enum yd_dtype dt, struct trainer_net_req **req);
	int (*isend)(struct trainer_net *net, const float *buf, size_t count, int pp_peer, int tag,
	             struct trainer_net_req **req);
	int (*recv)(struct trainer_net *net, float *buf, size_t count, int pp_peer, int tag);
	/* Completes and frees req (NULL is done already). */
	int (*wait)(struct trainer_net *net, struct trainer_net_req *req);
	const char *(*last_error)(struct trainer_net *net);
	void (*destroy)(struct trainer_net *net);
};

struct trainer_net {
	const struct trainer_net_ops *ops;
};

/* The parallel layout a backend serves. */
struct trainer_net_layout {
	int dp, tp, pp;
	int rank;
};

/* Real data plane: splits world (borrowed; must outlive the net) into the TP, PP and DP
 * groups. Collective over world. */
int trainer_net_yd_new(yd_comm *world, const struct trainer_net_layout *lay,
                       struct trainer_net **out, struct yard_err *err);

/* In-process backend: one shared world for dp*tp*pp threads, one net per rank thread. */
struct trainer_local_world;
struct trainer_local_world *trainer_local_world_new(int dp, int tp, int pp, int timeout_ms);
void trainer_local_world_free(struct trainer_local_world *w);
struct trainer_net *trainer_local_net_new(struct trainer_local_world *w, int rank);

#endif
