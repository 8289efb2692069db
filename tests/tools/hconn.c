/* hconn.c: keep-alive HTTP/1.1 connections for yard-simnodes' heartbeats (hconn.h). */
#include "hconn.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"

struct hconn {
	int fd;           /* -1: not connected */
	int busy;         /* a request is in flight */
	int served;       /* answered a request before: the server may have closed it idle */
	int retried;      /* this request was sent again on a fresh connection once */
	int out_watched;  /* EPOLLOUT is in the epoll set (a request only partly written) */
	uint64_t gen;     /* the endpoint it was connected to (hconn_pool.gen) */
	void *user;
	uint64_t started_ms;
	char *out;        /* the request, kept until answered (for the one retry) */
	size_t out_len, out_off, out_cap;
	char *in;         /* the answer so far, NUL-terminated */
	size_t in_len, in_cap;
	size_t head_len;  /* the status line and headers, with their blank line; 0: not yet */
	size_t body_len;
	int status, close_after;
};

struct hconn_pool {
	int epfd;
	uint32_t tag;
	int size;
	struct hconn *c;
	hconn_done_cb done;
	struct sockaddr_storage addr;
	socklen_t addr_len;
	char host[300]; /* the Host header */
	uint64_t gen;   /* bumped by every hconn_set_endpoint */
};

struct hconn_pool *hconn_pool_new(int epfd, uint32_t tag, int size, hconn_done_cb done)
{
	struct hconn_pool *p = calloc(1, sizeof *p);
	if (p == NULL || size < 1 || (p->c = calloc((size_t)size, sizeof *p->c)) == NULL) {
		free(p);
		return NULL;
	}
	p->epfd = epfd;
	p->tag = tag;
	p->size = size;
	p->done = done;
	for (int i = 0; i < size; i++)
		p->c[i].fd = -1;
	return p;
}

static void conn_close(struct hconn_pool *p, struct hconn *c)
{
	if (c->fd >= 0) {
		epoll_ctl(p->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->served = 0;
	c->out_watched = 0;
}

void hconn_pool_free(struct hconn_pool *p)
{
	if (p == NULL)
		return;
	for (int i = 0; i < p->size; i++) {
		conn_close(p, &p->c[i]);
		free(p->c[i].out);
		free(p->c[i].in);
	}
	free(p->c);
	free(p);
}

int hconn_set_endpoint(struct hconn_pool *p, const char *url, char *err, size_t err_len)
{
	char host[256], port[16];
	const char *h = strncmp(url, "http://", 7) == 0 ? url + 7 : NULL;
	size_t n = h != NULL ? strcspn(h, ":/") : 0;
	if (h == NULL || n == 0 || n >= sizeof host || h[n] != ':') {
		snprintf(err, err_len, "endpoint %s: expected http://HOST:PORT", url);
		return -1;
	}
	memcpy(host, h, n);
	host[n] = '\0';
	size_t pn = strspn(h + n + 1, "0123456789");
	if (pn == 0 || pn >= sizeof port || (h[n + 1 + pn] != '\0' && h[n + 1 + pn] != '/')) {
		snprintf(err, err_len, "endpoint %s: expected a port number after the host", url);
		return -1;
	}
	memcpy(port, h + n + 1, pn);
	port[pn] = '\0';
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0 || res == NULL || res->ai_addrlen > sizeof p->addr) {
		snprintf(err, err_len, "endpoint %s: cannot resolve %s: %s", url, host,
		         rc != 0 ? gai_strerror(rc) : "no address");
		if (res != NULL)
			freeaddrinfo(res);
		return -1;
	}
	memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
	p->addr_len = res->ai_addrlen;
	freeaddrinfo(res);
	snprintf(p->host, sizeof p->host, "%s:%s", host, port);
	p->gen++;
	for (int i = 0; i < p->size; i++)
		if (!p->c[i].busy)
			conn_close(p, &p->c[i]);
	return 0;
}

static int conn_open(struct hconn_pool *p, struct hconn *c, char *err, size_t err_len)
{
	int one = 1, fd = socket(p->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, err_len, "socket: %s", strerror(errno));
		return -1;
	}
	/* a blocking connect: the controllers are on this machine (loopback answers at once) */
	if (connect(fd, (const struct sockaddr *)&p->addr, p->addr_len) != 0) {
		snprintf(err, err_len, "connect to %s: %s", p->host, strerror(errno));
		close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	struct epoll_event ev = {.events = EPOLLIN,
	                         .data.u64 = (uint64_t)p->tag << 32 | (uint32_t)(c - p->c)};
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		snprintf(err, err_len, "epoll_ctl: %s", strerror(errno));
		close(fd);
		return -1;
	}
	c->fd = fd;
	c->gen = p->gen;
	c->served = 0;
	c->out_watched = 0;
	return 0;
}

static void watch_out(struct hconn_pool *p, struct hconn *c, int on)
{
	if (c->out_watched == on)
		return;
	struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0),
	                         .data.u64 = (uint64_t)p->tag << 32 | (uint32_t)(c - p->c)};
	epoll_ctl(p->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	c->out_watched = on;
}

/* Writes what is left of the request; 0, or -1 with errno (the connection failed). */
static int conn_flush(struct hconn_pool *p, struct hconn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			watch_out(p, c, 1);
			return 0;
		}
		if (w <= 0)
			return -1;
		c->out_off += (size_t)w;
	}
	watch_out(p, c, 0);
	return 0;
}

/* Ends the request in flight on c: its answer (status > 0) or err. */
static void conn_finish(struct hconn_pool *p, struct hconn *c, int status, const char *err)
{
	void *user = c->user;
	int reusable = status > 0 && !c->close_after;
	const char *body = status > 0 ? c->in + c->head_len : "";
	size_t len = status > 0 ? c->body_len : 0;
	if (status > 0 && c->in_len > c->head_len + c->body_len)
		reusable = 0; /* bytes after the answer: nothing was asked for them */
	c->busy = 0;
	c->user = NULL;
	if (!reusable)
		conn_close(p, c);
	else
		c->served = 1;
	/* the buffers stay allocated (body points into c->in) until the next request */
	p->done(user, status, body, len, err);
	if (c->fd >= 0 && !c->busy && c->gen != p->gen)
		conn_close(p, c); /* the endpoint moved during the callback */
}

/* Sends c's request again on a fresh connection (the server closed an idle one as the
 * request went out). 0, or -1 with err. */
static int conn_retry(struct hconn_pool *p, struct hconn *c, char *err, size_t err_len)
{
	conn_close(p, c);
	c->retried = 1;
	c->out_off = 0;
	c->in_len = 0;
	c->head_len = 0;
	if (conn_open(p, c, err, err_len) != 0)
		return -1;
	if (conn_flush(p, c) != 0) {
		snprintf(err, err_len, "send to %s: %s", p->host, strerror(errno));
		return -1;
	}
	return 0;
}

static int conn_post(struct hconn_pool *p, struct hconn *c, const char *path, const char *token,
                     const char *body, size_t len, void *user, char *err, size_t err_len);

int hconn_post(struct hconn_pool *p, const char *path, const char *token, const char *body,
               size_t len, void *user, char *err, size_t err_len)
{
	struct hconn *c = NULL; /* an idle connected one first, else an idle closed one */
	for (int i = 0; i < p->size && (c == NULL || c->fd < 0); i++)
		if (!p->c[i].busy && (c == NULL || p->c[i].fd >= 0))
			c = &p->c[i];
	if (c == NULL) {
		snprintf(err, err_len, "all %d connections are busy", p->size);
		return -1;
	}
	return conn_post(p, c, path, token, body, len, user, err, err_len);
}

int hconn_post_on(struct hconn_pool *p, int index, const char *path, const char *token,
                  const char *body, size_t len, void *user, char *err, size_t err_len)
{
	if (index < 0 || index >= p->size) {
		snprintf(err, err_len, "no connection %d in a pool of %d", index, p->size);
		return -1;
	}
	if (p->c[index].busy) {
		snprintf(err, err_len, "connection %d is busy", index);
		return -1;
	}
	return conn_post(p, &p->c[index], path, token, body, len, user, err, err_len);
}

static int conn_post(struct hconn_pool *p, struct hconn *c, const char *path, const char *token,
                     const char *body, size_t len, void *user, char *err, size_t err_len)
{
	if (p->addr_len == 0) {
		snprintf(err, err_len, "no endpoint set");
		return -1;
	}
	if (c->fd < 0 && conn_open(p, c, err, err_len) != 0)
		return -1;
	char head[1024];
	int hl = snprintf(head, sizeof head,
	                  "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
	                  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
	                  path, p->host, token, len);
	if (hl < 0 || (size_t)hl >= sizeof head) {
		snprintf(err, err_len, "request head for %s too long", path);
		return -1;
	}
	size_t need = (size_t)hl + len;
	if (need > c->out_cap) {
		char *grown = realloc(c->out, need);
		if (grown == NULL) {
			snprintf(err, err_len, "out of memory for a %zu-byte request", need);
			return -1;
		}
		c->out = grown;
		c->out_cap = need;
	}
	memcpy(c->out, head, (size_t)hl);
	memcpy(c->out + hl, body, len);
	c->out_len = need;
	c->out_off = 0;
	c->in_len = 0;
	c->head_len = 0;
	c->body_len = 0;
	c->status = 0;
	c->close_after = 0;
	c->retried = 0;
	c->user = user;
	c->started_ms = yard_now_mono_ms();
	c->busy = 1;
	if (conn_flush(p, c) == 0)
		return 0;
	int e = errno;
	if (c->served) { /* the server may have closed it while it was idle */
		if (conn_retry(p, c, err, err_len) == 0)
			return 0;
	} else
		snprintf(err, err_len, "send to %s: %s", p->host, strerror(e));
	c->busy = 0;
	c->user = NULL;
	conn_close(p, c);
	return -1;
}

/* Reads the status line and headers once complete; 0 (maybe not complete yet), or -1 with
 * err for an answer this client does not read. */
static int parse_head(struct hconn *c, char *err, size_t err_len)
{
	char *end = strstr(c->in, "\r\n\r\n");
	if (end == NULL)
		return 0;
	*end = '\0'; /* the headers as one string for now */
	int minor = 0, status = 0, have_len = 0;
	unsigned long long clen = 0;
	if (sscanf(c->in, "HTTP/1.%d %d", &minor, &status) != 2 || status < 100 || status > 999) {
		snprintf(err, err_len, "not an HTTP/1.x status line: %.60s", c->in);
		return -1;
	}
	for (char *line = strstr(c->in, "\r\n"); line != NULL; line = strstr(line, "\r\n")) {
		line += 2;
		if (strncasecmp(line, "content-length:", 15) == 0) {
			clen = strtoull(line + 15, NULL, 10);
			have_len = 1;
		} else if (strncasecmp(line, "transfer-encoding:", 18) == 0) {
			snprintf(err, err_len, "a chunked answer (not read by this client)");
			return -1;
		} else if (strncasecmp(line, "connection:", 11) == 0 && strstr(line, "close") != NULL)
			c->close_after = 1;
	}
	if (minor == 0)
		c->close_after = 1;
	if (!have_len && status != 204 && status != 304) {
		snprintf(err, err_len, "HTTP %d answer without Content-Length", status);
		return -1;
	}
	*end = '\r';
	c->status = status;
	c->head_len = (size_t)(end - c->in) + 4;
	c->body_len = (size_t)clen;
	return 0;
}

void hconn_event(struct hconn_pool *p, uint32_t index, uint32_t events)
{
	char err[256] = "";
	if (index >= (uint32_t)p->size)
		return;
	struct hconn *c = &p->c[index];
	if (c->fd < 0)
		return;
	if (c->busy && (events & EPOLLOUT) && conn_flush(p, c) != 0) {
		snprintf(err, sizeof err, "send to %s: %s", p->host, strerror(errno));
		conn_finish(p, c, 0, err);
		return;
	}
	for (;;) {
		if (c->in_cap - c->in_len < 4096) {
			size_t cap = c->in_cap ? 2 * c->in_cap : 16384;
			char *grown = realloc(c->in, cap);
			if (grown == NULL) {
				conn_finish(p, c, 0, "out of memory for the answer");
				return;
			}
			c->in = grown;
			c->in_cap = cap;
		}
		ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (r <= 0) { /* closed, or reset */
			int e = r < 0 ? errno : 0;
			if (!c->busy) {
				conn_close(p, c); /* an idle connection the server closed */
				return;
			}
			if (c->in_len == 0 && c->served && !c->retried &&
			    conn_retry(p, c, err, sizeof err) == 0)
				return;
			if (err[0] == '\0')
				snprintf(err, sizeof err,
				         "%s closed the connection after %zu bytes of the answer%s%s",
				         p->host, c->in_len, e ? ": " : "", e ? strerror(e) : "");
			conn_finish(p, c, 0, err);
			return;
		}
		c->in_len += (size_t)r;
		c->in[c->in_len] = '\0';
		if (!c->busy) {
			conn_close(p, c); /* bytes nobody asked for */
			return;
		}
		if (c->head_len == 0 && parse_head(c, err, sizeof err) != 0) {
			c->close_after = 1;
			conn_finish(p, c, 0, err);
			return;
		}
		if (c->head_len > 0 && c->in_len >= c->head_len + c->body_len) {
			c->in[c->head_len + c->body_len] = '\0'; /* the body as a string */
			conn_finish(p, c, c->status, NULL);
			return;
		}
	}
}

void hconn_expire(struct hconn_pool *p, uint64_t timeout_ms)
{
	uint64_t now = yard_now_mono_ms();
	for (int i = 0; i < p->size; i++) {
		struct hconn *c = &p->c[i];
		if (c->busy && now - c->started_ms > timeout_ms) {
			char err[128];
			snprintf(err, sizeof err, "no answer from %s within %llu ms", p->host,
			         (unsigned long long)timeout_ms);
			c->close_after = 1;
			conn_finish(p, c, 0, err);
		}
	}
}
