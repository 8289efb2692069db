/* trainer_net_local.c: the in-process trainer_net backend, every rank a thread of one
 * process. Collectives meet at a barrier and sum the members' buffers in member order (so the
 * result is deterministic); point-to-point messages are copied into a shared mailbox matched
 * by (source, destination, tag). Used by the unit tests to check the parallel trainer without
 * sockets; it is not a data plane (no overlap: iallreduce runs at wait). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataplane/trainer_net.h"

struct local_group {
	int size;
	pthread_barrier_t barrier;
	void *slots[256];
};

struct local_msg {
	struct local_msg *next;
	int src, dst, tag;
	size_t count;
	float data[];
};

struct trainer_local_world {
	int dp, tp, pp, world;
	int timeout_ms;
	struct local_group *groups[TRAINER_GROUPS]; /* per group kind, indexed by color */
	int ngroups[TRAINER_GROUPS];
	pthread_mutex_t lock;
	pthread_cond_t arrived;
	struct local_msg *mailbox;
};

struct local_net {
	struct trainer_net base;
	struct trainer_local_world *w;
	int rank, dp_i, pp_i, tp_i;
	char error[256];
};

struct trainer_net_req {
	enum trainer_group g;
	void *buf;
	size_t count;
	enum yd_dtype dt;
};

static void group_of(const struct local_net *n, enum trainer_group g, int *color, int *member)
{
	const struct trainer_local_world *w = n->w;
	switch (g) {
	case TRAINER_WORLD:
		*color = 0;
		*member = n->rank;
		break;
	case TRAINER_TP:
		*color = n->dp_i * w->pp + n->pp_i;
		*member = n->tp_i;
		break;
	case TRAINER_PP:
		*color = n->dp_i * w->tp + n->tp_i;
		*member = n->pp_i;
		break;
	default:
		*color = n->pp_i * w->tp + n->tp_i;
		*member = n->dp_i;
		break;
	}
}

static int local_allreduce(struct trainer_net *net, enum trainer_group g, void *buf, size_t count,
                           enum yd_dtype dt)
{
	struct local_net *n = (struct local_net *)net;
	int color, member;
	group_of(n, g, &color, &member);
	struct local_group *grp = &n->w->groups[g][color];
	if (grp->size == 1)
		return 0;
	if (dt != YD_F32 && dt != YD_F64) {
		snprintf(n->error, sizeof n->error, "local allreduce: dtype %d unsupported", dt);
		return YARD_EUNSUPPORTED;
	}
	size_t esize = dt == YD_F32 ? sizeof(float) : sizeof(double);
	void *sum = malloc(count * esize + 1);
	if (!sum)
		return YARD_ENOMEM;
	grp->slots[member] = buf;
	pthread_barrier_wait(&grp->barrier);
	if (dt == YD_F32) {
		float *out = sum;
		memcpy(out, grp->slots[0], count * esize);
		for (int k = 1; k < grp->size; k++) {
			const float *in = grp->slots[k];
			for (size_t i = 0; i < count; i++)
				out[i] += in[i];
		}
	} else {
		double *out = sum;
		memcpy(out, grp->slots[0], count * esize);
		for (int k = 1; k < grp->size; k++) {
			const double *in = grp->slots[k];
			for (size_t i = 0; i < count; i++)
				out[i] += in[i];
		}
	}
	pthread_barrier_wait(&grp->barrier);
	memcpy(buf, sum, count * esize);
	free(sum);
	return 0;
}

static int local_iallreduce(struct trainer_net *net, enum trainer_group g, void *buf, size_t count,
                            enum yd_dtype dt, struct trainer_net_req **req)
{
	struct trainer_net_req *r = malloc(sizeof *r);
	if (!r)
		return YARD_ENOMEM;
	*r = (struct trainer_net_req){.g = g, .buf = buf, .count = count, .dt = dt};
	*req = r;
	return 0;
}

static int world_rank_of_stage(const struct local_net *n, int stage)
{
	return (n->dp_i * n->w->pp + stage) * n->w->tp + n->tp_i;
}

static int local_isend(struct trainer_net *net, const float *buf, size_t count, int pp_peer,
                       int tag, struct trainer_net_req **req)
{
	struct local_net *n = (struct local_net *)net;
	struct local_msg *msg = malloc(sizeof *msg + count * sizeof(float));
	if (!msg)
		return YARD_ENOMEM;
	msg->src = n->rank;
	msg->dst = world_rank_of_stage(n, pp_peer);
	msg->tag = tag;
	msg->count = count;
	memcpy(msg->data, buf, count * sizeof(float));
	pthread_mutex_lock(&n->w->lock);
	struct local_msg **tail = &n->w->mailbox;
	while (*tail)
		tail = &(*tail)->next;
	msg->next = NULL;
	*tail = msg;
	pthread_cond_broadcast(&n->w->arrived);
	pthread_mutex_unlock(&n->w->lock);
	*req = NULL;
	return 0;
}

static int local_recv(struct trainer_net *net, float *buf, size_t count, int pp_peer, int tag)
{
	struct local_net *n = (struct local_net *)net;
	int src = world_rank_of_stage(n, pp_peer);
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += n->w->timeout_ms / 1000;
	deadline.tv_nsec += (long)(n->w->timeout_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	int rc = 0;
	pthread_mutex_lock(&n->w->lock);
	for (;;) {
		struct local_msg **at = &n->w->mailbox;
		while (*at && !((*at)->src == src && (*at)->dst == n->rank && (*at)->tag == tag))
			at = &(*at)->next;
		if (*at) {
			struct local_msg *msg = *at;
			*at = msg->next;
			if (msg->count != count) {
				snprintf(n->error, sizeof n->error,
				         "recv tag %d from rank %d: %zu floats, expected %zu", tag,
				         src, msg->count, count);
				rc = YARD_EMISMATCH;
			} else {
				memcpy(buf, msg->data, count * sizeof(float));
			}
			free(msg);
			break;
		}
		if (pthread_cond_timedwait(&n->w->arrived, &n->w->lock, &deadline) == ETIMEDOUT) {
			snprintf(n->error, sizeof n->error,
			         "recv tag %d from rank %d: nothing within %d ms", tag, src,
			         n->w->timeout_ms);
			rc = YARD_ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&n->w->lock);
	return rc;
}

static int local_wait(struct trainer_net *net, struct trainer_net_req *req)
{
	if (!req)
		return 0;
	int rc = local_allreduce(net, req->g, req->buf, req->count, req->dt);
	free(req);
	return rc;
}

static const char *local_last_error(struct trainer_net *net)
{
	return ((struct local_net *)net)->error;
}

static void local_destroy(struct trainer_net *net)
{
	free(net);
}

static const struct trainer_net_ops local_ops = {
    .allreduce = local_allreduce,
    .iallreduce = local_iallreduce,
    .isend = local_isend,
    .recv = local_recv,
    .wait = local_wait,
    .last_error = local_last_error,
    .destroy = local_destroy,
};

struct trainer_local_world *trainer_local_world_new(int dp, int tp, int pp, int timeout_ms)
{
	int world = dp * tp * pp;
	if (world < 1 || world > 256)
		return NULL;
	struct trainer_local_world *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->dp = dp;
	w->tp = tp;
	w->pp = pp;
	w->world = world;
	w->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
	int counts[TRAINER_GROUPS] = {1, dp * pp, dp * tp, pp * tp};
	int sizes[TRAINER_GROUPS] = {world, tp, pp, dp};
	for (int g = 0; g < TRAINER_GROUPS; g++) {
		w->ngroups[g] = counts[g];
		w->groups[g] = calloc((size_t)counts[g], sizeof(struct local_group));
		if (!w->groups[g]) {
			trainer_local_world_free(w);
			return NULL;
		}
		for (int c = 0; c < counts[g]; c++) {
			w->groups[g][c].size = sizes[g];
			pthread_barrier_init(&w->groups[g][c].barrier, NULL, (unsigned)sizes[g]);
		}
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->arrived, NULL);
	return w;
}

void trainer_local_world_free(struct trainer_local_world *w)
{
	if (!w)
		return;
	for (int g = 0; g < TRAINER_GROUPS; g++) {
		if (!w->groups[g])
			continue;
		for (int c = 0; c < w->ngroups[g]; c++)
			pthread_barrier_destroy(&w->groups[g][c].barrier);
		free(w->groups[g]);
	}
	while (w->mailbox) {
		struct local_msg *next = w->mailbox->next;
		free(w->mailbox);
		w->mailbox = next;
	}
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->arrived);
	free(w);
}

struct trainer_net *trainer_local_net_new(struct trainer_local_world *w, int rank)
{
	struct local_net *n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	n->base.ops = &local_ops;
	n->w = w;
	n->rank = rank;
	n->tp_i = rank % w->tp;
	n->pp_i = (rank / w->tp) % w->pp;
	n->dp_i = rank / (w->tp * w->pp);
	return &n->base;
}
