/* net.c: the progress thread of one yd_net and its request layer: per-peer send queues written
 * with nonblocking writev, receives matched against posted requests or kept as unexpected
 * messages, failure sweeps (a failed communicator's requests complete with its error; a dead
 * peer fails every communicator it belongs to). Connection setup is in net_connect.c. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "dataplane/yd_impl.h"

#define DISCARD_LEN (256 * 1024)
#define ABORT_MSG_MAX 600

void net_wake(struct yd_net *net)
{
	uint64_t one = 1;
	ssize_t r = write(net->wake_fd, &one, sizeof one);
	(void)r;
}

static void complete_locked(struct yd_net *net, struct yd_request *req, int rc)
{
	if (req->kind == REQ_ORPHAN) {
		free(req->owned);
		free(req);
		return;
	}
	req->rc = rc;
	req->done = 1;
	pthread_cond_broadcast(&net->cond);
}

void comm_describe_peer(const yd_comm *comm, int comm_peer, char *buf, size_t len)
{
	int nr = comm->net_rank[comm_peer];
	if (nr == comm_peer)
		snprintf(buf, len, "peer rank %d (%s)", comm_peer, comm->net->peers[nr].addr);
	else
		snprintf(buf, len, "peer rank %d (world rank %d, %s)", comm_peer, nr,
		         comm->net->peers[nr].addr);
}

static int comm_peer_of(const yd_comm *comm, int net_rank)
{
	for (int i = 0; i < comm->size; i++)
		if (comm->net_rank[i] == net_rank)
			return i;
	return -1;
}

/* Queues an abort message (reason text) for comm to every other member. */
static void send_abort_locked(yd_comm *comm)
{
	struct yd_net *net = comm->net;
	size_t len = strlen(comm->cause) + 1;
	for (int i = 0; i < comm->size; i++) {
		int p = comm->net_rank[i];
		if (i == comm->rank || net->peers[p].dead || net->peers[p].fd < 0)
			continue;
		struct yd_request *o = calloc(1, sizeof *o);
		char *copy = malloc(len);
		if (!o || !copy) {
			free(o);
			free(copy);
			return;
		}
		memcpy(copy, comm->cause, len);
		o->kind = REQ_ORPHAN;
		o->owned = copy;
		o->buf = copy;
		o->len = len;
		o->peer = p;
		o->hdr.magic = WIRE_MAGIC;
		o->hdr.type = WIRE_ABORT;
		o->hdr.comm_id = comm->id;
		o->hdr.tag = comm->failed_rc;
		o->hdr.len = len;
		struct net_peer *pp = &net->peers[p];
		if (pp->txq_tail)
			pp->txq_tail->next = o;
		else
			pp->txq = o;
		pp->txq_tail = o;
	}
}

void comm_fail_locked(yd_comm *comm, int rc, int notify_peers, const char *fmt, ...)
{
	if (comm->failed_rc)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(comm->cause, sizeof comm->cause, fmt, ap);
	va_end(ap);
	comm->failed_rc = rc;
	if (notify_peers)
		send_abort_locked(comm);
	comm->net->fail_gen++;
	pthread_cond_broadcast(&comm->net->cond);
	pthread_cond_broadcast(&comm->worker_cond);
	net_wake(comm->net);
}

void comm_fail(yd_comm *comm, int rc, int notify_peers, const char *fmt, ...)
{
	char cause[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cause, sizeof cause, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&comm->net->mu);
	comm_fail_locked(comm, rc, notify_peers, "%s", cause);
	pthread_mutex_unlock(&comm->net->mu);
}

int comm_op_error(yd_comm *comm, const char *opname, uint64_t seq, int rc)
{
	pthread_mutex_lock(&comm->net->mu);
	snprintf(comm->last_error, sizeof comm->last_error, "%s #%llu: %s", opname,
	         (unsigned long long)seq, comm->failed_rc ? comm->cause : yard_strerror(rc));
	pthread_mutex_unlock(&comm->net->mu);
	return rc;
}

/* ---- matching ---- */

static int hdr_matches(const struct yd_request *r, const struct wire_hdr *h, int peer)
{
	if (r->comm->id != h->comm_id || r->peer != peer || r->chan != h->chan)
		return 0;
	return r->chan == CHAN_COLL || r->tag == h->tag; /* collectives: FIFO per peer */
}

static void describe_meta(char *buf, size_t len, const struct coll_meta *m, int64_t step,
                          uint64_t bytes)
{
	snprintf(buf, len, "%s #%llu (count %llu, %s, %s, root %d, algo %s, step %lld, %llu bytes)",
	         coll_kind_name(m->coll), (unsigned long long)m->seq, (unsigned long long)m->count,
	         yd_dtype_name(m->dtype), yd_op_name(m->op), m->root, yd_algo_name(m->algo),
	         (long long)step, (unsigned long long)bytes);
}

/* 0 if the message fits the receive; else fails the communicator with YARD_EMISMATCH. */
static int check_match_locked(struct yd_request *r, const struct wire_hdr *h)
{
	char peer[200];
	if (r->chan == CHAN_P2P) {
		if (h->len == r->len)
			return 0;
		comm_describe_peer(r->comm, r->comm_peer, peer, sizeof peer);
		comm_fail_locked(r->comm, YARD_EMISMATCH, 1,
		                 "%s sent %llu bytes with tag %lld, the receive expects %llu", peer,
		                 (unsigned long long)h->len, (long long)h->tag,
		                 (unsigned long long)r->len);
		return YARD_EMISMATCH;
	}
	if (memcmp(&r->meta, &h->meta, sizeof r->meta) == 0 && r->tag == h->tag && r->len == h->len)
		return 0;
	char mine[256], theirs[256];
	describe_meta(mine, sizeof mine, &r->meta, r->tag, r->len);
	describe_meta(theirs, sizeof theirs, &h->meta, h->tag, h->len);
	comm_describe_peer(r->comm, r->comm_peer, peer, sizeof peer);
	comm_fail_locked(r->comm, YARD_EMISMATCH, 1,
	                 "collective mismatch with %s: this rank is in %s, the peer sent %s", peer,
	                 mine, theirs);
	return YARD_EMISMATCH;
}

static void unexp_remove_locked(struct yd_net *net, struct unexp *u)
{
	struct unexp **pp = &net->unexp, *prev = NULL;
	while (*pp && *pp != u) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (!*pp)
		return;
	*pp = u->next;
	if (net->unexp_tail == u)
		net->unexp_tail = prev;
	free(u->data);
	free(u);
}

/* A fully arrived unexpected message meets its receive. */
static void deliver_unexp_locked(struct yd_net *net, struct unexp *u, struct yd_request *r)
{
	int rc = check_match_locked(r, &u->hdr);
	if (rc == 0 && r->len)
		memcpy(r->buf, u->data, r->len);
	unexp_remove_locked(net, u);
	complete_locked(net, r, rc ? rc : 0);
}

static int peer_gone_rc(struct yd_net *net, yd_comm *comm, int peer, int is_send)
{
	if (comm->failed_rc)
		return comm->failed_rc;
	if (net->peers[peer].dead || net->peers[peer].fd < 0 ||
	    (!is_send && net->peers[peer].eof)) {
		char desc[200];
		comm_describe_peer(comm, comm_peer_of(comm, peer), desc, sizeof desc);
		comm_fail_locked(comm, YARD_EPEER, 1, "%s closed the connection", desc);
		return YARD_EPEER;
	}
	return 0;
}

int net_post_recv(struct yd_net *net, struct yd_request *req)
{
	req->kind = REQ_RECV;
	pthread_mutex_lock(&net->mu);
	if (req->comm->failed_rc) {
		pthread_mutex_unlock(&net->mu);
		return req->comm->failed_rc;
	}
	for (struct unexp *u = net->unexp; u; u = u->next) {
		if (u->claimed || !hdr_matches(req, &u->hdr, u->peer))
			continue;
		if (u->complete) {
			deliver_unexp_locked(net, u, req);
		} else {
			u->claimed = req;
			req->claimed = u;
		}
		pthread_mutex_unlock(&net->mu);
		return 0;
	}
	int rc = peer_gone_rc(net, req->comm, req->peer, 0);
	if (rc) {
		pthread_mutex_unlock(&net->mu);
		return rc;
	}
	req->next = NULL;
	if (net->posted_tail)
		net->posted_tail->next = req;
	else
		net->posted = req;
	net->posted_tail = req;
	pthread_mutex_unlock(&net->mu);
	return 0;
}

int net_post_send(struct yd_net *net, struct yd_request *req)
{
	req->kind = REQ_SEND;
	req->hdr.magic = WIRE_MAGIC;
	req->hdr.type = WIRE_DATA;
	req->hdr.chan = req->chan;
	req->hdr.comm_id = req->comm->id;
	req->hdr.tag = req->tag;
	req->hdr.meta = req->meta;
	req->hdr.len = req->len;
	req->sent = 0;
	req->next = NULL;
	pthread_mutex_lock(&net->mu);
	int rc = peer_gone_rc(net, req->comm, req->peer, 1);
	if (rc) {
		pthread_mutex_unlock(&net->mu);
		return rc;
	}
	struct net_peer *pp = &net->peers[req->peer];
	int was_empty = pp->txq == NULL;
	if (pp->txq_tail)
		pp->txq_tail->next = req;
	else
		pp->txq = req;
	pp->txq_tail = req;
	pthread_mutex_unlock(&net->mu);
	if (was_empty)
		net_wake(net);
	return 0;
}

int net_wait_until(struct yd_net *net, struct yd_request *req, uint64_t deadline_ns)
{
	int rc = 0;
	pthread_mutex_lock(&net->mu);
	while (!req->done) {
		if (!deadline_ns) {
			pthread_cond_wait(&net->cond, &net->mu);
			continue;
		}
		uint64_t now = yard_now_mono_ns();
		if (now >= deadline_ns) {
			rc = YARD_ETIMEDOUT;
			break;
		}
		struct timespec ts = {(time_t)(deadline_ns / 1000000000ull),
		                      (long)(deadline_ns % 1000000000ull)};
		pthread_cond_timedwait(&net->cond, &net->mu, &ts);
	}
	pthread_mutex_unlock(&net->mu);
	return rc;
}

/* ---- failures ---- */

static void peer_failed_locked(struct yd_net *net, int p, const char *what)
{
	struct net_peer *pp = &net->peers[p];
	if (pp->dead)
		return;
	pp->dead = 1;
	for (yd_comm *c = net->comms; c; c = c->net_next) {
		int cp = comm_peer_of(c, p);
		if (cp < 0)
			continue;
		char desc[200];
		comm_describe_peer(c, cp, desc, sizeof desc);
		comm_fail_locked(c, YARD_EPEER, 1, "%s %s", desc, what);
	}
	net->fail_gen++;
}

/* Peer p closed its side cleanly between messages: what it sent stays receivable, but a
 * receive still waiting for it can never complete. */
static void peer_eof_locked(struct yd_net *net, int p)
{
	net->peers[p].eof = 1;
	for (struct yd_request *r = net->posted; r; r = r->next) {
		if (r->peer != p)
			continue;
		char desc[200];
		comm_describe_peer(r->comm, r->comm_peer, desc, sizeof desc);
		comm_fail_locked(r->comm, YARD_EPEER, 1, "%s closed the connection", desc);
	}
	net->fail_gen++;
}

/* Completes every request that can no longer finish: those of failed communicators and those
 * waiting on dead peers. Runs on the progress thread with net->mu held. */
static void sweep_locked(struct yd_net *net)
{
	for (struct yd_request **rp = &net->posted, *prev = NULL; *rp;) {
		struct yd_request *r = *rp;
		int rc = r->comm->failed_rc;
		if (!rc && (net->peers[r->peer].dead || net->peers[r->peer].eof))
			rc = YARD_EPEER;
		if (!rc) {
			prev = r;
			rp = &r->next;
			continue;
		}
		*rp = r->next;
		if (net->posted_tail == r)
			net->posted_tail = prev;
		complete_locked(net, r, rc);
	}
	for (struct unexp *u = net->unexp; u; u = u->next) {
		struct yd_request *r = u->claimed;
		if (r && (r->comm->failed_rc || net->peers[u->peer].dead)) {
			u->claimed = NULL;
			r->claimed = NULL;
			complete_locked(net, r,
			                r->comm->failed_rc ? r->comm->failed_rc : YARD_EPEER);
		}
	}
	for (int p = 0; p < net->world; p++) {
		struct net_peer *pp = &net->peers[p];
		if (p == net->rank)
			continue;
		if (pp->rx_req && (pp->rx_req->comm->failed_rc || pp->dead)) {
			struct yd_request *r = pp->rx_req;
			pp->rx_req = NULL; /* the rest of the payload is discarded */
			complete_locked(net, r,
			                r->comm->failed_rc ? r->comm->failed_rc : YARD_EPEER);
		}
		struct yd_request *keep = NULL, *keep_tail = NULL;
		for (struct yd_request *r = pp->txq, *next; r; r = next) {
			next = r->next;
			int rc = r->kind == REQ_ORPHAN ? 0 : r->comm->failed_rc;
			if (pp->dead)
				rc = rc ? rc : YARD_EPEER;
			if (rc && r->sent > 0 && !pp->dead) {
				/* Half on the wire: finish it from a copy so the stream stays
				 * framed. */
				struct yd_request *o = calloc(1, sizeof *o);
				void *copy = r->len ? malloc(r->len) : NULL;
				if (o && (copy || !r->len)) {
					if (r->len)
						memcpy(copy, r->buf, r->len);
					o->kind = REQ_ORPHAN;
					o->owned = copy;
					o->buf = copy;
					o->len = r->len;
					o->hdr = r->hdr;
					o->sent = r->sent;
					o->peer = r->peer;
					complete_locked(net, r, rc);
					r = o;
					rc = 0;
				} else {
					free(o);
					free(copy);
					shutdown(pp->fd, SHUT_RDWR);
				}
			}
			if (rc) {
				complete_locked(net, r, rc);
				continue;
			}
			if (pp->dead) { /* orphans to a dead peer */
				complete_locked(net, r, 0);
				continue;
			}
			r->next = NULL;
			if (keep_tail)
				keep_tail->next = r;
			else
				keep = r;
			keep_tail = r;
		}
		pp->txq = keep;
		pp->txq_tail = keep_tail;
	}
}

/* ---- receive path (progress thread) ---- */

static yd_comm *find_comm_locked(struct yd_net *net, uint64_t id)
{
	for (yd_comm *c = net->comms; c; c = c->net_next)
		if (c->id == id)
			return c;
	return NULL;
}

/* A whole header arrived from peer p: choose where its payload goes. */
static void on_header_locked(struct yd_net *net, int p)
{
	struct net_peer *pp = &net->peers[p];
	struct wire_hdr *h = &pp->rxhdr;
	pp->rx_req = NULL;
	pp->rx_unexp = NULL;
	pp->rx_ctrl = NULL;
	pp->rx_len = h->len;
	pp->rx_got = 0;
	if (h->type == WIRE_ABORT) {
		if (h->len <= ABORT_MSG_MAX)
			pp->rx_ctrl = calloc(1, h->len + 1);
		return;
	}
	if (h->type == WIRE_HEARTBEAT)
		return; /* liveness only (last_rx_ns); no payload */
	yd_comm *c = find_comm_locked(net, h->comm_id);
	if (c && c->failed_rc)
		return; /* discard */
	for (struct yd_request **rp = &net->posted, *prev = NULL; *rp;
	     prev = *rp, rp = &(*rp)->next) {
		struct yd_request *r = *rp;
		if (!hdr_matches(r, h, p))
			continue;
		*rp = r->next;
		if (net->posted_tail == r)
			net->posted_tail = prev;
		int rc = check_match_locked(r, h);
		if (rc) {
			complete_locked(net, r, rc);
			return;
		}
		r->started = 1;
		pp->rx_req = r;
		return;
	}
	struct unexp *u = calloc(1, sizeof *u);
	if (!u || (h->len && !(u->data = malloc(h->len)))) {
		free(u);
		if (c)
			comm_fail_locked(c, YARD_ENOMEM, 1,
			                 "out of memory buffering an unexpected %llu-byte message",
			                 (unsigned long long)h->len);
		return;
	}
	u->peer = p;
	u->hdr = *h;
	if (net->unexp_tail)
		net->unexp_tail->next = u;
	else
		net->unexp = u;
	net->unexp_tail = u;
	pp->rx_unexp = u;
}

static void on_body_done_locked(struct yd_net *net, int p)
{
	struct net_peer *pp = &net->peers[p];
	if (pp->rx_req) {
		complete_locked(net, pp->rx_req, 0);
	} else if (pp->rx_unexp) {
		struct unexp *u = pp->rx_unexp;
		u->complete = 1;
		if (u->claimed)
			deliver_unexp_locked(net, u, u->claimed);
	} else if (pp->rxhdr.type == WIRE_ABORT) {
		yd_comm *c = find_comm_locked(net, pp->rxhdr.comm_id);
		int cp = c ? comm_peer_of(c, p) : -1;
		if (c && cp >= 0) {
			char desc[200];
			comm_describe_peer(c, cp, desc, sizeof desc);
			int rc = (int)pp->rxhdr.tag;
			if (rc == YARD_EABORTED || rc >= 0 || rc < YARD_EINTERNAL)
				rc = YARD_EPEER;
			comm_fail_locked(c, rc, 0, "%s failed: %s", desc,
			                 pp->rx_ctrl ? pp->rx_ctrl : "(no reason given)");
		}
		free(pp->rx_ctrl);
	}
	pp->rx_req = NULL;
	pp->rx_unexp = NULL;
	pp->rx_ctrl = NULL;
	pp->rx_body = 0;
	pp->rxhdr_got = 0;
}

/* Reads what peer p has for us. Returns -1 when the peer failed (already recorded). */
static int rx_progress(struct yd_net *net, int p)
{
	struct net_peer *pp = &net->peers[p];
	for (int iter = 0; iter < 64; iter++) {
		char *dst;
		size_t want;
		if (!pp->rx_body) {
			dst = (char *)&pp->rxhdr + pp->rxhdr_got;
			want = sizeof pp->rxhdr - pp->rxhdr_got;
		} else if (pp->rx_req) {
			dst = (char *)pp->rx_req->buf + pp->rx_got;
			want = pp->rx_len - pp->rx_got;
		} else if (pp->rx_unexp) {
			dst = pp->rx_unexp->data + pp->rx_got;
			want = pp->rx_len - pp->rx_got;
		} else if (pp->rx_ctrl) {
			dst = pp->rx_ctrl + pp->rx_got;
			want = pp->rx_len - pp->rx_got;
		} else {
			dst = net->discard;
			want = pp->rx_len - pp->rx_got;
			if (want > DISCARD_LEN)
				want = DISCARD_LEN;
		}
		ssize_t n = want ? read(pp->fd, dst, want) : 0;
		if (want && n == 0) {
			pthread_mutex_lock(&net->mu);
			if (!pp->rx_body && pp->rxhdr_got == 0)
				peer_eof_locked(net, p);
			else
				peer_failed_locked(
				    net, p, "closed the connection in the middle of a message");
			pthread_mutex_unlock(&net->mu);
			return -1;
		}
		if (n > 0)
			pp->last_rx_ns = yard_now_mono_ns();
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			char what[160];
			snprintf(what, sizeof what, "connection failed: %s", strerror(errno));
			pthread_mutex_lock(&net->mu);
			peer_failed_locked(net, p, what);
			pthread_mutex_unlock(&net->mu);
			return -1;
		}
		if (!pp->rx_body) {
			pp->rxhdr_got += (size_t)n;
			if (pp->rxhdr_got < sizeof pp->rxhdr)
				continue;
			pthread_mutex_lock(&net->mu);
			if (pp->rxhdr.magic != WIRE_MAGIC) {
				peer_failed_locked(net, p, "sent a corrupt message header");
				pthread_mutex_unlock(&net->mu);
				shutdown(pp->fd, SHUT_RDWR);
				return -1;
			}
			on_header_locked(net, p);
			pp->rx_body = 1;
			if (pp->rx_len == 0)
				on_body_done_locked(net, p);
			pthread_mutex_unlock(&net->mu);
		} else {
			pp->rx_got += (size_t)n;
			if (pp->rx_got < pp->rx_len)
				continue;
			pthread_mutex_lock(&net->mu);
			on_body_done_locked(net, p);
			pthread_mutex_unlock(&net->mu);
		}
	}
	return 0;
}

/* ---- send path (progress thread) ---- */

static int tx_progress(struct yd_net *net, int p)
{
	struct net_peer *pp = &net->peers[p];
	for (;;) {
		pthread_mutex_lock(&net->mu);
		struct yd_request *r = pp->txq;
		if (r)
			r->started = 1;
		pthread_mutex_unlock(&net->mu);
		if (!r)
			return 0;
		struct iovec iov[2];
		int niov = 0;
		size_t hsz = sizeof r->hdr;
		if (r->sent < hsz) {
			iov[niov].iov_base = (char *)&r->hdr + r->sent;
			iov[niov++].iov_len = hsz - r->sent;
		}
		size_t body_done = r->sent > hsz ? r->sent - hsz : 0;
		if (r->len > body_done) {
			iov[niov].iov_base = (char *)r->buf + body_done;
			iov[niov++].iov_len = r->len - body_done;
		}
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
		ssize_t n = niov ? sendmsg(pp->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			char what[160];
			snprintf(what, sizeof what, "connection failed while sending: %s",
			         strerror(errno));
			pthread_mutex_lock(&net->mu);
			peer_failed_locked(net, p, what);
			pthread_mutex_unlock(&net->mu);
			return -1;
		}
		r->sent += (size_t)n;
		pp->last_tx_ns = yard_now_mono_ns();
		if (r->sent < hsz + r->len)
			return 0; /* socket full */
		pthread_mutex_lock(&net->mu);
		pp->txq = r->next;
		if (!pp->txq)
			pp->txq_tail = NULL;
		complete_locked(net, r, 0);
		pthread_mutex_unlock(&net->mu);
	}
}

static int liveness_timeout_ms(struct yd_net *net)
{
	int t = net->timeout_ms;
	for (yd_comm *c = net->comms; c; c = c->net_next)
		if (c->timeout_ms > t)
			t = c->timeout_ms;
	return t;
}

int net_silent_peer(struct yd_net *net, const yd_comm *comm, uint64_t min_ms, uint64_t *silent_ms)
{
	uint64_t now = yard_now_mono_ns(), worst = 0;
	int who = -1;
	pthread_mutex_lock(&net->mu);
	for (int i = 0; i < comm->size; i++) {
		struct net_peer *pp = &net->peers[comm->net_rank[i]];
		if (i == comm->rank || pp->eof || pp->dead)
			continue;
		uint64_t quiet = (now - pp->last_rx_ns) / 1000000ull;
		if (quiet >= min_ms && quiet > worst) {
			worst = quiet;
			who = i;
		}
	}
	pthread_mutex_unlock(&net->mu);
	*silent_ms = worst;
	return who;
}

void comm_fail_timeout(yd_comm *comm, int comm_peer, const char *what)
{
	char peer[200], silent[300] = "";
	uint64_t quiet;
	comm_describe_peer(comm, comm_peer, peer, sizeof peer);
	int sp = net_silent_peer(comm->net, comm, (uint64_t)comm->timeout_ms / 2, &quiet);
	if (sp >= 0 && sp != comm_peer) {
		char who[200];
		comm_describe_peer(comm, sp, who, sizeof who);
		snprintf(silent, sizeof silent, "; %s has been silent for %llu ms", who,
		         (unsigned long long)quiet);
	}
	comm_fail(comm, YARD_ETIMEDOUT, 1, "timed out after %d ms waiting for %s (%s)%s",
	          comm->timeout_ms, peer, what, silent);
}

/* Heartbeats: every peer hears from us at least every interval, so a peer that hears nothing
 * for the whole deadline knows we are stopped or hung (not merely busy), and fails every
 * communicator we are in with YARD_ETIMEDOUT naming us. Caller holds net->mu. */
static void liveness_locked(struct yd_net *net, uint64_t interval_ns)
{
	uint64_t now = yard_now_mono_ns();
	uint64_t limit = (uint64_t)liveness_timeout_ms(net) * 1000000ull;
	for (int p = 0; p < net->world; p++) {
		struct net_peer *pp = &net->peers[p];
		if (p == net->rank || pp->dead || pp->eof || pp->fd < 0)
			continue;
		if (now - pp->last_rx_ns > limit) {
			char what[160];
			snprintf(what, sizeof what,
			         "has been silent for %llu ms (no data, no heartbeat)",
			         (unsigned long long)((now - pp->last_rx_ns) / 1000000ull));
			pp->dead = 1;
			for (yd_comm *c = net->comms; c; c = c->net_next) {
				int cp = comm_peer_of(c, p);
				if (cp < 0)
					continue;
				char desc[200];
				comm_describe_peer(c, cp, desc, sizeof desc);
				comm_fail_locked(c, YARD_ETIMEDOUT, 1, "%s %s", desc, what);
			}
			shutdown(pp->fd, SHUT_RDWR);
			net->fail_gen++;
			continue;
		}
		if (!pp->txq && now - pp->last_tx_ns > interval_ns) {
			struct yd_request *o = calloc(1, sizeof *o);
			if (!o)
				continue;
			o->kind = REQ_ORPHAN;
			o->peer = p;
			o->hdr.magic = WIRE_MAGIC;
			o->hdr.type = WIRE_HEARTBEAT;
			pp->txq = pp->txq_tail = o;
			pp->last_tx_ns = now; /* one heartbeat in flight at a time */
		}
	}
}

static void *progress_main(void *arg)
{
	struct yd_net *net = arg;
	struct pollfd *pfd = calloc((unsigned)net->world + 1u, sizeof *pfd);
	int *who = calloc((unsigned)net->world + 1u, sizeof *who);
	if (!pfd || !who)
		abort();
	int interval_ms = net->timeout_ms / 4;
	interval_ms = interval_ms < 50 ? 50 : (interval_ms > 1000 ? 1000 : interval_ms);
	uint64_t now = yard_now_mono_ns();
	for (int p = 0; p < net->world; p++)
		net->peers[p].last_rx_ns = net->peers[p].last_tx_ns = now;
	pthread_mutex_lock(&net->mu);
	while (!net->stop) {
		liveness_locked(net, (uint64_t)interval_ms * 1000000ull);
		if (net->swept_gen != net->fail_gen) {
			net->swept_gen = net->fail_gen;
			sweep_locked(net);
		}
		int n = 0;
		pfd[n].fd = net->wake_fd;
		pfd[n++].events = POLLIN;
		for (int p = 0; p < net->world; p++) {
			struct net_peer *pp = &net->peers[p];
			if (p == net->rank || pp->dead || pp->fd < 0)
				continue;
			if (pp->eof && !pp->txq)
				continue;
			pfd[n].fd = pp->fd;
			pfd[n].events = (pp->eof ? 0 : POLLIN) | (pp->txq ? POLLOUT : 0);
			pfd[n].revents = 0;
			who[n++] = p;
		}
		pthread_mutex_unlock(&net->mu);
		int ready = poll(pfd, (nfds_t)n, interval_ms / 2);
		if (ready > 0 && (pfd[0].revents & POLLIN)) {
			uint64_t v;
			ssize_t r = read(net->wake_fd, &v, sizeof v);
			(void)r;
		}
		for (int i = 1; ready > 0 && i < n; i++) {
			int p = who[i];
			if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) && !net->peers[p].eof)
				if (rx_progress(net, p) < 0)
					continue;
			if (pfd[i].revents & (POLLOUT | POLLERR))
				tx_progress(net, p);
		}
		pthread_mutex_lock(&net->mu);
		/* Sends posted while we polled are tried at once (the socket is usually writable).
		 */
		for (int p = 0; p < net->world; p++) {
			if (p == net->rank || net->peers[p].dead || !net->peers[p].txq)
				continue;
			pthread_mutex_unlock(&net->mu);
			tx_progress(net, p);
			pthread_mutex_lock(&net->mu);
		}
	}
	pthread_mutex_unlock(&net->mu);
	free(pfd);
	free(who);
	return NULL;
}

int net_start(struct yd_net *net)
{
	net->discard = malloc(DISCARD_LEN);
	net->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!net->discard || net->wake_fd < 0)
		return YARD_ENOMEM;
	if (pthread_create(&net->thread, NULL, progress_main, net) != 0)
		return YARD_ENOMEM;
	return 0;
}

void net_shutdown_sockets(struct yd_net *net)
{
	for (int p = 0; p < net->world; p++)
		if (p != net->rank && net->peers[p].fd >= 0)
			shutdown(net->peers[p].fd, SHUT_RDWR);
	net_wake(net);
}

/* Half-closes every connection and reads until each peer closes too (at most 2 s), so
 * that data we have not read never turns our close into a reset that loses the peer's last
 * messages to us. */
static void drain_close(struct yd_net *net)
{
	uint64_t deadline = yard_now_mono_ms() + 2000;
	int open_count = 0;
	for (int p = 0; p < net->world; p++) {
		struct net_peer *pp = &net->peers[p];
		if (p == net->rank || pp->fd < 0)
			continue;
		if (pp->dead) {
			close(pp->fd);
			pp->fd = -1;
			continue;
		}
		shutdown(pp->fd, SHUT_WR);
		open_count++;
	}
	struct pollfd *pfd = calloc((unsigned)net->world + 1u, sizeof *pfd);
	int *who = calloc((unsigned)net->world + 1u, sizeof *who);
	while (open_count > 0 && pfd && who) {
		uint64_t now = yard_now_mono_ms();
		if (now >= deadline)
			break;
		int n = 0;
		for (int p = 0; p < net->world; p++)
			if (p != net->rank && net->peers[p].fd >= 0) {
				pfd[n].fd = net->peers[p].fd;
				pfd[n].events = POLLIN;
				who[n++] = p;
			}
		if (poll(pfd, (nfds_t)n, (int)(deadline - now)) <= 0)
			break;
		for (int i = 0; i < n; i++) {
			if (!pfd[i].revents)
				continue;
			ssize_t r = read(pfd[i].fd, net->discard, DISCARD_LEN);
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
				close(pfd[i].fd);
				net->peers[who[i]].fd = -1;
				open_count--;
			}
		}
	}
	free(pfd);
	free(who);
	for (int p = 0; p < net->world; p++)
		if (p != net->rank && net->peers[p].fd >= 0)
			close(net->peers[p].fd);
}

/* Lets the progress thread finish writing what is queued (abort notices above all, so that
 * peers learn why we failed before they see us close), for at most 1 s. */
static void flush_queues(struct yd_net *net)
{
	uint64_t deadline = yard_now_mono_ms() + 1000;
	for (;;) {
		int pending = 0;
		pthread_mutex_lock(&net->mu);
		for (int p = 0; p < net->world; p++) {
			struct net_peer *pp = &net->peers[p];
			if (p == net->rank || pp->dead || pp->fd < 0)
				continue;
			for (struct yd_request *r = pp->txq; r; r = r->next)
				pending |= r->hdr.type != WIRE_HEARTBEAT;
		}
		pthread_mutex_unlock(&net->mu);
		if (!pending || yard_now_mono_ms() >= deadline)
			return;
		yard_sleep_ms(1);
	}
}

void net_free(struct yd_net *net)
{
	if (!net)
		return;
	if (net->thread) {
		flush_queues(net);
		pthread_mutex_lock(&net->mu);
		net->stop = 1;
		pthread_mutex_unlock(&net->mu);
		net_wake(net);
		pthread_join(net->thread, NULL);
	}
	if (net->peers) {
		if (net->discard)
			drain_close(net);
		for (int p = 0; p < net->world; p++) {
			struct net_peer *pp = &net->peers[p];
			for (struct yd_request *r = pp->txq, *next; r; r = next) {
				next = r->next;
				if (r->kind == REQ_ORPHAN) {
					free(r->owned);
					free(r);
				}
			}
			free(pp->rx_ctrl);
		}
	}
	for (struct unexp *u = net->unexp, *next; u; u = next) {
		next = u->next;
		free(u->data);
		free(u);
	}
	if (net->wake_fd > 0)
		close(net->wake_fd);
	free(net->discard);
	free(net->peers);
	pthread_cond_destroy(&net->cond);
	pthread_mutex_destroy(&net->mu);
	free(net);
}
