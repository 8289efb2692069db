/* net_connect.c: listening and the all-to-all TCP connection setup of a yd_net. Rank i dials
 * every lower rank and accepts every higher one; a 16-byte hello {magic, world, from, to}
 * identifies each connection, and the acceptor echoes it as the acknowledgement. Refused
 * dials are retried until the deadline, so ranks may start in any order. */
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
#include <unistd.h>

#include "common/clock.h"
#include "dataplane/yd_impl.h"

struct hello {
	uint32_t magic, world, from, to;
};

static int split_endpoint(const char *endpoint, char *host, size_t hostlen, char *port,
                          size_t portlen)
{
	const char *colon = strrchr(endpoint, ':');
	if (!colon || colon == endpoint || (size_t)(colon - endpoint) >= hostlen ||
	    strlen(colon + 1) >= portlen || !colon[1])
		return YARD_EINVAL;
	memcpy(host, endpoint, (size_t)(colon - endpoint));
	host[colon - endpoint] = 0;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	strcpy(port, colon + 1);
	return 0;
}

static int resolve(const char *endpoint, int passive, struct addrinfo **out)
{
	char host[256], port[32];
	if (split_endpoint(endpoint, host, sizeof host, port, sizeof port))
		return YARD_EINVAL;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	if (passive)
		hints.ai_flags = AI_PASSIVE;
	return getaddrinfo(strcmp(host, "*") ? host : NULL, port, &hints, out) ? YARD_EINVAL : 0;
}

static void tune_socket(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	fcntl(fd, F_SETFD, FD_CLOEXEC);
}

int net_listen(const char *endpoint, int *fd_out, int *port_out, char *err, size_t errlen)
{
	struct addrinfo *ai;
	if (resolve(endpoint, 1, &ai)) {
		snprintf(err, errlen, "cannot resolve listen endpoint '%s'", endpoint);
		return YARD_EINVAL;
	}
	int fd = -1, saved = 0;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0)
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on '%s': %s", endpoint, strerror(saved));
		return YARD_EIO;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
	                                           : ((struct sockaddr_in *)&ss)->sin_port);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	*fd_out = fd;
	return 0;
}

enum dial_state { DIAL_IDLE, DIAL_CONNECTING, DIAL_WAIT_ACK, DIAL_DONE };

struct conn {
	int fd;
	enum dial_state state;
	uint64_t retry_at_ms;
	struct hello in;
	size_t got;
};

static int start_dial(struct yd_net *net, int peer, struct conn *c)
{
	struct addrinfo *ai;
	if (resolve(net->peers[peer].addr, 0, &ai))
		return YARD_EINVAL;
	c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd >= 0 &&
	    (connect(c->fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS))
		c->state = DIAL_CONNECTING;
	else if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
		c->retry_at_ms = yard_now_mono_ms() + 20;
	}
	freeaddrinfo(ai);
	return 0;
}

static void redial_later(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->state = DIAL_IDLE;
	c->got = 0;
	c->retry_at_ms = yard_now_mono_ms() + 20;
}

/* Reads the rest of a hello; 1 when complete, 0 not yet, -1 on error/EOF. */
static int read_hello(struct conn *c)
{
	ssize_t n = read(c->fd, (char *)&c->in + c->got, sizeof c->in - c->got);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return -1;
	if (n > 0)
		c->got += (size_t)n;
	return c->got == sizeof c->in;
}

static int write_hello(int fd, const struct hello *h)
{
	/* 16 bytes into a fresh socket's empty buffer never block. */
	return write(fd, h, sizeof *h) == (ssize_t)sizeof *h ? 0 : -1;
}

int net_connect_all(struct yd_net *net, int listen_fd, uint64_t deadline_ns, char *err,
                    size_t errlen)
{
	int world = net->world, me = net->rank;
	struct conn *dial = calloc((size_t)world, sizeof *dial);
	struct conn *acc = calloc((size_t)world * 2 + 8, sizeof *acc); /* accepted, unidentified */
	struct pollfd *pfd = calloc((size_t)world * 3 + 8, sizeof *pfd);
	int *pidx = calloc((size_t)world * 3 + 8, sizeof *pidx);
	int nacc = 0, maxacc = world * 2 + 8, missing = world - 1, rc = 0;
	if (!dial || !acc || !pfd || !pidx) {
		rc = YARD_ENOMEM;
		goto out;
	}
	for (int p = 0; p < world; p++)
		dial[p].fd = -1;
	while (missing > 0) {
		uint64_t now_ms = yard_now_mono_ms();
		if (yard_now_mono_ns() >= deadline_ns) {
			rc = YARD_ETIMEDOUT;
			break;
		}
		int n = 0;
		pfd[n].fd = listen_fd;
		pfd[n].events = POLLIN;
		pidx[n++] = -1;
		for (int p = 0; p < me; p++) {
			struct conn *c = &dial[p];
			if (c->state == DIAL_IDLE && now_ms >= c->retry_at_ms)
				start_dial(net, p, c);
			if (c->state == DIAL_CONNECTING || c->state == DIAL_WAIT_ACK) {
				pfd[n].fd = c->fd;
				pfd[n].events = c->state == DIAL_CONNECTING ? POLLOUT : POLLIN;
				pidx[n++] = p;
			}
		}
		for (int i = 0; i < nacc; i++) {
			pfd[n].fd = acc[i].fd;
			pfd[n].events = POLLIN;
			pidx[n++] = world + i;
		}
		int r = poll(pfd, (nfds_t)n, 20);
		if (r <= 0)
			continue;
		if ((pfd[0].revents & POLLIN) && nacc < maxacc) {
			int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd >= 0) {
				acc[nacc].fd = fd;
				acc[nacc++].got = 0;
			}
		}
		for (int i = 1; i < n; i++) {
			if (!pfd[i].revents)
				continue;
			if (pidx[i] < world) {
				int p = pidx[i];
				struct conn *c = &dial[p];
				if (c->state == DIAL_CONNECTING) {
					int soerr = 0;
					socklen_t sl = sizeof soerr;
					getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
					struct hello h = {WIRE_MAGIC, (uint32_t)world, (uint32_t)me,
					                  (uint32_t)p};
					if (soerr || write_hello(c->fd, &h))
						redial_later(c);
					else
						c->state = DIAL_WAIT_ACK;
				} else if (c->state == DIAL_WAIT_ACK) {
					int hr = read_hello(c);
					if (hr < 0) {
						redial_later(c);
					} else if (hr == 1) {
						if (c->in.magic != WIRE_MAGIC ||
						    c->in.world != (uint32_t)world ||
						    c->in.from != (uint32_t)p ||
						    c->in.to != (uint32_t)me) {
							redial_later(c);
							continue;
						}
						c->state = DIAL_DONE;
						net->peers[p].fd = c->fd;
						tune_socket(c->fd);
						c->fd = -1;
						missing--;
					}
				}
			} else {
				struct conn *c = &acc[pidx[i] - world];
				int hr = read_hello(c);
				int from = (int)c->in.from;
				if (hr == 1 &&
				    (c->in.magic != WIRE_MAGIC || c->in.world != (uint32_t)world ||
				     c->in.to != (uint32_t)me || from <= me || from >= world ||
				     net->peers[from].fd >= 0))
					hr = -1;
				if (hr == 1) {
					struct hello ack = {WIRE_MAGIC, (uint32_t)world,
					                    (uint32_t)me, (uint32_t)from};
					if (write_hello(c->fd, &ack) == 0) {
						net->peers[from].fd = c->fd;
						tune_socket(c->fd);
						missing--;
						c->fd = -1;
					}
				}
				if (hr != 0) {
					if (c->fd >= 0)
						close(c->fd);
					acc[pidx[i] - world] = acc[--nacc];
					/* the moved entry's pollfd is handled next round */
					break;
				}
			}
		}
	}
	if (rc == YARD_ETIMEDOUT) {
		size_t off = (size_t)snprintf(
		    err, errlen, "timed out after %d ms; no connection with", net->timeout_ms);
		for (int p = 0; p < world && off < errlen; p++)
			if (p != me && net->peers[p].fd < 0)
				off += (size_t)snprintf(err + off, errlen - off, " rank %d (%s)", p,
				                        net->peers[p].addr);
	}
out:
	for (int p = 0; dial && p < world; p++)
		if (dial[p].fd >= 0)
			close(dial[p].fd);
	for (int i = 0; i < nacc; i++)
		close(acc[i].fd);
	free(dial);
	free(acc);
	free(pfd);
	free(pidx);
	return rc;
}
