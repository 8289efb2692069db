/* p2p.c: point-to-point operations (yd_send/recv/isend/irecv) and yd_wait/yd_test for every
 * request. Messages between a pair of ranks are matched by (source, tag) in posting order;
 * a receive must be exactly as long as the matching send (else YARD_EMISMATCH). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "dataplane/yd_impl.h"

static int post(yd_comm *c, int is_send, void *buf, size_t count, enum yd_dtype dt, int peer,
                int tag, yd_request **out)
{
	const char *name = is_send ? "send" : "recv";
	*out = NULL;
	if (!c)
		return YARD_EINVAL;
	pthread_mutex_lock(&c->net->mu);
	uint64_t seq = ++c->p2p_seq;
	pthread_mutex_unlock(&c->net->mu);
	if ((unsigned)dt >= YD_DTYPE_COUNT || peer < 0 || peer >= c->size || peer == c->rank ||
	    (count && !buf)) {
		pthread_mutex_lock(&c->net->mu);
		snprintf(c->last_error, sizeof c->last_error,
		         "%s #%llu: invalid argument (peer %d of %d, dtype %d)", name,
		         (unsigned long long)seq, peer, c->size, (int)dt);
		pthread_mutex_unlock(&c->net->mu);
		return YARD_EINVAL;
	}
	struct yd_request *r = calloc(1, sizeof *r);
	if (!r)
		return YARD_ENOMEM;
	r->comm = c;
	r->peer = c->net_rank[peer];
	r->comm_peer = peer;
	r->chan = CHAN_P2P;
	r->tag = tag;
	r->buf = buf;
	r->len = count * yd_dtype_size(dt);
	r->opname = name;
	r->op_seq = seq;
	int rc = is_send ? net_post_send(c->net, r) : net_post_recv(c->net, r);
	if (rc) {
		free(r);
		return comm_op_error(c, name, seq, rc);
	}
	*out = r;
	return 0;
}

int yd_isend(yd_comm *c, const void *buf, size_t count, enum yd_dtype dt, int peer, int tag,
             yd_request **req)
{
	return req ? post(c, 1, (void *)buf, count, dt, peer, tag, req) : YARD_EINVAL;
}

int yd_irecv(yd_comm *c, void *buf, size_t count, enum yd_dtype dt, int peer, int tag,
             yd_request **req)
{
	return req ? post(c, 0, buf, count, dt, peer, tag, req) : YARD_EINVAL;
}

int yd_send(yd_comm *c, const void *buf, size_t count, enum yd_dtype dt, int peer, int tag)
{
	yd_request *r;
	int rc = post(c, 1, (void *)buf, count, dt, peer, tag, &r);
	return rc ? rc : yd_wait(r);
}

int yd_recv(yd_comm *c, void *buf, size_t count, enum yd_dtype dt, int peer, int tag)
{
	yd_request *r;
	int rc = post(c, 0, buf, count, dt, peer, tag, &r);
	return rc ? rc : yd_wait(r);
}

int yd_wait(yd_request *req)
{
	if (!req)
		return YARD_EINVAL;
	yd_comm *c = req->comm;
	/* Collective jobs bound every internal wait by the deadline themselves. */
	uint64_t deadline = req->kind == REQ_COLL ? 0 : comm_deadline(c);
	if (net_wait_until(c->net, req, deadline) == YARD_ETIMEDOUT) {
		char what[100];
		snprintf(what, sizeof what, "%s tag %lld, %zu bytes", req->opname,
		         (long long)req->tag, req->len);
		comm_fail_timeout(c, req->comm_peer, what);
		net_wait_until(c->net, req, 0);
	}
	int rc = req->rc;
	if (rc)
		comm_op_error(c, req->opname, req->op_seq, rc);
	free(req);
	return rc;
}

int yd_test(yd_request *req)
{
	if (!req)
		return 1;
	pthread_mutex_lock(&req->comm->net->mu);
	int done = req->done;
	pthread_mutex_unlock(&req->comm->net->mu);
	return done;
}
