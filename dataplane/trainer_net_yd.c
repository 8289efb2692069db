/* trainer_net_yd.c: the trainer_net backend on the real data plane (yd.h). Splits the world
 * communicator into the TP, PP and DP groups of the Megatron layout and maps the trainer's
 * operations onto yd_allreduce, yd_iallreduce, yd_isend and yd_recv. Errors carry the data
 * plane's own message (which names the peer). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/trainer_net.h"

struct yd_net {
	struct trainer_net base;
	yd_comm *comm[TRAINER_GROUPS]; /* [TRAINER_WORLD] borrowed, the rest owned */
	char error[512];
};

struct trainer_net_req {
	yd_request *req;
	enum trainer_group g;
};

static int fail(struct yd_net *n, enum trainer_group g, int rc)
{
	static const char *const names[] = {"world", "tp", "pp", "dp"};
	snprintf(n->error, sizeof n->error, "%s group: %s", names[g],
	         yd_comm_last_error(n->comm[g]));
	return rc;
}

static int net_allreduce(struct trainer_net *net, enum trainer_group g, void *buf, size_t count,
                         enum yd_dtype dt)
{
	struct yd_net *n = (struct yd_net *)net;
	if (yd_comm_size(n->comm[g]) == 1)
		return 0;
	int rc = yd_allreduce(n->comm[g], buf, buf, count, dt, YD_SUM);
	return rc ? fail(n, g, rc) : 0;
}

static int net_iallreduce(struct trainer_net *net, enum trainer_group g, void *buf, size_t count,
                          enum yd_dtype dt, struct trainer_net_req **req)
{
	struct yd_net *n = (struct yd_net *)net;
	struct trainer_net_req *r = calloc(1, sizeof *r);
	if (!r)
		return YARD_ENOMEM;
	r->g = g;
	if (yd_comm_size(n->comm[g]) > 1) {
		int rc = yd_iallreduce(n->comm[g], buf, buf, count, dt, YD_SUM, &r->req);
		if (rc) {
			free(r);
			return fail(n, g, rc);
		}
	}
	*req = r;
	return 0;
}

static int net_isend(struct trainer_net *net, const float *buf, size_t count, int pp_peer, int tag,
                     struct trainer_net_req **req)
{
	struct yd_net *n = (struct yd_net *)net;
	struct trainer_net_req *r = calloc(1, sizeof *r);
	if (!r)
		return YARD_ENOMEM;
	r->g = TRAINER_PP;
	int rc = yd_isend(n->comm[TRAINER_PP], buf, count, YD_F32, pp_peer, tag, &r->req);
	if (rc) {
		free(r);
		return fail(n, TRAINER_PP, rc);
	}
	*req = r;
	return 0;
}

static int net_recv(struct trainer_net *net, float *buf, size_t count, int pp_peer, int tag)
{
	struct yd_net *n = (struct yd_net *)net;
	int rc = yd_recv(n->comm[TRAINER_PP], buf, count, YD_F32, pp_peer, tag);
	return rc ? fail(n, TRAINER_PP, rc) : 0;
}

static int net_wait(struct trainer_net *net, struct trainer_net_req *req)
{
	struct yd_net *n = (struct yd_net *)net;
	if (!req)
		return 0;
	int rc = req->req ? yd_wait(req->req) : 0;
	enum trainer_group g = req->g;
	free(req);
	return rc ? fail(n, g, rc) : 0;
}

static const char *net_last_error(struct trainer_net *net)
{
	return ((struct yd_net *)net)->error;
}

static void net_destroy(struct trainer_net *net)
{
	struct yd_net *n = (struct yd_net *)net;
	for (int g = TRAINER_TP; g < TRAINER_GROUPS; g++)
		if (n->comm[g])
			yd_comm_destroy(n->comm[g]);
	free(n);
}

static const struct trainer_net_ops yd_ops = {
    .allreduce = net_allreduce,
    .iallreduce = net_iallreduce,
    .isend = net_isend,
    .recv = net_recv,
    .wait = net_wait,
    .last_error = net_last_error,
    .destroy = net_destroy,
};

int trainer_net_yd_new(yd_comm *world, const struct trainer_net_layout *lay,
                       struct trainer_net **out, struct yard_err *err)
{
	if (yd_comm_size(world) != lay->dp * lay->tp * lay->pp)
		return yard_err_set(
		    err, YARD_EMISMATCH,
		    "world size %d, but the job's layout dp %d x tp %d x pp %d needs "
		    "%d ranks",
		    yd_comm_size(world), lay->dp, lay->tp, lay->pp, lay->dp * lay->tp * lay->pp);
	struct yd_net *n = calloc(1, sizeof *n);
	if (!n)
		return yard_err_set(err, YARD_ENOMEM, "trainer net: out of memory");
	n->base.ops = &yd_ops;
	n->comm[TRAINER_WORLD] = world;
	int rank = lay->rank;
	int tp_i = rank % lay->tp, pp_i = (rank / lay->tp) % lay->pp;
	int dp_i = rank / (lay->tp * lay->pp);
	struct {
		enum trainer_group g;
		int color, key;
	} splits[] = {
	    {TRAINER_TP, dp_i * lay->pp + pp_i, tp_i},
	    {TRAINER_PP, dp_i * lay->tp + tp_i, pp_i},
	    {TRAINER_DP, pp_i * lay->tp + tp_i, dp_i},
	};
	for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
		int rc =
		    yd_comm_split(world, splits[k].color, splits[k].key, &n->comm[splits[k].g]);
		if (rc) {
			yard_err_set(err, rc, "splitting the %s group: %s",
			             k == 0   ? "tp"
			             : k == 1 ? "pp"
			                      : "dp",
			             yd_comm_last_error(world));
			net_destroy(&n->base);
			return rc;
		}
	}
	*out = &n->base;
	return 0;
}
