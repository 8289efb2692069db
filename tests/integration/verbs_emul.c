/* verbs_emul.c: a stand-in for the part of libibverbs that transport_rdma.c calls, so that
 * the RDMA transport runs on machines without an RDMA device (test_coll_rdma_emul).
 * Test-only; linked instead of libibverbs.
 *
 * One device "yd_emul0" with one active RoCE-like port whose GID carries the process id.
 * A queue pair is an AF_UNIX datagram socket named after (pid, qp number); RDMA write with
 * immediate sends the bytes with the remote address and rkey, and the receiving process's
 * per-QP thread checks them against its registered regions, copies the bytes into place and
 * only then queues the receive completion (what an HCA guarantees), consuming a posted
 * receive. A send to a process that has gone (SIGKILL) completes in error, as a real QP's
 * retries would end. Completion channels are pipes written when an armed CQ gets an entry.
 * What this cannot show: anything about real HCAs (MTU, GID tables, RNR timing, memory
 * ordering of a DMA engine). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#undef ibv_query_port
#undef ibv_reg_mr

#define CQ_LEN 4096

struct emul_cq {
	struct ibv_cq cq;
	pthread_mutex_t mu;
	struct ibv_wc q[CQ_LEN];
	unsigned head, tail;
	int armed;
	int pipe_w;
};

struct emul_chan {
	struct ibv_comp_channel ch;
	int pipe_w;
};

struct emul_qp {
	struct ibv_qp qp;
	int sock;
	pthread_t thread;
	int thread_started;
	volatile int stop;
	int dest_pid;
	uint32_t dest_qpn;
	int recvs_posted;
	pthread_mutex_t mu;
};

struct wire {
	uint64_t addr;
	uint32_t rkey, imm, len, src_qpn;
};

static pthread_mutex_t mr_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_mr *mrs[256];
static int nmrs;
static uint32_t next_qpn = 1, next_key = 0x100;
static struct ibv_device emul_dev = {
    .node_type = IBV_NODE_CA, .transport_type = IBV_TRANSPORT_IB, .name = "yd_emul0"};

static void qp_name(struct sockaddr_un *a, socklen_t *len, int pid, uint32_t qpn)
{
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ydverbs-%d-%u", pid, qpn);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void cq_push(struct emul_cq *c, const struct ibv_wc *wc)
{
	pthread_mutex_lock(&c->mu);
	if (c->tail - c->head < CQ_LEN)
		c->q[c->tail++ % CQ_LEN] = *wc;
	else
		fprintf(stderr, "verbs_emul: completion queue overflow\n");
	int wake = c->armed;
	c->armed = 0;
	pthread_mutex_unlock(&c->mu);
	if (wake && c->pipe_w >= 0) {
		ssize_t r = write(c->pipe_w, "e", 1);
		(void)r;
	}
}

static int emul_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct emul_cq *c = (struct emul_cq *)cq;
	int got = 0;
	pthread_mutex_lock(&c->mu);
	while (got < n && c->head != c->tail)
		wc[got++] = c->q[c->head++ % CQ_LEN];
	pthread_mutex_unlock(&c->mu);
	return got;
}

static int emul_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct emul_cq *c = (struct emul_cq *)cq;
	(void)solicited_only;
	pthread_mutex_lock(&c->mu);
	c->armed = 1;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

static struct ibv_mr *mr_find(uint64_t addr, uint32_t len, uint32_t rkey)
{
	struct ibv_mr *hit = NULL;
	pthread_mutex_lock(&mr_mu);
	for (int i = 0; i < nmrs; i++)
		if (mrs[i]->rkey == rkey && addr >= (uint64_t)(uintptr_t)mrs[i]->addr &&
		    addr + len <= (uint64_t)(uintptr_t)mrs[i]->addr + mrs[i]->length)
			hit = mrs[i];
	pthread_mutex_unlock(&mr_mu);
	return hit;
}

/* The receiving side of every write: place the bytes, then complete. */
static void *qp_thread(void *arg)
{
	struct emul_qp *q = arg;
	size_t cap = sizeof(struct wire) + (1u << 20);
	char *buf = malloc(cap);
	while (!q->stop && buf) {
		ssize_t r = recv(q->sock, buf, cap, 0);
		if (r < (ssize_t)sizeof(struct wire))
			continue; /* timeout (checks stop) or junk */
		struct wire w;
		memcpy(&w, buf, sizeof w);
		struct ibv_wc wc = {.wr_id = 0,
		                    .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
		                    .wc_flags = IBV_WC_WITH_IMM,
		                    .imm_data = w.imm,
		                    .qp_num = q->qp.qp_num,
		                    .byte_len = w.len};
		if (w.len && !mr_find(w.addr, w.len, w.rkey)) {
			wc.status = IBV_WC_REM_ACCESS_ERR;
			fprintf(stderr, "verbs_emul: write outside a registered region\n");
		} else {
			if (w.len)
				memcpy((void *)(uintptr_t)w.addr, buf + sizeof w, w.len);
			pthread_mutex_lock(&q->mu);
			int had = q->recvs_posted-- > 0;
			pthread_mutex_unlock(&q->mu);
			/* a write with immediate and no receive posted: a protocol bug here */
			wc.status = had ? IBV_WC_SUCCESS : IBV_WC_RNR_RETRY_EXC_ERR;
		}
		cq_push((struct emul_cq *)q->qp.recv_cq, &wc);
	}
	free(buf);
	return NULL;
}

static int emul_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct emul_qp *q = (struct emul_qp *)qp;
	for (; wr; wr = wr->next) {
		size_t len = wr->num_sge ? wr->sg_list[0].length : 0;
		char *msg = malloc(sizeof(struct wire) + len);
		if (!msg || qp->state != IBV_QPS_RTS || wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
			free(msg);
			*bad = wr;
			return EINVAL;
		}
		struct wire w = {.addr = wr->wr.rdma.remote_addr,
		                 .rkey = wr->wr.rdma.rkey,
		                 .imm = wr->imm_data,
		                 .len = (uint32_t)len,
		                 .src_qpn = qp->qp_num};
		memcpy(msg, &w, sizeof w);
		if (len)
			memcpy(msg + sizeof w, (void *)(uintptr_t)wr->sg_list[0].addr, len);
		struct sockaddr_un to;
		socklen_t tolen;
		qp_name(&to, &tolen, q->dest_pid, q->dest_qpn);
		ssize_t r;
		do
			r = sendto(q->sock, msg, sizeof w + len, 0, (struct sockaddr *)&to, tolen);
		while (r < 0 && (errno == EINTR || errno == EAGAIN));
		free(msg);
		struct ibv_wc wc = {.wr_id = wr->wr_id,
		                    .status = r < 0 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS,
		                    .opcode = IBV_WC_RDMA_WRITE,
		                    .qp_num = qp->qp_num};
		if (r < 0 || (wr->send_flags & IBV_SEND_SIGNALED))
			cq_push((struct emul_cq *)qp->send_cq, &wc);
	}
	return 0;
}

static int emul_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct emul_qp *q = (struct emul_qp *)qp;
	(void)bad;
	pthread_mutex_lock(&q->mu);
	for (; wr; wr = wr->next)
		q->recvs_posted++;
	pthread_mutex_unlock(&q->mu);
	return 0;
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list = calloc(2, sizeof *list);
	if (!list)
		return NULL;
	list[0] = &emul_dev;
	*num_devices = 1;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct ibv_context *ctx = calloc(1, sizeof *ctx);
	if (!ctx)
		return NULL;
	ctx->device = device;
	ctx->cmd_fd = -1;
	ctx->async_fd = -1;
	ctx->ops.poll_cq = emul_poll_cq;
	ctx->ops.req_notify_cq = emul_req_notify_cq;
	ctx->ops.post_send = emul_post_send;
	ctx->ops.post_recv = emul_post_recv;
	return ctx;
}

int ibv_close_device(struct ibv_context *context)
{
	free(context);
	return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	(void)context;
	memset(attr, 0, sizeof *attr);
	attr->phys_port_cnt = 1;
	attr->max_qp_wr = 4096;
	return 0;
}

int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                   struct _compat_ibv_port_attr *compat)
{
	struct ibv_port_attr *pa = (struct ibv_port_attr *)compat;
	(void)context;
	if (port_num != 1)
		return EINVAL;
	pa->state = IBV_PORT_ACTIVE;
	pa->max_mtu = pa->active_mtu = IBV_MTU_4096;
	pa->lid = 0;
	pa->link_layer = IBV_LINK_LAYER_ETHERNET;
	pa->gid_tbl_len = 1;
	return 0;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	int32_t pid = (int32_t)getpid();
	(void)context;
	if (port_num != 1 || index != 0)
		return EINVAL;
	memset(gid, 0, sizeof *gid);
	memcpy(gid->raw + 12, &pid, 4);
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct ibv_pd *pd = calloc(1, sizeof *pd);
	if (pd)
		pd->context = context;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)access;
	struct ibv_mr *mr = calloc(1, sizeof *mr);
	if (!mr)
		return NULL;
	pthread_mutex_lock(&mr_mu);
	if (nmrs == (int)(sizeof mrs / sizeof mrs[0])) {
		pthread_mutex_unlock(&mr_mu);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = length;
	mr->lkey = mr->rkey = next_key++;
	mrs[nmrs++] = mr;
	pthread_mutex_unlock(&mr_mu);
	return mr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                unsigned int access)
{
	(void)iova;
	return ibv_reg_mr(pd, addr, length, (int)access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	pthread_mutex_lock(&mr_mu);
	for (int i = 0; i < nmrs; i++)
		if (mrs[i] == mr)
			mrs[i] = mrs[--nmrs];
	pthread_mutex_unlock(&mr_mu);
	free(mr);
	return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	int p[2];
	struct emul_chan *ch = calloc(1, sizeof *ch);
	if (!ch || pipe2(p, O_CLOEXEC) != 0) {
		free(ch);
		return NULL;
	}
	ch->ch.context = context;
	ch->ch.fd = p[0];
	ch->pipe_w = p[1];
	return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct emul_chan *ch = (struct emul_chan *)channel;
	close(ch->ch.fd);
	close(ch->pipe_w);
	free(ch);
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector)
{
	struct emul_cq *c = calloc(1, sizeof *c);
	(void)comp_vector;
	if (!c)
		return NULL;
	pthread_mutex_init(&c->mu, NULL);
	c->cq.context = context;
	c->cq.channel = channel;
	c->cq.cq_context = cq_context;
	c->cq.cqe = cqe;
	c->pipe_w = channel ? ((struct emul_chan *)channel)->pipe_w : -1;
	return &c->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct emul_cq *c = (struct emul_cq *)cq;
	pthread_mutex_destroy(&c->mu);
	free(c);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	char b;
	if (read(channel->fd, &b, 1) != 1)
		return -1; /* EAGAIN on the non-blocking fd: no event */
	*cq = NULL;
	*cq_context = NULL;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	(void)cq;
	(void)nevents;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct emul_qp *q = calloc(1, sizeof *q);
	struct sockaddr_un a;
	socklen_t alen;
	int big = 4 << 20;
	struct timeval tv = {0, 100000};
	if (!q)
		return NULL;
	pthread_mutex_init(&q->mu, NULL);
	q->qp.context = pd->context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.qp_type = attr->qp_type;
	q->qp.state = IBV_QPS_RESET;
	pthread_mutex_lock(&mr_mu);
	q->qp.qp_num = next_qpn++;
	pthread_mutex_unlock(&mr_mu);
	q->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	qp_name(&a, &alen, (int)getpid(), q->qp.qp_num);
	if (q->sock < 0 || bind(q->sock, (struct sockaddr *)&a, alen) != 0) {
		if (q->sock >= 0)
			close(q->sock);
		free(q);
		return NULL;
	}
	setsockopt(q->sock, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
	setsockopt(q->sock, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
	setsockopt(q->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (pthread_create(&q->thread, NULL, qp_thread, q) != 0) {
		close(q->sock);
		free(q);
		return NULL;
	}
	q->thread_started = 1;
	return &q->qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct emul_qp *q = (struct emul_qp *)qp;
	if (!(attr_mask & IBV_QP_STATE))
		return EINVAL;
	if (attr->qp_state == IBV_QPS_RTR) {
		int32_t pid;
		if (!(attr_mask & IBV_QP_AV) || !(attr_mask & IBV_QP_DEST_QPN) ||
		    !attr->ah_attr.is_global)
			return EINVAL;
		memcpy(&pid, attr->ah_attr.grh.dgid.raw + 12, 4);
		q->dest_pid = pid;
		q->dest_qpn = attr->dest_qp_num;
	}
	qp->state = attr->qp_state;
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct emul_qp *q = (struct emul_qp *)qp;
	q->stop = 1;
	if (q->thread_started)
		pthread_join(q->thread, NULL);
	close(q->sock);
	pthread_mutex_destroy(&q->mu);
	free(q);
	return 0;
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	switch (status) {
	case IBV_WC_SUCCESS:
		return "success";
	case IBV_WC_RETRY_EXC_ERR:
		return "transport retry counter exceeded";
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return "RNR retry counter exceeded";
	case IBV_WC_REM_ACCESS_ERR:
		return "remote access error";
	default:
		return "emulated error";
	}
}
