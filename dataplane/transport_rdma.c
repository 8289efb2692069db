/* transport_rdma.c: RDMA verbs between ranks (compiled with libibverbs; stubs otherwise).
 *
 * One reliable-connected queue pair per peer pair, set up at init over the pair's control
 * socket (QP number, PSN, LID/GID, the address and rkey of the receive ring), with every
 * buffer registered once. The data path mirrors transport_shm.c's rings: a sender copies a
 * frame (dp_hdr, length, offset, up to 128 KiB of data) into its own registered tx slot and
 * RDMA-writes it, with immediate, into the same slot of the peer's registered rx ring; the
 * immediate's completion tells the receiver that the slot is full (RC delivers in order),
 * and the receiver reduces or copies straight out of the slot, then returns credits with a
 * zero-length write with immediate. 8 slots per direction keep 1 MiB in flight.
 *
 * Waiting: each peer's completion queue has a completion channel whose fd the engine polls
 * with the control sockets (xfer.c), re-armed after every drain. Failures: a completion in
 * error (the peer's HCA stopped answering, the QP broke) fails the operation naming the peer
 * (dp_peer_lost prefers the peer's own failure notice, as TCP does); a dead process is
 * usually seen first on its control socket; the communicator's deadline covers the rest.
 *
 * Choice (comm.c): YARD_TRANSPORT=rdma forces it for every pair (an error naming why when
 * there is no device or a peer cannot); auto tries it between hosts when this machine has an
 * active port, both sides agree over the control socket, and falls back to the TCP sockets
 * already open (logged) when either side cannot. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "dataplane/dp.h"

#ifdef HAVE_IBVERBS
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "common/log.h"

#define RD_SLOTS 8
#define RD_SLOT_BYTES (128u * 1024u)
#define RD_SQ_DEPTH (2 * RD_SLOTS + 4) /* data frames + credit returns */
#define RD_RQ_DEPTH (2 * RD_SLOTS + 4)
#define RD_CQ_DEPTH (RD_SQ_DEPTH + RD_RQ_DEPTH)
#define RD_IMM_CREDIT 0x80000000u
#define RD_INFO_MAGIC 0x59445244u /* "YDRD" */

struct rd_slot {
	struct dp_hdr hdr;
	uint64_t len, off;
	unsigned char data[RD_SLOT_BYTES] __attribute__((aligned(64)));
};

struct dp_rdma_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t port;
	int gid_index;
	struct ibv_port_attr port_attr;
	union ibv_gid gid;
	char name[64];
};

struct dp_rdma_peer {
	struct ibv_comp_channel *chan;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct rd_slot *tx, *rx; /* RD_SLOTS each */
	struct ibv_mr *tx_mr, *rx_mr;
	uint64_t remote_rx;
	uint32_t remote_rkey;
	unsigned events_unacked;
	uint64_t tx_head;     /* frames written */
	uint64_t tx_credited; /* frames the peer has consumed */
	uint64_t rx_arrived;  /* frames whose completion we saw */
	uint64_t rx_tail;     /* frames consumed */
	uint32_t credits_owed;
	int sq_used;
	/* a completion failed while nothing was in flight with this peer (it may have left
	 * cleanly): the reason, reported only if a transfer with it is attempted */
	char broken[160];
};

/* What each side of a pair tells the other at setup, over the control socket. */
struct rd_info {
	uint32_t magic;
	int32_t capable;
	uint32_t qpn, psn;
	uint16_t lid;
	uint8_t mtu, is_global;
	uint32_t rkey;
	uint64_t rx_addr;
	uint8_t gid[16];
	char why[160];
};

static int open_device(struct dp_rdma_dev *d, char *why, size_t len)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		snprintf(why, len, "no RDMA device (ibv_get_device_list found none%s%s)",
		         list ? "" : ": ", list ? "" : strerror(errno));
		if (list)
			ibv_free_device_list(list);
		return YARD_EUNSUPPORTED;
	}
	size_t used = (size_t)snprintf(why, len, "no active port on RDMA device(s)");
	for (int i = 0; i < n; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;
		const char *name = ibv_get_device_name(list[i]);
		if (used < len)
			used += (size_t)snprintf(why + used, len - used, " %s", name);
		if (!ctx)
			continue;
		if (ibv_query_device(ctx, &da) == 0)
			for (uint8_t port = 1; port <= da.phys_port_cnt; port++) {
				struct ibv_port_attr pa;
				if (ibv_query_port(ctx, port, &pa) || pa.state != IBV_PORT_ACTIVE)
					continue;
				d->ctx = ctx;
				d->port = port;
				d->port_attr = pa;
				snprintf(d->name, sizeof d->name, "%s", name);
				ibv_free_device_list(list);
				return 0;
			}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return YARD_EUNSUPPORTED;
}

int dp_rdma_device_present(char *why, size_t len)
{
	struct dp_rdma_dev d;
	memset(&d, 0, sizeof d);
	if (open_device(&d, why, len) != 0)
		return 0;
	ibv_close_device(d.ctx);
	return 1;
}

static int dev_open(yd_comm *c, char *why, size_t len)
{
	struct dp_rdma_dev *d = calloc(1, sizeof *d);
	if (!d)
		return YARD_ENOMEM;
	int rc = open_device(d, why, len);
	if (rc) {
		free(d);
		return rc;
	}
	const char *gi = getenv("YARD_RDMA_GID_INDEX");
	char *end = NULL;
	long index = gi && *gi ? strtol(gi, &end, 10) : 0;
	if ((end != NULL && (end == gi || *end != '\0')) || index < 0 || index > 255) {
		snprintf(why, len, "YARD_RDMA_GID_INDEX=%s: want a GID table index 0-255", gi);
		ibv_close_device(d->ctx);
		free(d);
		return YARD_EINVAL;
	}
	d->gid_index = (int)index;
	if (ibv_query_gid(d->ctx, d->port, d->gid_index, &d->gid) != 0) {
		snprintf(why, len, "%s port %u: cannot read GID index %d", d->name, d->port,
		         d->gid_index);
		ibv_close_device(d->ctx);
		free(d);
		return YARD_EUNSUPPORTED;
	}
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		snprintf(why, len, "%s: ibv_alloc_pd: %s", d->name, strerror(errno));
		ibv_close_device(d->ctx);
		free(d);
		return YARD_EIO;
	}
	c->rdma = d;
	return 0;
}

static void peer_free(struct dp_rdma_peer *r)
{
	if (!r)
		return;
	if (r->qp)
		ibv_destroy_qp(r->qp);
	if (r->cq) {
		if (r->events_unacked)
			ibv_ack_cq_events(r->cq, r->events_unacked);
		ibv_destroy_cq(r->cq);
	}
	if (r->chan)
		ibv_destroy_comp_channel(r->chan);
	if (r->tx_mr)
		ibv_dereg_mr(r->tx_mr);
	if (r->rx_mr)
		ibv_dereg_mr(r->rx_mr);
	free(r->tx);
	free(r->rx);
	free(r);
}

/* Queue pair in INIT, buffers registered, our half of the exchange filled in. */
static int peer_create(yd_comm *c, struct dp_rdma_peer **out, struct rd_info *me, char *why,
                       size_t len)
{
	struct dp_rdma_dev *d = c->rdma;
	struct dp_rdma_peer *r = calloc(1, sizeof *r);
	size_t ring = (sizeof(struct rd_slot) * RD_SLOTS + 4095) & ~(size_t)4095;
	if (!r)
		return YARD_ENOMEM;
	r->tx = aligned_alloc(4096, ring);
	r->rx = aligned_alloc(4096, ring);
	if (!r->tx || !r->rx) {
		peer_free(r);
		return YARD_ENOMEM;
	}
	memset(r->rx, 0, ring);
	r->tx_mr = ibv_reg_mr(d->pd, r->tx, ring, IBV_ACCESS_LOCAL_WRITE);
	r->rx_mr = ibv_reg_mr(d->pd, r->rx, ring, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	r->chan = ibv_create_comp_channel(d->ctx);
	if (!r->tx_mr || !r->rx_mr || !r->chan) {
		snprintf(why, len, "%s: registering buffers: %s", d->name, strerror(errno));
		peer_free(r);
		return YARD_EIO;
	}
	fcntl(r->chan->fd, F_SETFL, fcntl(r->chan->fd, F_GETFL) | O_NONBLOCK);
	r->cq = ibv_create_cq(d->ctx, RD_CQ_DEPTH, NULL, r->chan, 0);
	struct ibv_qp_init_attr qa = {.send_cq = r->cq,
	                              .recv_cq = r->cq,
	                              .cap = {.max_send_wr = RD_SQ_DEPTH,
	                                      .max_recv_wr = RD_RQ_DEPTH,
	                                      .max_send_sge = 1,
	                                      .max_recv_sge = 1},
	                              .qp_type = IBV_QPT_RC};
	if (r->cq)
		r->qp = ibv_create_qp(d->pd, &qa);
	if (!r->cq || !r->qp) {
		snprintf(why, len, "%s: creating the queue pair: %s", d->name, strerror(errno));
		peer_free(r);
		return YARD_EIO;
	}
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT,
	                         .pkey_index = 0,
	                         .port_num = d->port,
	                         .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	if (ibv_modify_qp(r->qp, &at,
	                  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		snprintf(why, len, "%s: queue pair to INIT: %s", d->name, strerror(errno));
		peer_free(r);
		return YARD_EIO;
	}
	uint32_t psn = 0;
	if (getrandom(&psn, sizeof psn, 0) != sizeof psn)
		psn = (uint32_t)getpid();
	me->capable = 1;
	me->qpn = r->qp->qp_num;
	me->psn = psn & 0xffffffu;
	me->lid = d->port_attr.lid;
	me->mtu = (uint8_t)d->port_attr.active_mtu;
	me->is_global = d->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET || !d->port_attr.lid;
	me->rkey = r->rx_mr->rkey;
	me->rx_addr = (uint64_t)(uintptr_t)r->rx;
	memcpy(me->gid, d->gid.raw, 16);
	*out = r;
	return 0;
}

static int post_recv(struct dp_rdma_peer *r)
{
	struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad = NULL;
	return ibv_post_recv(r->qp, &wr, &bad);
}

/* INIT -> RTR -> RTS against the peer's info, receives posted. */
static int peer_connect(yd_comm *c, struct dp_rdma_peer *r, const struct rd_info *me,
                        const struct rd_info *peer, char *why, size_t len)
{
	struct dp_rdma_dev *d = c->rdma;
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTR,
	                         .path_mtu =
	                             (enum ibv_mtu)(me->mtu < peer->mtu ? me->mtu : peer->mtu),
	                         .dest_qp_num = peer->qpn,
	                         .rq_psn = peer->psn,
	                         .max_dest_rd_atomic = 1,
	                         .min_rnr_timer = 12,
	                         .ah_attr = {.dlid = peer->lid, .sl = 0, .port_num = d->port}};
	if (me->is_global || peer->is_global) {
		at.ah_attr.is_global = 1;
		memcpy(at.ah_attr.grh.dgid.raw, peer->gid, 16);
		at.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
		at.ah_attr.grh.hop_limit = 64;
	}
	if (ibv_modify_qp(r->qp, &at,
	                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
		snprintf(why, len, "%s: queue pair to RTR: %s", d->name, strerror(errno));
		return YARD_EIO;
	}
	memset(&at, 0, sizeof at);
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;  /* 4.096 us * 2^14 = 67 ms per try */
	at.retry_cnt = 7; /* then the completion fails and names the peer */
	at.rnr_retry = 7;
	at.sq_psn = me->psn;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(r->qp, &at,
	                  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
		snprintf(why, len, "%s: queue pair to RTS: %s", d->name, strerror(errno));
		return YARD_EIO;
	}
	r->remote_rx = peer->rx_addr;
	r->remote_rkey = peer->rkey;
	for (int i = 0; i < RD_RQ_DEPTH; i++)
		if (post_recv(r)) {
			snprintf(why, len, "%s: posting receives: %s", d->name, strerror(errno));
			return YARD_EIO;
		}
	if (ibv_req_notify_cq(r->cq, 0)) {
		snprintf(why, len, "%s: arming the completion queue: %s", d->name, strerror(errno));
		return YARD_EIO;
	}
	return 0;
}

/* Pairs that try RDMA: every pair when forced, pairs on different hosts under auto. */
static int candidate(yd_comm *c, int j)
{
	if (j == c->rank)
		return 0;
	if (c->transport_cfg == YD_TRANSPORT_RDMA)
		return 1;
	return c->transport_cfg == YD_TRANSPORT_AUTO && c->host_of[j] != c->host_of[c->rank];
}

static void close_tcp_data(struct dp_peer *p)
{
	for (int k = 0; k < p->nsock; k++) {
		if (p->tx[k].fd >= 0)
			close(p->tx[k].fd);
		p->tx[k].fd = p->rx[k].fd = -1;
		free(p->rx[k].piece);
		p->rx[k].piece = NULL;
	}
	p->nsock = 0;
}

int dp_rdma_setup(yd_comm *c, char *err, size_t errlen)
{
	int forced = c->transport_cfg == YD_TRANSPORT_RDMA, any = 0, rc = 0;
	char why[200] = "", peer_s[160];
	for (int j = 0; j < c->size; j++)
		any |= candidate(c, j);
	if (!any)
		return 0;
	int capable = dev_open(c, why, sizeof why) == 0;
	if (!capable && forced) {
		snprintf(err, errlen, "transport rdma: %s", why);
		return YARD_EUNSUPPORTED;
	}
	if (!capable && c->rank == 0)
		log_debug("RDMA not used (%s): TCP between hosts", why);
	struct rd_info *mine = calloc((size_t)c->size, sizeof *mine);
	struct rd_info *theirs = calloc((size_t)c->size, sizeof *theirs);
	struct dp_rdma_peer **res = calloc((size_t)c->size, sizeof *res);
	int8_t *ok = calloc((size_t)c->size, 1);
	if (!mine || !theirs || !res || !ok) {
		rc = YARD_ENOMEM;
		goto out;
	}
	/* 1: our queue pair and ring to every candidate (small writes: never block) */
	for (int j = 0; j < c->size; j++) {
		if (!candidate(c, j))
			continue;
		mine[j].magic = RD_INFO_MAGIC;
		if (capable)
			peer_create(c, &res[j], &mine[j], why, sizeof why); /* may fail: why */
		if (!res[j])
			snprintf(mine[j].why, sizeof mine[j].why, "%s", why);
		if (dp_write_full(c->peers[j].ctl_fd, &mine[j], sizeof mine[j], c->timeout_ms)) {
			snprintf(err, errlen, "RDMA setup: %s went away",
			         dp_peer_desc(c, j, peer_s, sizeof peer_s));
			rc = YARD_EPEER;
			goto out;
		}
	}
	/* 2: theirs; connect where both sides can, post receives, then say so */
	for (int j = 0; j < c->size; j++) {
		if (!candidate(c, j))
			continue;
		if (dp_read_full(c->peers[j].ctl_fd, &theirs[j], sizeof theirs[j], c->timeout_ms) ||
		    theirs[j].magic != RD_INFO_MAGIC) {
			snprintf(err, errlen, "RDMA setup: %s went away or sent garbage",
			         dp_peer_desc(c, j, peer_s, sizeof peer_s));
			rc = YARD_EPEER;
			goto out;
		}
		theirs[j].why[sizeof theirs[j].why - 1] = 0;
		if (res[j] && theirs[j].capable &&
		    peer_connect(c, res[j], &mine[j], &theirs[j], why, sizeof why) == 0)
			ok[j] = 1;
		else if (res[j] && theirs[j].capable)
			snprintf(mine[j].why, sizeof mine[j].why, "%s", why);
		if (dp_write_full(c->peers[j].ctl_fd, &ok[j], 1, c->timeout_ms)) {
			snprintf(err, errlen, "RDMA setup: %s went away",
			         dp_peer_desc(c, j, peer_s, sizeof peer_s));
			rc = YARD_EPEER;
			goto out;
		}
	}
	/* 3: a pair uses RDMA only when both sides connected */
	for (int j = 0; j < c->size; j++) {
		int8_t their_ok = 0;
		if (!candidate(c, j))
			continue;
		if (dp_read_full(c->peers[j].ctl_fd, &their_ok, 1, c->timeout_ms)) {
			snprintf(err, errlen, "RDMA setup: %s went away",
			         dp_peer_desc(c, j, peer_s, sizeof peer_s));
			rc = YARD_EPEER;
			goto out;
		}
		struct dp_peer *p = &c->peers[j];
		if (ok[j] && their_ok) {
			p->rdma = res[j];
			res[j] = NULL;
			p->transport = YD_TRANSPORT_RDMA;
			close_tcp_data(p);
			continue;
		}
		/* our side's reason when we failed, else the peer's */
		int ours = !mine[j].capable || (theirs[j].capable && !ok[j]);
		const char *reason = ours ? mine[j].why : theirs[j].why;
		if (forced) {
			snprintf(err, errlen, "transport rdma: %s cannot use RDMA: %s (%s side)",
			         dp_peer_desc(c, j, peer_s, sizeof peer_s),
			         reason[0] ? reason : "setup failed", ours ? "this" : "its");
			rc = YARD_EUNSUPPORTED;
			goto out;
		}
		if (capable)
			log_info("rank %d: RDMA to %s not usable (%s): using TCP", c->rank,
			         dp_peer_desc(c, j, peer_s, sizeof peer_s),
			         reason[0] ? reason : "setup failed");
	}
out:
	for (int j = 0; res && j < c->size; j++)
		peer_free(res[j]);
	free(mine);
	free(theirs);
	free(res);
	free(ok);
	return rc;
}

void dp_rdma_teardown(yd_comm *c)
{
	for (int j = 0; c->peers && j < c->size; j++) {
		peer_free(c->peers[j].rdma);
		c->peers[j].rdma = NULL;
	}
	if (c->rdma) {
		if (c->rdma->pd)
			ibv_dealloc_pd(c->rdma->pd);
		if (c->rdma->ctx)
			ibv_close_device(c->rdma->ctx);
		free(c->rdma);
		c->rdma = NULL;
	}
}

int dp_rdma_wait_fd(struct dp_peer *p)
{
	return p->rdma ? p->rdma->chan->fd : -1;
}

void dp_rdma_ack_events(struct dp_peer *p)
{
	struct dp_rdma_peer *r = p->rdma;
	struct ibv_cq *cq;
	void *ctx;
	if (!r)
		return;
	while (ibv_get_cq_event(r->chan, &cq, &ctx) == 0)
		r->events_unacked++;
	if (r->events_unacked >= 64) {
		ibv_ack_cq_events(r->cq, r->events_unacked);
		r->events_unacked = 0;
	}
}

static int rdma_lost(yd_comm *c, struct dp_peer *p, struct dp_xset *s, const char *why)
{
	char peer[160];
	/* name the operation: a transfer with this peer, else any pending one of the set */
	int i = p->shm_rx_cur >= 0 ? p->shm_rx_cur : p->shm_tx_cur;
	if (i < 0)
		i = dp_xset_next(s, -1, p->rank, 0);
	if (i < 0)
		i = dp_xset_next(s, -1, p->rank, 1);
	for (int k = 0; i < 0 && k < s->n; k++)
		if (!s->x[k].complete)
			i = k;
	if (i >= 0)
		return dp_peer_lost(c, p, &s->x[i], why);
	return dp_fail(c, YARD_EPEER, p->rank, "%s: %s",
	               dp_peer_desc(c, p->rank, peer, sizeof peer), why);
}

/* The transfer with peer p this set is on or will start next, or -1. */
static int peer_transfer(struct dp_peer *p, struct dp_xset *s)
{
	int i = p->shm_rx_cur >= 0 ? p->shm_rx_cur : p->shm_tx_cur;
	if (i < 0)
		i = dp_xset_next(s, p->shm_rx_last, p->rank, 0);
	if (i < 0)
		i = dp_xset_next(s, p->shm_tx_last, p->rank, 1);
	return i;
}

/* Drains the completion queue: send completions free queue slots, receive completions are
 * either a full frame or credits. A failed completion fails the operation if it involves
 * this peer; otherwise (a peer that left after its last transfer, like a TCP peer's close
 * after its goodbye) it is remembered in r->broken for the next transfer with that peer. */
static int drain_cq(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *got)
{
	struct dp_rdma_peer *r = p->rdma;
	struct ibv_wc wc[16];
	char why[160];
	for (;;) {
		int n = ibv_poll_cq(r->cq, 16, wc);
		if (n < 0)
			return rdma_lost(c, p, s, "RDMA completion queue failed");
		if (n == 0)
			return 0;
		*got = 1;
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				snprintf(why, sizeof why, "RDMA completion failed: %s",
				         ibv_wc_status_str(wc[i].status));
				if (peer_transfer(p, s) >= 0)
					return rdma_lost(c, p, s, why);
				snprintf(r->broken, sizeof r->broken, "%s", why);
				return 0;
			}
			if (!(wc[i].opcode & IBV_WC_RECV)) {
				r->sq_used--;
				continue;
			}
			uint32_t imm = ntohl(wc[i].imm_data);
			if (imm & RD_IMM_CREDIT)
				r->tx_credited += imm & ~RD_IMM_CREDIT;
			else
				r->rx_arrived++;
			if (post_recv(r))
				return rdma_lost(c, p, s, "cannot re-post an RDMA receive");
		}
	}
}

static int post_write(struct dp_rdma_peer *r, uint32_t slot, size_t bytes, uint32_t imm)
{
	struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)&r->tx[slot],
	                      .length = (uint32_t)bytes,
	                      .lkey = r->tx_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = slot,
	                         .sg_list = bytes ? &sge : NULL,
	                         .num_sge = bytes ? 1 : 0,
	                         .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
	                         .send_flags = IBV_SEND_SIGNALED,
	                         .imm_data = htonl(imm)},
	                   *bad = NULL;
	wr.wr.rdma.remote_addr = r->remote_rx + (uint64_t)slot * sizeof(struct rd_slot);
	wr.wr.rdma.rkey = r->remote_rkey;
	if (ibv_post_send(r->qp, &wr, &bad))
		return -1;
	r->sq_used++;
	return 0;
}

static int progress_rx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *moved)
{
	struct dp_rdma_peer *r = p->rdma;
	int rc;
	while (r->rx_tail < r->rx_arrived) {
		if (p->shm_rx_cur < 0) {
			p->shm_rx_cur = dp_xset_next(s, p->shm_rx_last, p->rank, 0);
			if (p->shm_rx_cur < 0)
				break;
		}
		struct dp_xfer *x = &s->x[p->shm_rx_cur];
		struct rd_slot *sl = &r->rx[r->rx_tail % RD_SLOTS];
		rc = dp_frame_deliver(c, x, &sl->hdr, sl->off, sl->len, sl->data, "RDMA");
		if (rc)
			return rc;
		r->rx_tail++;
		r->credits_owed++;
		*moved = 1;
		if (x->done == x->len) {
			x->complete = 1;
			p->shm_rx_last = p->shm_rx_cur;
			p->shm_rx_cur = -1;
		}
	}
	if (r->credits_owed && r->sq_used < RD_SQ_DEPTH) {
		if (post_write(r, 0, 0, RD_IMM_CREDIT | r->credits_owed))
			return rdma_lost(c, p, s, "cannot post an RDMA credit return");
		r->credits_owed = 0;
	}
	return 0;
}

static int progress_tx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *moved)
{
	struct dp_rdma_peer *r = p->rdma;
	for (;;) {
		if (p->shm_tx_cur < 0) {
			p->shm_tx_cur = dp_xset_next(s, p->shm_tx_last, p->rank, 1);
			if (p->shm_tx_cur < 0)
				return 0;
		}
		struct dp_xfer *x = &s->x[p->shm_tx_cur];
		/* one slot of the send queue stays free for credit returns */
		while (r->tx_head - r->tx_credited < RD_SLOTS && r->sq_used < RD_SQ_DEPTH - 1) {
			uint32_t slot = (uint32_t)(r->tx_head % RD_SLOTS);
			struct rd_slot *sl = &r->tx[slot];
			size_t n = DP_MIN(RD_SLOT_BYTES, x->len - x->done);
			sl->hdr = x->hdr;
			sl->len = n;
			sl->off = x->done;
			if (n) /* a barrier's empty message has no buffer at all */
				memcpy(sl->data, (const char *)x->src + x->done, n);
			if (post_write(r, slot, offsetof(struct rd_slot, data) + n, slot))
				return rdma_lost(c, p, s, "cannot post an RDMA write");
			r->tx_head++;
			x->done += n;
			*moved = 1;
			if (x->done == x->len) {
				x->complete = 1;
				break;
			}
		}
		if (!x->complete)
			return 0;
		p->shm_tx_last = p->shm_tx_cur;
		p->shm_tx_cur = -1;
	}
}

int dp_rdma_progress(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed)
{
	struct dp_rdma_peer *r = p->rdma;
	int got = 0, moved = 0, rc;
	if (r->broken[0])
		return peer_transfer(p, s) >= 0 ? rdma_lost(c, p, s, r->broken) : 0;
	if ((rc = drain_cq(c, p, s, &got)) != 0 || r->broken[0])
		return rc;
	if ((rc = progress_rx(c, p, s, &moved)) != 0 || (rc = progress_tx(c, p, s, &moved)) != 0)
		return rc;
	/* arm, then look once more: a completion between the drain and the arming would
	 * otherwise raise no event */
	if (ibv_req_notify_cq(r->cq, 0))
		return rdma_lost(c, p, s, "cannot arm the RDMA completion queue");
	if ((rc = drain_cq(c, p, s, &got)) != 0 || r->broken[0])
		return rc;
	if (got && (rc = progress_rx(c, p, s, &moved)) == 0)
		rc = progress_tx(c, p, s, &moved);
	if (moved || got)
		*progressed = 1;
	return rc;
}

#else /* !HAVE_IBVERBS */

int dp_rdma_device_present(char *why, size_t len)
{
	snprintf(why, len, "libyd was built without libibverbs");
	return 0;
}

int dp_rdma_setup(yd_comm *c, char *err, size_t errlen)
{
	if (c->transport_cfg == YD_TRANSPORT_RDMA) {
		snprintf(err, errlen, "transport rdma: libyd was built without libibverbs");
		return YARD_EUNSUPPORTED;
	}
	return 0;
}

void dp_rdma_teardown(yd_comm *c)
{
	(void)c;
}

int dp_rdma_progress(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed)
{
	(void)s;
	(void)progressed;
	return dp_fail(c, YARD_EINTERNAL, p->rank, "RDMA transport without libibverbs");
}

int dp_rdma_wait_fd(struct dp_peer *p)
{
	(void)p;
	return -1;
}

void dp_rdma_ack_events(struct dp_peer *p)
{
	(void)p;
}
#endif
