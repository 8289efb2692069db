/* transport_tcp.c: TCP between ranks: listening, connecting the full mesh at init (every
 * pair gets one control socket plus, when the pair talks TCP, one or more data sockets), and
 * nonblocking progress of message parts on the data sockets.
 *
 * A message of len bytes travels as one part per data socket when it is large (else one part
 * on socket 0); every part starts with the full dp_hdr, so every socket checks for
 * mismatches on its own. Sends go straight from the user's buffer; plain receives land
 * straight in the destination; reducing receives fill a 256 KiB piece and reduce it into the
 * destination while the next piece arrives. TCP_NODELAY on, SO_SNDBUF/SO_RCVBUF left to the
 * kernel's autotuning (pinning them small costs 40 ms delayed-ACK stalls). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/clock.h"
#include "dataplane/dp.h"

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void set_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int dp_write_full(int fd, const void *buf, size_t len, int timeout_ms)
{
	const char *p = buf;
	uint64_t end = yard_now_mono_ms() + (uint64_t)timeout_ms;
	while (len > 0) {
		ssize_t r = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r > 0) {
			p += r;
			len -= (size_t)r;
			continue;
		}
		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return YARD_EIO;
		uint64_t now = yard_now_mono_ms();
		if (now >= end)
			return YARD_ETIMEDOUT;
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		poll(&pfd, 1, (int)(end - now));
	}
	return 0;
}

int dp_read_full(int fd, void *buf, size_t len, int timeout_ms)
{
	char *p = buf;
	uint64_t end = yard_now_mono_ms() + (uint64_t)timeout_ms;
	while (len > 0) {
		ssize_t r = recv(fd, p, len, MSG_DONTWAIT);
		if (r > 0) {
			p += r;
			len -= (size_t)r;
			continue;
		}
		if (r == 0)
			return YARD_EPEER;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return YARD_EIO;
		uint64_t now = yard_now_mono_ms();
		if (now >= end)
			return YARD_ETIMEDOUT;
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		poll(&pfd, 1, (int)(end - now));
	}
	return 0;
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *sl)
{
	struct addrinfo hints, *res = NULL;
	char portstr[16];
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(portstr, sizeof portstr, "%d", port);
	if (getaddrinfo(host, portstr, &hints, &res) != 0 || !res)
		return YARD_EINVAL;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sl = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

int dp_tcp_listen(const char *host, int port, int *fd_out, int *port_out, char *err, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int one = 1;
	if (resolve(host, port, &ss, &sl)) {
		snprintf(err, len, "cannot resolve listen address %s", host);
		return YARD_EINVAL;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, len, "socket: %s", strerror(errno));
		return YARD_EIO;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 256) < 0) {
		snprintf(err, len, "cannot listen on %s:%d: %s", host, port, strerror(errno));
		close(fd);
		return YARD_EIO;
	}
	sl = sizeof ss;
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*port_out = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
	                                          : ((struct sockaddr_in6 *)&ss)->sin6_port);
	set_nonblock(fd);
	*fd_out = fd;
	return 0;
}

/* ---- mesh setup ---- */

struct dp_hello {
	uint32_t magic, world;
	int32_t src, dst, idx, pid;
	uint64_t nonce;
};

enum { C_IDLE, C_CONNECTING, C_HELLO, C_DONE, C_ACCEPTED };

/* An accepted connection: its slot is free again once it is closed (C_IDLE, fd -1). One
 * that has not sent its whole hello within DP_HELLO_MS is closed: a peer sends its hello as
 * soon as it is connected (and dials again if we close it), while a connection from anything
 * else (a port scanner, a health check, another job's rank on a reused port) would otherwise
 * hold its slot until the deadline. DP_SPARE_IN slots beyond the expected peers take such
 * connections, and what arrives while every slot is busy is closed at once: the peer's next
 * dial gets in once a stray has timed out. */
#define DP_HELLO_MS 2000
#define DP_SPARE_IN 64

struct conn {
	int fd, state, peer, idx;
	uint64_t retry_at_ms; /* outgoing: when to dial again; incoming: the hello's deadline */
	struct dp_hello buf;
	size_t fill;
};

static void in_close(struct conn *k)
{
	close(k->fd);
	k->fd = -1;
	k->state = C_IDLE;
}

/* A free slot of in[] (a closed connection's, or the next unused), -1 when all are busy. */
static int in_slot(struct conn *in, int *nin, int cap)
{
	for (int i = 0; i < *nin; i++)
		if (in[i].state == C_IDLE && in[i].fd < 0)
			return i;
	return *nin < cap ? (*nin)++ : -1;
}

static int nsocks_for(yd_comm *c, int peer)
{
	return 1 + (c->peers[peer].transport == YD_TRANSPORT_TCP ? c->socks_per_peer : 0);
}

static void split_endpoint(const char *ep, char *host, size_t hl, int *port)
{
	const char *colon = strrchr(ep, ':');
	size_t n = colon ? (size_t)(colon - ep) : strlen(ep);
	if (n >= hl)
		n = hl - 1;
	memcpy(host, ep, n);
	host[n] = 0;
	if (n > 1 && host[0] == '[' && host[n - 1] == ']') {
		memmove(host, host + 1, n - 2);
		host[n - 2] = 0;
	}
	*port = colon ? atoi(colon + 1) : 0;
}

static void conn_start(yd_comm *c, struct conn *k)
{
	char host[256];
	int port;
	struct sockaddr_storage ss;
	socklen_t sl;
	split_endpoint(c->peers[k->peer].endpoint, host, sizeof host, &port);
	k->fill = 0;
	if (resolve(host, port, &ss, &sl)) {
		k->state = C_IDLE;
		k->retry_at_ms = yard_now_mono_ms() + 50;
		return;
	}
	k->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (k->fd < 0) {
		k->state = C_IDLE;
		k->retry_at_ms = yard_now_mono_ms() + 50;
		return;
	}
	int r = connect(k->fd, (struct sockaddr *)&ss, sl);
	k->state = (r == 0 || errno == EINPROGRESS) ? C_CONNECTING : C_IDLE;
	if (k->state == C_IDLE) {
		close(k->fd);
		k->fd = -1;
		k->retry_at_ms = yard_now_mono_ms() + 20;
	}
}

static void conn_retry(struct conn *k)
{
	if (k->fd >= 0)
		close(k->fd);
	k->fd = -1;
	k->state = C_IDLE;
	k->retry_at_ms = yard_now_mono_ms() + 20;
}

/* Connects to lower ranks and accepts higher ranks at the same time, so that a missing rank
 * is named as missing by everyone rather than blamed on whoever waited for it. */
int dp_tcp_connect_mesh(yd_comm *c, int listen_fd, char *err, size_t errlen)
{
	int total_out = 0, total_in = 0;
	for (int j = 0; j < c->size; j++) {
		if (j < c->rank)
			total_out += nsocks_for(c, j);
		else if (j > c->rank)
			total_in += nsocks_for(c, j);
	}
	struct conn *out = calloc((size_t)total_out + 1, sizeof *out);
	struct conn *in = calloc((size_t)total_in + DP_SPARE_IN, sizeof *in);
	int nin = 0, done_in = 0, done_out = 0, rc = 0;
	int **slot = calloc((size_t)c->size, sizeof *slot);
	if (!out || !in || !slot) {
		free(out);
		free(in);
		free(slot);
		return YARD_ENOMEM;
	}
	for (int j = 0; j < c->size; j++) {
		struct dp_peer *p = &c->peers[j];
		p->nsock = p->transport == YD_TRANSPORT_TCP ? c->socks_per_peer : 0;
		p->ctl_fd = -1;
		for (int k = 0; k < DP_TCP_MAX_SOCKS; k++)
			p->tx[k].fd = p->rx[k].fd = -1;
	}
	int no = 0;
	for (int j = 0; j < c->rank; j++)
		for (int k = 0; k < nsocks_for(c, j); k++) {
			out[no] = (struct conn){.fd = -1, .state = C_IDLE, .peer = j, .idx = k};
			conn_start(c, &out[no]);
			no++;
		}
	uint64_t deadline = yard_now_mono_ms() + (uint64_t)c->timeout_ms;
	while (done_out < total_out || done_in < total_in) {
		uint64_t now = yard_now_mono_ms();
		if (now >= deadline) {
			rc = YARD_ETIMEDOUT;
			break;
		}
		struct pollfd fds[1 + 512];
		int map[1 + 512];
		int nf = 0;
		fds[nf] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
		map[nf++] = -1;
		int wait_ms = (int)(deadline - now);
		for (int i = 0; i < no && nf < 300; i++) {
			struct conn *k = &out[i];
			if (k->state == C_IDLE) {
				if (now >= k->retry_at_ms)
					conn_start(c, k);
				else if ((int)(k->retry_at_ms - now) < wait_ms)
					wait_ms = (int)(k->retry_at_ms - now);
			}
			if (k->state == C_CONNECTING || k->state == C_HELLO) {
				fds[nf] = (struct pollfd){
				    .fd = k->fd,
				    .events = k->state == C_CONNECTING ? POLLOUT : POLLIN};
				map[nf++] = i;
			}
		}
		for (int i = 0; i < nin && nf < 512; i++)
			if (in[i].state == C_HELLO) {
				if (now >= in[i].retry_at_ms) {
					in_close(&in[i]); /* no hello in time: not a peer */
					continue;
				}
				if ((int)(in[i].retry_at_ms - now) < wait_ms)
					wait_ms = (int)(in[i].retry_at_ms - now);
				fds[nf] = (struct pollfd){.fd = in[i].fd, .events = POLLIN};
				map[nf++] = 1000 + i;
			}
		if (poll(fds, (nfds_t)nf, wait_ms) <= 0)
			continue;
		if (fds[0].revents) {
			for (;;) {
				int fd =
				    accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
				if (fd < 0)
					break;
				int i = in_slot(in, &nin, total_in + DP_SPARE_IN);
				if (i < 0) {
					close(fd);
					continue;
				}
				in[i] =
				    (struct conn){.fd = fd,
				                  .state = C_HELLO,
				                  .peer = -1,
				                  .retry_at_ms = yard_now_mono_ms() + DP_HELLO_MS};
			}
		}
		for (int f = 1; f < nf; f++) {
			if (!fds[f].revents)
				continue;
			if (map[f] < 1000) {
				struct conn *k = &out[map[f]];
				if (k->state == C_CONNECTING) {
					int e = 0;
					socklen_t el = sizeof e;
					getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &e, &el);
					if (e) {
						conn_retry(k);
						continue;
					}
					struct dp_hello h = {
					    DP_MAGIC, (uint32_t)c->size, c->rank, k->peer,
					    k->idx,   (int32_t)getpid(), c->nonce};
					if (dp_write_full(k->fd, &h, sizeof h, 1000)) {
						conn_retry(k);
						continue;
					}
					k->state = C_HELLO;
					continue;
				}
				ssize_t r = recv(k->fd, (char *)&k->buf + k->fill,
				                 sizeof k->buf - k->fill, 0);
				if (r <= 0) {
					if (r < 0 && (errno == EAGAIN || errno == EINTR))
						continue;
					conn_retry(k);
					continue;
				}
				k->fill += (size_t)r;
				if (k->fill < sizeof k->buf)
					continue;
				if (k->buf.magic != DP_MAGIC || k->buf.src != k->peer ||
				    k->buf.dst != c->rank || k->buf.world != (uint32_t)c->size) {
					snprintf(err, errlen,
					         "rank %d at %s answered with a bad handshake "
					         "(another job "
					         "on that port?)",
					         k->peer, c->peers[k->peer].endpoint);
					rc = YARD_EMISMATCH;
					goto out;
				}
				if (k->peer == 0)
					c->nonce = k->buf.nonce;
				c->peers[k->peer].pid = k->buf.pid;
				k->state = C_DONE;
				done_out++;
			} else {
				struct conn *k = &in[map[f] - 1000];
				ssize_t r = recv(k->fd, (char *)&k->buf + k->fill,
				                 sizeof k->buf - k->fill, 0);
				if (r <= 0) {
					if (r < 0 && (errno == EAGAIN || errno == EINTR))
						continue;
					in_close(k);
					continue;
				}
				k->fill += (size_t)r;
				if (k->fill < sizeof k->buf)
					continue;
				struct dp_hello *h = &k->buf;
				if (h->magic != DP_MAGIC || h->world != (uint32_t)c->size ||
				    h->dst != c->rank || h->src <= c->rank || h->src >= c->size ||
				    h->idx < 0 || h->idx >= nsocks_for(c, h->src)) {
					in_close(k);
					continue;
				}
				struct dp_hello rep = {DP_MAGIC, (uint32_t)c->size, c->rank, h->src,
				                       h->idx,   (int32_t)getpid(), c->nonce};
				if (dp_write_full(k->fd, &rep, sizeof rep, 1000)) {
					in_close(k);
					continue;
				}
				/* a peer that dialled again (it never saw our answer) replaces its
				 * earlier connection rather than counting twice */
				int again = 0;
				for (int i = 0; i < nin && !again; i++)
					if (&in[i] != k && in[i].state == C_ACCEPTED &&
					    in[i].peer == h->src && in[i].idx == h->idx) {
						in_close(&in[i]);
						again = 1;
					}
				k->peer = h->src;
				k->idx = h->idx;
				c->peers[h->src].pid = h->pid;
				k->state = C_ACCEPTED;
				done_in += !again;
			}
		}
	}
out:
	if (rc == YARD_ETIMEDOUT) {
		/* name every rank we have not heard from */
		char *have = calloc((size_t)c->size, 1);
		size_t used = 0;
		for (int i = 0; i < no; i++)
			if (out[i].state != C_DONE)
				have[out[i].peer] = 1;
		for (int j = c->rank + 1; j < c->size; j++) {
			int got = 0;
			for (int i = 0; i < nin; i++)
				got += in[i].state == C_ACCEPTED && in[i].peer == j;
			if (got < nsocks_for(c, j))
				have[j] = 1;
		}
		used += (size_t)snprintf(err, errlen, "init: timed out after %d ms; missing",
		                         c->timeout_ms);
		for (int j = 0; j < c->size && used < errlen; j++)
			if (have[j])
				used +=
				    (size_t)snprintf(err + used, errlen - used,
				                     " rank %d (host %s)", j, c->peers[j].endpoint);
		free(have);
	}
	if (rc == 0) {
		for (int i = 0; i < no; i++) {
			struct dp_peer *p = &c->peers[out[i].peer];
			if (out[i].idx == 0)
				p->ctl_fd = out[i].fd;
			else
				p->tx[out[i].idx - 1].fd = p->rx[out[i].idx - 1].fd = out[i].fd;
			out[i].fd = -1;
		}
		for (int i = 0; i < nin; i++) {
			if (in[i].state != C_ACCEPTED)
				continue;
			struct dp_peer *p = &c->peers[in[i].peer];
			if (in[i].idx == 0)
				p->ctl_fd = in[i].fd;
			else
				p->tx[in[i].idx - 1].fd = p->rx[in[i].idx - 1].fd = in[i].fd;
			in[i].fd = -1;
		}
		for (int j = 0; j < c->size; j++) {
			struct dp_peer *p = &c->peers[j];
			if (j == c->rank)
				continue;
			set_nodelay(p->ctl_fd);
			for (int k = 0; k < p->nsock; k++) {
				set_nodelay(p->tx[k].fd);
				p->tx[k].piece = NULL;
				p->rx[k].piece = malloc(DP_PIECE_BYTES);
				if (!p->rx[k].piece)
					rc = YARD_ENOMEM;
			}
		}
	}
	for (int i = 0; i < no; i++)
		if (out[i].fd >= 0)
			close(out[i].fd);
	for (int i = 0; i < nin; i++)
		if (in[i].fd >= 0)
			close(in[i].fd);
	free(out);
	free(in);
	free(slot);
	return rc;
}

/* ---- data path ---- */

int dp_tcp_parts(yd_comm *c, struct dp_peer *p, size_t len)
{
	if (p->nsock <= 1 || len < 2u * DP_PIECE_BYTES)
		return 1;
	return p->nsock;
}

static void part_range(size_t len, int parts, int i, size_t *off, size_t *plen)
{
	size_t base = (len / (size_t)parts) & ~(size_t)7;
	*off = base * (size_t)i;
	*plen = i == parts - 1 ? len - *off : base;
}

void dp_tcp_set_begin(yd_comm *c, struct dp_peer *p)
{
	for (int k = 0; k < p->nsock; k++) {
		p->tx[k].cur = p->rx[k].cur = -1;
		p->tx[k].last = p->rx[k].last = -1;
		p->rx[k].piece_fill = 0;
	}
}

static int tcp_fail(yd_comm *c, struct dp_peer *p, struct dp_xfer *x, int err)
{
	char why[128];
	snprintf(why, sizeof why, "closed the connection (%s)",
	         err ? strerror(err) : "process exited or was killed");
	return dp_peer_lost(c, p, x, why);
}

static void part_done(struct dp_xfer *x, struct dp_tcp_sock *k, int idx)
{
	x->done += k->part_len;
	if (--x->parts_left == 0)
		x->complete = 1;
	k->last = idx;
	k->cur = -1;
}

/* Finds the next transfer whose parts include socket k; the ones that do not are skipped. */
static int next_for_sock(yd_comm *c, struct dp_peer *p, struct dp_xset *s, struct dp_tcp_sock *k,
                         int ki, int is_send)
{
	int i = k->last;
	for (;;) {
		i = dp_xset_next(s, i, p->rank, is_send);
		if (i < 0)
			return -1;
		int parts = dp_tcp_parts(c, p, s->x[i].len);
		if (ki < parts) {
			part_range(s->x[i].len, parts, ki, &k->part_off, &k->part_len);
			k->part_done = 0;
			k->hdr_done = 0;
			k->piece_fill = 0;
			k->cur = i;
			return i;
		}
		/* this transfer does not use socket ki; but a later one may */
	}
}

int dp_tcp_progress_tx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed)
{
	for (int ki = 0; ki < p->nsock; ki++) {
		struct dp_tcp_sock *k = &p->tx[ki];
		for (;;) {
			if (k->cur < 0 && next_for_sock(c, p, s, k, ki, 1) < 0)
				break;
			struct dp_xfer *x = &s->x[k->cur];
			struct iovec iov[2];
			int n = 0;
			if (k->hdr_done < sizeof x->hdr)
				iov[n++] = (struct iovec){(char *)&x->hdr + k->hdr_done,
				                          sizeof x->hdr - k->hdr_done};
			if (k->part_done < k->part_len)
				iov[n++] =
				    (struct iovec){(char *)x->src + k->part_off + k->part_done,
				                   k->part_len - k->part_done};
			struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
			ssize_t r = sendmsg(k->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (r < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
					break;
				return tcp_fail(c, p, x, errno);
			}
			*progressed = 1;
			size_t got = (size_t)r;
			if (k->hdr_done < sizeof x->hdr) {
				size_t h = DP_MIN(got, sizeof x->hdr - k->hdr_done);
				k->hdr_done += h;
				got -= h;
			}
			k->part_done += got;
			if (k->hdr_done == sizeof x->hdr && k->part_done == k->part_len)
				part_done(x, k, k->cur);
			else
				break;
		}
	}
	return 0;
}

static void flush_piece(struct dp_xfer *x, struct dp_tcp_sock *k)
{
	size_t esz = yd_dtype_size(x->hdr.dtype);
	size_t at = k->part_off + k->part_done - k->piece_fill;
	enum yd_op op = x->hdr.op == YD_AVG ? YD_SUM : (enum yd_op)x->hdr.op;
	dp_reduce((char *)x->dst + at, (const char *)x->src + at, k->piece, k->piece_fill / esz,
	          x->hdr.dtype, op);
	k->piece_fill = 0;
}

int dp_tcp_progress_rx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed)
{
	for (int ki = 0; ki < p->nsock; ki++) {
		struct dp_tcp_sock *k = &p->rx[ki];
		for (;;) {
			if (k->cur < 0 && next_for_sock(c, p, s, k, ki, 0) < 0)
				break;
			struct dp_xfer *x = &s->x[k->cur];
			ssize_t r;
			if (k->hdr_done < sizeof k->hdr_in) {
				r = recv(k->fd, (char *)&k->hdr_in + k->hdr_done,
				         sizeof k->hdr_in - k->hdr_done, MSG_DONTWAIT);
			} else if (!x->reduce) {
				r = recv(k->fd, (char *)x->dst + k->part_off + k->part_done,
				         k->part_len - k->part_done, MSG_DONTWAIT);
			} else {
				size_t want = DP_MIN(DP_PIECE_BYTES - k->piece_fill,
				                     k->part_len - k->part_done);
				r = recv(k->fd, k->piece + k->piece_fill, want, MSG_DONTWAIT);
			}
			if (r < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
					break;
				return tcp_fail(c, p, x, errno);
			}
			if (r == 0 &&
			    !(k->hdr_done == sizeof k->hdr_in && k->part_done == k->part_len))
				return tcp_fail(c, p, x, 0);
			*progressed = 1;
			if (k->hdr_done < sizeof k->hdr_in) {
				k->hdr_done += (size_t)r;
				if (k->hdr_done == sizeof k->hdr_in) {
					int rc = dp_hdr_check(c, x, &k->hdr_in);
					if (rc)
						return rc;
				}
			} else {
				k->part_done += (size_t)r;
				if (x->reduce) {
					k->piece_fill += (size_t)r;
					if (k->piece_fill == DP_PIECE_BYTES ||
					    k->part_done == k->part_len)
						flush_piece(x, k);
				}
			}
			if (k->hdr_done == sizeof k->hdr_in && k->part_done == k->part_len)
				part_done(x, k, k->cur);
		}
	}
	return 0;
}
