/* xfer.c: the transfer engine. Runs a set of sends and receives (receives optionally reducing
 * into their destination) over every peer at once until all complete, the communicator is
 * aborted, a peer fails, or nothing moved for the communicator's timeout. While it waits it
 * watches every peer's control socket, so a rank that dies or reports a failure anywhere in
 * the group fails this rank's operation too, naming the rank that failed.
 * It knows nothing about algorithms; the transports move the bytes. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "dataplane/dp.h"

void dp_hdr_fill(struct dp_hdr *h, const struct dp_op *op, size_t len)
{
	memset(h, 0, sizeof *h);
	h->magic = DP_MAGIC;
	h->kind = (uint8_t)op->kind;
	h->dtype = (uint8_t)op->dtype;
	h->op = (uint8_t)op->op;
	h->algo = (uint8_t)op->algo;
	h->root = op->kind == DP_P2P ? op->tag : op->root;
	h->flags = DP_HDR_DOING;
	h->count = op->count;
	h->seq = op->seq;
	h->len = len;
}

static const char *kind_names[] = {"?",         "allreduce", "reduce_scatter", "allgather",
                                   "broadcast", "reduce",    "barrier",        "split",
                                   "send/recv", "calibrate"};

const char *dp_kind_name(enum dp_kind k)
{
	return (unsigned)k < sizeof kind_names / sizeof kind_names[0] ? kind_names[k] : "?";
}

static void hdr_desc(const struct dp_hdr *h, char *buf, size_t len)
{
	if (h->kind == DP_P2P)
		snprintf(buf, len, "send(tag=%d, count=%llu, dtype=%s, bytes=%llu)", (int)h->root,
		         (unsigned long long)h->count, yd_dtype_name(h->dtype),
		         (unsigned long long)h->len);
	else
		snprintf(buf, len,
		         "%s #%llu(count=%llu, dtype=%s, op=%s, root=%d, algo=%s, bytes=%llu)",
		         dp_kind_name(h->kind), (unsigned long long)h->seq,
		         (unsigned long long)h->count, yd_dtype_name(h->dtype), yd_op_name(h->op),
		         (int)h->root, yd_algo_name(h->algo), (unsigned long long)h->len);
}

int dp_hdr_check(yd_comm *c, struct dp_xfer *x, const struct dp_hdr *got)
{
	const struct dp_hdr *w = &x->hdr;
	char a[200], b[200], peer[160];
	if (got->magic == w->magic && got->kind == w->kind && got->dtype == w->dtype &&
	    got->root == w->root && got->count == w->count && got->len == w->len &&
	    (w->kind == DP_P2P || (got->op == w->op && got->algo == w->algo && got->seq == w->seq))) {
		if ((got->flags & DP_HDR_DOING) && x->peer >= 0 && x->peer < c->size)
			c->peers[x->peer].hears_doing = 1;
		return 0;
	}
	if (got->magic != DP_MAGIC)
		return dp_fail(c, YARD_ECORRUPT, x->peer, "%s #%llu: %s sent a corrupt header",
		               x->what, (unsigned long long)w->seq,
		               dp_peer_desc(c, x->peer, peer, sizeof peer));
	hdr_desc(got, a, sizeof a);
	hdr_desc(w, b, sizeof b);
	return dp_fail(c, YARD_EMISMATCH, -1,
	               "%s #%llu: mismatched operations: %s called %s but this rank (rank %d) "
	               "called %s",
	               x->what, (unsigned long long)w->seq,
	               dp_peer_desc(c, x->peer, peer, sizeof peer), a, c->rank, b);
}

int dp_frame_deliver(yd_comm *c, struct dp_xfer *x, const struct dp_hdr *h, uint64_t off,
                     uint64_t len, const void *data, const char *transport)
{
	int rc = dp_hdr_check(c, x, h);
	if (rc)
		return rc;
	if (off != x->done || len > x->len - x->done)
		return dp_fail(c, YARD_ECORRUPT, x->peer,
		               "%s #%llu: %s frame out of order from rank %d", x->what,
		               (unsigned long long)x->hdr.seq, transport, x->peer);
	if (x->reduce) {
		enum yd_op op = x->hdr.op == YD_AVG ? YD_SUM : (enum yd_op)x->hdr.op;
		dp_reduce((char *)x->dst + x->done, (const char *)x->src + x->done, data,
		          len / yd_dtype_size(x->hdr.dtype), x->hdr.dtype, op);
	} else if (len) {
		memcpy((char *)x->dst + x->done, data, len);
	}
	x->done += len;
	return 0;
}

void dp_xfer_prepare(yd_comm *c, struct dp_xfer *x)
{
	struct dp_peer *p = &c->peers[x->peer];
	x->done = 0;
	x->complete = 0;
	x->parts_left = p->transport == YD_TRANSPORT_TCP ? dp_tcp_parts(c, p, x->len) : 1;
}

static void x_fill(struct dp_xfer *x, const struct dp_op *o, int peer, size_t len)
{
	memset(x, 0, sizeof *x);
	x->peer = peer;
	x->len = len;
	x->what = dp_kind_name(o->kind);
	dp_hdr_fill(&x->hdr, o, len);
}

void dp_x_send(struct dp_xfer *x, const struct dp_op *o, int peer, const void *buf, size_t len)
{
	x_fill(x, o, peer, len);
	x->is_send = 1;
	x->src = buf;
}

void dp_x_recv(struct dp_xfer *x, const struct dp_op *o, int peer, void *buf, size_t len)
{
	x_fill(x, o, peer, len);
	x->dst = buf;
}

void dp_x_recv_reduce(struct dp_xfer *x, const struct dp_op *o, int peer, void *dst,
                      const void *src, size_t len)
{
	x_fill(x, o, peer, len);
	x->dst = dst;
	x->src = src;
	x->reduce = 1;
}

void dp_op_reduce(const struct dp_op *o, void *dst, const void *a, const void *b, size_t count)
{
	dp_reduce(dst, a, b, count, o->dtype, o->op == YD_AVG ? YD_SUM : o->op);
}

int dp_xset_next(const struct dp_xset *s, int after, int peer, int is_send)
{
	for (int i = after + 1; i < s->n; i++)
		if (s->x[i].peer == peer && s->x[i].is_send == is_send && !s->x[i].complete)
			return i;
	return -1;
}

int dp_xset_pending(const struct dp_xset *s)
{
	int n = 0;
	for (int i = 0; i < s->n; i++)
		n += !s->x[i].complete;
	return n;
}

void dp_xset_begin(yd_comm *c, struct dp_xset *s)
{
	s->uses_shm = 0;
	for (int i = 0; i < c->size; i++) {
		struct dp_peer *p = &c->peers[i];
		p->shm_tx_cur = p->shm_rx_cur = -1;
		p->shm_tx_last = p->shm_rx_last = -1;
		dp_tcp_set_begin(c, p);
	}
	for (int i = 0; i < s->n; i++) {
		dp_xfer_prepare(c, &s->x[i]);
		if (c->peers[s->x[i].peer].transport == YD_TRANSPORT_SHM)
			s->uses_shm = 1;
	}
}

int dp_xset_progress(yd_comm *c, struct dp_xset *s, int *progressed)
{
	int rc;
	if (atomic_load(&c->failed))
		return atomic_load(&c->failed);
	if (c->doorbell)
		s->bell = atomic_load(c->doorbell);
	for (int i = 0; i < c->size; i++) {
		struct dp_peer *p = &c->peers[i];
		if (i == c->rank)
			continue;
		if (p->transport == YD_TRANSPORT_SHM) {
			rc = dp_shm_progress_rx(c, p, s, progressed);
			if (rc == 0)
				rc = dp_shm_progress_tx(c, p, s, progressed);
		} else if (p->transport == YD_TRANSPORT_RDMA) {
			rc = dp_rdma_progress(c, p, s, progressed);
		} else {
			rc = dp_tcp_progress_rx(c, p, s, progressed);
			if (rc == 0)
				rc = dp_tcp_progress_tx(c, p, s, progressed);
		}
		if (rc)
			return rc;
	}
	return 0;
}

/* The operation the set belongs to, for messages: the first pending transfer. */
static struct dp_xfer *first_pending(struct dp_xset *s, int prefer_recv)
{
	struct dp_xfer *any = NULL;
	for (int i = 0; i < s->n; i++) {
		if (s->x[i].complete)
			continue;
		if (!prefer_recv || !s->x[i].is_send)
			return &s->x[i];
		if (!any)
			any = &s->x[i];
	}
	return any;
}

/* Sends one note to p whole or not at all: the reader takes the stream in note-sized
 * frames, so a torn note would make every later one (a failure report among them) garbage.
 * A socket with no room for any of it drops the note (YARD_EBUSY); one that took part of
 * it gets the rest within 200 ms, else the peer is not reading and the stream is lost. */
static int note_send(yd_comm *c, struct dp_peer *p, const struct dp_note *n)
{
	int rc = 0;
	pthread_mutex_lock(&c->note_lock);
	ssize_t r = send(p->ctl_fd, n, sizeof *n, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (r < 0)
		rc = errno == EAGAIN || errno == EWOULDBLOCK ? YARD_EBUSY : YARD_EIO;
	else if ((size_t)r < sizeof *n)
		rc = dp_write_full(p->ctl_fd, (const char *)n + r, sizeof *n - (size_t)r, 200);
	pthread_mutex_unlock(&c->note_lock);
	return rc;
}

/* Tells peer p the collective this rank runs (DP_NOTE_DOING), once per sequence number. A
 * full control socket drops the note: it only speeds up the report of a mismatch. */
static void tell_doing(yd_comm *c, struct dp_peer *p)
{
	if (c->doing.seq == 0 || p->told_seq == c->doing.seq || !p->hears_doing || p->ctl_fd < 0 ||
	    p->eof)
		return;
	struct dp_note n;
	memset(&n, 0, sizeof n);
	n.magic = DP_MAGIC;
	n.type = DP_NOTE_DOING;
	n.culprit = -1;
	memcpy(n.msg, &c->doing, sizeof c->doing);
	if (note_send(c, p, &n) == 0)
		p->told_seq = c->doing.seq;
}

/* Peer p said it waits in a collective of this rank's sequence number and called another:
 * the mismatch, named as a message's header would name it. */
static int doing_check(yd_comm *c, struct dp_peer *p)
{
	if (c->doing.seq == 0 || p->doing.seq != c->doing.seq)
		return 0;
	struct dp_xfer x = {
	    .peer = p->rank, .hdr = c->doing, .what = dp_kind_name(c->doing.kind)};
	return dp_hdr_check(c, &x, &p->doing);
}

static int note_received(yd_comm *c, struct dp_peer *p)
{
	char peer[160];
	struct dp_note *n = &p->note_in;
	n->msg[sizeof n->msg - 1] = 0;
	if (n->magic != DP_MAGIC)
		return dp_fail(c, YARD_ECORRUPT, -1, "control stream from %s is corrupt",
		               dp_peer_desc(c, p->rank, peer, sizeof peer));
	if (n->type == DP_NOTE_DOING) {
		memcpy(&p->doing, n->msg, sizeof p->doing);
		p->hears_doing = 1;
		if (p->doing.magic != DP_MAGIC)
			return dp_fail(c, YARD_ECORRUPT, -1, "control stream from %s is corrupt",
			               dp_peer_desc(c, p->rank, peer, sizeof peer));
		/* a peer in this rank's collective learns this rank's side too, whatever it waits
		 * for */
		if (p->doing.seq == c->doing.seq)
			tell_doing(c, p);
		return doing_check(c, p);
	}
	if (n->type == DP_NOTE_GOODBYE) {
		p->said_goodbye = 1;
		return 0;
	}
	return dp_fail(c, n->code == YARD_EABORTED ? YARD_EPEER : n->code, -1,
	               "rank %d reports: %s", p->rank, n->msg);
}

/* Reads whatever the control sockets have. EOF without a goodbye is a dead peer. */
static int ctl_read(yd_comm *c, struct dp_peer *p, const struct dp_xfer *x)
{
	char peer[160];
	for (;;) {
		ssize_t r = recv(p->ctl_fd, (char *)&p->note_in + p->note_fill,
		                 sizeof p->note_in - p->note_fill, MSG_DONTWAIT);
		if (r > 0) {
			p->note_fill += (size_t)r;
			if (p->note_fill == sizeof p->note_in) {
				p->note_fill = 0;
				int rc = note_received(c, p);
				if (rc)
					return rc;
			}
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return 0;
		p->eof = 1;
		if (p->said_goodbye)
			return 0;
		return dp_fail(c, YARD_EPEER, p->rank, "%s #%llu: %s closed the connection (%s)",
		               x ? x->what : "communicator",
		               x ? (unsigned long long)x->hdr.seq : 0ull,
		               dp_peer_desc(c, p->rank, peer, sizeof peer),
		               r == 0 ? "process exited or was killed" : strerror(errno));
	}
}

/* Polls control sockets (and the wake eventfd, and the given data sockets). */
static int poll_all(yd_comm *c, struct dp_xset *s, int timeout_ms, int with_data)
{
	/* every control socket, and every data socket: a rank of a large group must still hear
	 * the others' failure reports (the stack of a rank's thread holds 74 KB at 1,024) */
	struct pollfd fds[1 + (size_t)c->size * (1 + DP_TCP_MAX_SOCKS)];
	int nf = 0, rc;
	c->ctl_drained_ms = yard_now_mono_ms();
	fds[nf++] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
	for (int i = 0; i < c->size; i++) {
		struct dp_peer *p = &c->peers[i];
		if (i == c->rank || p->eof || p->ctl_fd < 0)
			continue;
		fds[nf++] = (struct pollfd){.fd = p->ctl_fd, .events = POLLIN};
	}
	int nctl = nf;
	if (with_data && s) {
		for (int i = 0; i < c->size; i++) {
			struct dp_peer *p = &c->peers[i];
			if (i == c->rank || p->transport == YD_TRANSPORT_SHM)
				continue;
			if (p->transport == YD_TRANSPORT_RDMA &&
			    nf < (int)(sizeof fds / sizeof fds[0])) {
				fds[nf++] =
				    (struct pollfd){.fd = dp_rdma_wait_fd(p), .events = POLLIN};
				continue;
			}
			for (int k = 0; k < p->nsock && nf < (int)(sizeof fds / sizeof fds[0]);
			     k++) {
				short ev = 0;
				if (p->rx[k].cur >= 0 || dp_xset_next(s, p->rx[k].last, i, 0) >= 0)
					ev |= POLLIN;
				if (p->tx[k].cur >= 0 || dp_xset_next(s, p->tx[k].last, i, 1) >= 0)
					ev |= POLLOUT;
				if (ev)
					fds[nf++] =
					    (struct pollfd){.fd = p->tx[k].fd, .events = ev};
			}
		}
	}
	rc = poll(fds, (nfds_t)nf, timeout_ms);
	if (rc <= 0)
		return 0;
	if (fds[0].revents) {
		uint64_t v;
		ssize_t r = read(c->wake_fd, &v, sizeof v);
		(void)r;
	}
	for (int i = nctl; c->rdma && i < nf; i++)
		for (int j = 0; fds[i].revents && j < c->size; j++)
			if (j != c->rank && c->peers[j].transport == YD_TRANSPORT_RDMA &&
			    dp_rdma_wait_fd(&c->peers[j]) == fds[i].fd)
				dp_rdma_ack_events(&c->peers[j]);
	for (int i = 1; i < nctl; i++) {
		if (!fds[i].revents)
			continue;
		for (int j = 0; j < c->size; j++)
			if (c->peers[j].ctl_fd == fds[i].fd && j != c->rank) {
				rc = ctl_read(c, &c->peers[j], s ? first_pending(s, 1) : NULL);
				if (rc)
					return rc;
			}
	}
	return 0;
}

int dp_peer_lost(yd_comm *c, struct dp_peer *p, const struct dp_xfer *x, const char *why)
{
	char peer[160];
	uint64_t end = yard_now_mono_ms() + 200;
	/* A peer that failed first sent a notice on its control socket before closing: prefer
	 * that (it names the rank that really failed) over blaming the messenger. */
	while (!atomic_load(&c->failed) && !p->eof && p->ctl_fd >= 0) {
		uint64_t now = yard_now_mono_ms();
		if (now >= end)
			break;
		struct pollfd pfd = {.fd = p->ctl_fd, .events = POLLIN};
		if (poll(&pfd, 1, (int)(end - now)) > 0)
			ctl_read(c, p, x);
	}
	if (atomic_load(&c->failed))
		return atomic_load(&c->failed);
	return dp_fail(c, YARD_EPEER, p->rank, "%s #%llu: %s %s", x->what,
	               (unsigned long long)x->hdr.seq, dp_peer_desc(c, p->rank, peer, sizeof peer),
	               why);
}

int dp_poll_ctl(yd_comm *c, int timeout_ms)
{
	return poll_all(c, NULL, timeout_ms, 0);
}

int dp_poll_ctl_op(yd_comm *c, const struct dp_op *o, int timeout_ms)
{
	struct dp_xfer x;
	dp_x_recv(&x, o, -1, NULL, 0);
	struct dp_xset s = {.x = &x, .n = 1};
	return poll_all(c, &s, timeout_ms, 0);
}

int dp_xset_wait(yd_comm *c, struct dp_xset *s, int max_wait_ms)
{
	int tcp_pending = 0, rc;
	for (int i = 0; i < s->n; i++)
		if (!s->x[i].complete && c->peers[s->x[i].peer].transport != YD_TRANSPORT_SHM)
			tcp_pending = 1;
	if (atomic_load(&c->aborted))
		return dp_fail(c, YARD_EABORTED, c->rank, "operation aborted");
	if (s->uses_shm && (rc = dp_shared_check_peers(c, first_pending(s, 1))) != 0)
		return rc;
	if (s->uses_shm && !tcp_pending) {
		/* shm only: sleep on our doorbell, then look at the control sockets */
		if (c->doorbell && atomic_load(c->doorbell) == s->bell)
			dp_shm_wait(c, s->bell, max_wait_ms);
		rc = poll_all(c, s, 0, 0);
	} else {
		rc = poll_all(c, s, s->uses_shm ? 1 : max_wait_ms, 1);
	}
	if (rc == 0 && atomic_load(&c->failed))
		rc = atomic_load(&c->failed);
	return rc;
}

int dp_xset_check_deadline(yd_comm *c, struct dp_xset *s, uint64_t last_progress_ms)
{
	char peer[160];
	uint64_t now = yard_now_mono_ms();
	if (now - last_progress_ms < (uint64_t)c->timeout_ms)
		return 0;
	struct dp_xfer *x = first_pending(s, 1);
	if (!x)
		return 0;
	return dp_fail(c, YARD_ETIMEDOUT, x->peer,
	               "%s #%llu: timed out after %d ms waiting for %s (%s %zu of %zu bytes)",
	               x->what, (unsigned long long)x->hdr.seq, c->timeout_ms,
	               dp_peer_desc(c, x->peer, peer, sizeof peer),
	               x->is_send ? "sent" : "received", x->done, x->len);
}

/* Sockets: a few polling rounds before sleeping in poll(2). */
#define TCP_SPIN_ROUNDS 200

/* A set stalled for DP_DOING_AFTER_MS: the peers it waits for over a network (shm peers read
 * the announcements) learn which collective this rank runs, and a peer that already said it
 * runs another of the same sequence number is a mismatch. Ranks that all wait to receive (a
 * tree's root against a broadcast's receivers) would otherwise meet only the deadline. */
static int tell_stalled(yd_comm *c, const struct dp_xset *s)
{
	for (int i = 0; i < s->n; i++) {
		struct dp_peer *p = &c->peers[s->x[i].peer];
		if (!s->x[i].complete && p->transport != YD_TRANSPORT_SHM &&
		    s->x[i].hdr.kind != DP_P2P)
			tell_doing(c, p);
	}
	for (int r = 0; r < c->size; r++) {
		int rc = r == c->rank ? 0 : doing_check(c, &c->peers[r]);
		if (rc)
			return rc;
	}
	return 0;
}

int dp_xfer_run(yd_comm *c, struct dp_xfer *x, int n)
{
	struct dp_xset s = {.x = x, .n = n};
	uint64_t last = 0;
	int spins = 0, told = 0, rc;
	dp_xset_begin(c, &s);
	/* a rank that never waits (the slowest of a group) still reads its control sockets once
	 * a second, so that the notes of the ranks that wait for it do not pile up there */
	if (yard_now_mono_ms() - c->ctl_drained_ms >= 1000 && (rc = poll_all(c, &s, 0, 0)) != 0)
		return rc;
	for (;;) {
		int progressed = 0;
		rc = dp_xset_progress(c, &s, &progressed);
		if (rc)
			return rc;
		if (!dp_xset_pending(&s))
			return 0;
		if (progressed) {
			last = 0;
			spins = 0;
			continue;
		}
		if (atomic_load(&c->aborted))
			return dp_fail(c, YARD_EABORTED, c->rank, "operation aborted");
		if (last == 0)
			last = yard_now_mono_ms();
		if (s.uses_shm && spins < DP_SPIN_ROUNDS) {
			dp_spin(spins++);
			continue;
		}
		if (!s.uses_shm && spins < TCP_SPIN_ROUNDS) {
			/* each round is a nonblocking recv: a reply on the way is read without the
			 * cost of sleeping in poll and being woken; yielding between rounds lets a
			 * peer on the same core run */
			spins++;
			sched_yield();
			continue;
		}
		if (!told && yard_now_mono_ms() - last >= DP_DOING_AFTER_MS) {
			told = 1;
			if ((rc = tell_stalled(c, &s)) != 0)
				return rc;
		}
		rc = dp_xset_check_deadline(c, &s, last);
		if (rc == 0)
			rc = dp_xset_wait(c, &s, 5);
		if (rc)
			return rc;
	}
}

void dp_send_note(yd_comm *c, int type, int culprit, int code, const char *msg)
{
	struct dp_note n;
	memset(&n, 0, sizeof n);
	n.magic = DP_MAGIC;
	n.type = (uint32_t)type;
	n.culprit = culprit;
	n.code = code;
	snprintf(n.msg, sizeof n.msg, "%s", msg);
	for (int i = 0; i < c->size; i++) {
		struct dp_peer *p = &c->peers[i];
		if (i == c->rank || p->ctl_fd < 0 || p->eof)
			continue;
		note_send(c, p, &n);
	}
}
