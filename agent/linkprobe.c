/* linkprobe.c: measures the network link between this node and another one for the planner.
 *
 * Every agent serves a probe port (--probe-port, default port-base - 1) on its loop, with a
 * line protocol small enough to check by eye:
 *   "PING\n"       → "PONG\n"                       (round trips: latency)
 *   "SINK N\n"     → reads N more bytes, then "DONE N\n" (1 ≤ N ≤ 256 MiB: bandwidth)
 * Anything else (an unknown request, a line over 63 bytes, N out of range) is answered
 * "ERR why\n", logged with the sender and closed; so is a connection beyond the few served at
 * once, or one open for 60 s; a connection silent for 10 s is closed. Reads are the loop's
 * ordinary 64 KiB callbacks, so a sink never holds the loop.
 *
 * The leader names the peer to measure in a heartbeat answer ("link_probe": {node, host,
 * port}). The measurement runs on libuv's thread pool, every socket call bounded by one 10 s
 * deadline: 8 ping round trips (half the median is the latency), then 32 MiB through one
 * TCP_NODELAY connection, timed from the request to the peer's "DONE" (the bandwidth). The
 * result goes into perf (inter_*, inter_source "measured:PEER") and perf is sent again. A
 * failed probe is logged; the leader asks again later. It does not measure more than one
 * peer, nor again once measured: a link does not change while the agent runs.
 */
#include <arpa/inet.h>
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

#include "agent/agent.h"
#include "common/common.h"

#define PROBE_LINE_MAX 64
#define PROBE_SINK_MAX (256LL << 20)
#define PROBE_CONNS_MAX 4
#define PROBE_IDLE_MS 10000
#define PROBE_CONN_MAX_MS 60000 /* a connection's whole life (a sink trickled in slowly) */
#define PROBE_CHECK_MS 1000
#define PROBE_READ_CHUNK (64 << 10)
/* the measuring side */
#define PROBE_DEADLINE_MS 10000
#define PROBE_PINGS 8
#define PROBE_SINK_BYTES (32LL << 20)
#define PROBE_WRITE_CHUNK (1 << 20)

/* ---- the server, on the loop ---- */

struct probe_conn {
	uv_tcp_t tcp;
	uv_timer_t idle; /* every PROBE_CHECK_MS: silence and age */
	struct agent *agent;
	uint64_t opened_ms, last_read_ms;
	char from[64]; /* the sender's address, for log lines */
	char line[PROBE_LINE_MAX];
	size_t line_len;
	int64_t sink_total, sink_left; /* a SINK under way: bytes asked for, still to come */
	int refused;                   /* answered ERR: what else arrives is dropped */
	int handles_open;
	char buf[PROBE_READ_CHUNK];
};

struct probe_write {
	uv_write_t req;
	struct probe_conn *conn;
	int close_after;
	char text[96];
};

static void conn_handle_closed(uv_handle_t *h)
{
	struct probe_conn *c = h->data;
	if (--c->handles_open == 0) {
		c->agent->probe_conns--;
		free(c);
	}
}

static void conn_close(struct probe_conn *c)
{
	if (uv_is_closing((uv_handle_t *)&c->tcp))
		return;
	uv_close((uv_handle_t *)&c->idle, conn_handle_closed);
	uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
}

static void on_written(uv_write_t *req, int status)
{
	struct probe_write *w = (struct probe_write *)req;
	if (status < 0 || w->close_after)
		conn_close(w->conn);
	free(w);
}

/* Sends text; close_after: then closes the connection. */
static void conn_send(struct probe_conn *c, const char *text, int close_after)
{
	struct probe_write *w = calloc(1, sizeof *w);
	if (w == NULL) {
		conn_close(c);
		return;
	}
	w->conn = c;
	w->close_after = close_after;
	snprintf(w->text, sizeof w->text, "%s", text);
	uv_buf_t buf = uv_buf_init(w->text, (unsigned)strlen(w->text));
	if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0) {
		free(w);
		conn_close(c);
	}
}

static void conn_refuse(struct probe_conn *c, const char *why)
{
	char text[96];
	log_warn("link probe connection from %s refused: %s", c->from, why);
	snprintf(text, sizeof text, "ERR %s\n", why);
	c->refused = 1;
	uv_read_stop((uv_stream_t *)&c->tcp);
	conn_send(c, text, 1);
}

static void conn_request(struct probe_conn *c)
{
	char *end;
	c->line[c->line_len] = '\0';
	if (strcmp(c->line, "PING") == 0) {
		conn_send(c, "PONG\n", 0);
	} else if (strncmp(c->line, "SINK ", 5) == 0) {
		errno = 0;
		long long n = strtoll(c->line + 5, &end, 10);
		if (errno != 0 || end == c->line + 5 || *end != '\0' || n < 1 ||
		    n > PROBE_SINK_MAX) {
			char why[96];
			snprintf(why, sizeof why, "SINK: '%.20s' is not a byte count in 1..%lld",
			         c->line + 5, PROBE_SINK_MAX);
			conn_refuse(c, why);
			return;
		}
		c->sink_total = c->sink_left = n;
	} else {
		char why[96];
		snprintf(why, sizeof why, "unknown request '%.40s' (want PING or SINK N)", c->line);
		conn_refuse(c, why);
	}
}

static void on_check(uv_timer_t *t)
{
	struct probe_conn *c = t->data;
	uint64_t now = yard_now_mono_ms();
	if (now - c->last_read_ms >= PROBE_IDLE_MS) {
		log_info("link probe connection from %s: silent for %d ms, closed", c->from,
		         PROBE_IDLE_MS);
		conn_close(c);
	} else if (now - c->opened_ms >= PROBE_CONN_MAX_MS && !c->refused) {
		conn_refuse(c, "open for longer than 60 s");
	}
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct probe_conn *c = h->data;
	(void)suggested;
	*buf = uv_buf_init(c->buf, sizeof c->buf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct probe_conn *c = s->data;
	if (n < 0) {
		if (n != UV_EOF)
			log_info("link probe connection from %s: %s", c->from, uv_strerror((int)n));
		conn_close(c);
		return;
	}
	c->last_read_ms = yard_now_mono_ms();
	const char *p = buf->base;
	size_t left = (size_t)n;
	while (left > 0 && !c->refused) {
		if (c->sink_left > 0) {
			size_t take = (size_t)YARD_MIN((int64_t)left, c->sink_left);
			c->sink_left -= (int64_t)take;
			p += take;
			left -= take;
			if (c->sink_left == 0) {
				char done[48];
				snprintf(done, sizeof done, "DONE %lld\n",
				         (long long)c->sink_total);
				conn_send(c, done, 0);
			}
			continue;
		}
		char ch = *p++;
		left--;
		if (ch == '\n') {
			conn_request(c);
			c->line_len = 0;
		} else if (c->line_len + 1 >= sizeof c->line) {
			conn_refuse(c, "request line longer than 63 bytes");
		} else {
			c->line[c->line_len++] = ch;
		}
	}
}

static void on_connection(uv_stream_t *server, int status)
{
	struct agent *a = server->data;
	if (status < 0) {
		log_warn("link probe port: accept: %s", uv_strerror(status));
		return;
	}
	struct probe_conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return;
	c->agent = a;
	uv_tcp_init(a->loop, &c->tcp);
	uv_timer_init(a->loop, &c->idle);
	c->tcp.data = c->idle.data = c;
	c->handles_open = 2;
	a->probe_conns++;
	snprintf(c->from, sizeof c->from, "an unknown address");
	if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
		conn_close(c);
		return;
	}
	struct sockaddr_storage ss;
	int len = sizeof ss;
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0 &&
	    ss.ss_family == AF_INET) {
		char ip[INET_ADDRSTRLEN];
		const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
		snprintf(c->from, sizeof c->from, "%s:%d", ip, ntohs(in->sin_port));
	}
	if (a->probe_conns > PROBE_CONNS_MAX) {
		char why[64];
		snprintf(why, sizeof why, "busy (%d probe connections at once at most)",
		         PROBE_CONNS_MAX);
		conn_refuse(c, why);
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	c->opened_ms = c->last_read_ms = yard_now_mono_ms();
	uv_timer_start(&c->idle, on_check, PROBE_CHECK_MS, PROBE_CHECK_MS);
	uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

int linkprobe_listen(struct agent *a, struct yard_err *err)
{
	struct sockaddr_in addr;
	int rc;
	/* peers reach this node at its --host; a name rather than an address: every address */
	if (uv_ip4_addr(a->cfg.host, a->cfg.probe_port, &addr) != 0)
		uv_ip4_addr("0.0.0.0", a->cfg.probe_port, &addr);
	uv_tcp_init(a->loop, &a->probe_server);
	a->probe_server.data = a;
	if ((rc = uv_tcp_bind(&a->probe_server, (const struct sockaddr *)&addr, 0)) != 0 ||
	    (rc = uv_listen((uv_stream_t *)&a->probe_server, 16, on_connection)) != 0) {
		uv_close((uv_handle_t *)&a->probe_server, NULL);
		return yard_err_set(err, YARD_EIO,
		                    "link probe port %d: %s (set another with --probe-port); other "
		                    "nodes cannot measure their link to this one",
		                    a->cfg.probe_port, uv_strerror(rc));
	}
	a->probe_listening = 1;
	return 0;
}

/* ---- the measuring side, on the thread pool ---- */

struct probe_run {
	uv_work_t work;
	struct agent *agent;
	char peer[AGENT_NAME_MAX + 1];
	char host[256];
	int port;
	double bw_bytes_per_s, latency_s;
	int rc;
	char why[256];
};

static int64_t ms_left(uint64_t deadline_ms)
{
	uint64_t now = yard_now_mono_ms();
	return now >= deadline_ms ? 0 : (int64_t)(deadline_ms - now);
}

/* Waits for fd to become ready for events, until the deadline. 0, or -1 with errno
 * (ETIMEDOUT when the deadline passed). */
static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
	for (;;) {
		int64_t left = ms_left(deadline_ms);
		if (left == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -1;
	}
}

static int send_all(int fd, const char *buf, size_t len, uint64_t deadline_ms)
{
	while (len > 0) {
		if (wait_fd(fd, POLLOUT, deadline_ms) != 0)
			return -1;
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EPIPE;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads one "\n"-terminated line (without it) into line. */
static int recv_line(int fd, char *line, size_t cap, uint64_t deadline_ms)
{
	size_t len = 0;
	for (;;) {
		char ch;
		if (wait_fd(fd, POLLIN, deadline_ms) != 0)
			return -1;
		ssize_t n = recv(fd, &ch, 1, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = ECONNRESET; /* closed by the peer */
			return -1;
		}
		if (len + 1 >= cap) {
			errno = EPROTO;
			return -1;
		}
		if (ch == '\n') {
			line[len] = '\0';
			return 0;
		}
		line[len++] = ch;
	}
}

static int connect_peer(struct probe_run *r, uint64_t deadline_ms)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
	char port[16];
	snprintf(port, sizeof port, "%d", r->port);
	int gai = getaddrinfo(r->host, port, &hints, &ai);
	if (gai != 0) {
		snprintf(r->why, sizeof r->why, "cannot resolve %s: %s", r->host,
		         gai_strerror(gai));
		return -1;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		freeaddrinfo(ai);
		snprintf(r->why, sizeof r->why, "socket: %s", strerror(errno));
		return -1;
	}
	int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	int soerr = 0;
	socklen_t soerr_len = sizeof soerr;
	if (rc != 0 && errno == EINPROGRESS) {
		if (wait_fd(fd, POLLOUT, deadline_ms) != 0)
			soerr = ETIMEDOUT;
		else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &soerr_len) != 0)
			soerr = errno;
	} else if (rc != 0) {
		soerr = errno;
	}
	if (soerr != 0) {
		snprintf(r->why, sizeof r->why, "connect to %s:%d: %s", r->host, r->port,
		         strerror(soerr));
		close(fd);
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

static void probe_run(uv_work_t *w)
{
	struct probe_run *r = (struct probe_run *)w;
	uint64_t deadline_ms = yard_now_mono_ms() + PROBE_DEADLINE_MS;
	double rtt_s[PROBE_PINGS];
	char line[PROBE_LINE_MAX], expect[48];
	char *chunk = NULL;
	r->rc = -1;
	int fd = connect_peer(r, deadline_ms);
	if (fd < 0)
		return;
	for (int i = 0; i < PROBE_PINGS; i++) {
		uint64_t t0 = yard_now_mono_ns();
		if (send_all(fd, "PING\n", 5, deadline_ms) != 0 ||
		    recv_line(fd, line, sizeof line, deadline_ms) != 0) {
			snprintf(r->why, sizeof r->why, "ping %d of %d: %s", i + 1, PROBE_PINGS,
			         strerror(errno));
			goto out;
		}
		if (strcmp(line, "PONG") != 0) {
			snprintf(r->why, sizeof r->why, "ping: the peer answered '%.60s'", line);
			goto out;
		}
		rtt_s[i] = (double)(yard_now_mono_ns() - t0) / 1e9;
	}
	qsort(rtt_s, PROBE_PINGS, sizeof rtt_s[0], cmp_double);
	/* one-way time of a small message */
	r->latency_s = rtt_s[PROBE_PINGS / 2] / 2;

	chunk = calloc(1, PROBE_WRITE_CHUNK);
	if (chunk == NULL) {
		snprintf(r->why, sizeof r->why, "out of memory");
		goto out;
	}
	char request[48];
	snprintf(request, sizeof request, "SINK %lld\n", PROBE_SINK_BYTES);
	snprintf(expect, sizeof expect, "DONE %lld", PROBE_SINK_BYTES);
	uint64_t t0 = yard_now_mono_ns();
	if (send_all(fd, request, strlen(request), deadline_ms) != 0)
		goto sink_failed;
	for (int64_t sent = 0; sent < PROBE_SINK_BYTES; sent += PROBE_WRITE_CHUNK)
		if (send_all(fd, chunk,
		             (size_t)YARD_MIN((int64_t)PROBE_WRITE_CHUNK, PROBE_SINK_BYTES - sent),
		             deadline_ms) != 0)
			goto sink_failed;
	if (recv_line(fd, line, sizeof line, deadline_ms) != 0)
		goto sink_failed;
	if (strcmp(line, expect) != 0) {
		snprintf(r->why, sizeof r->why, "sink: the peer answered '%.60s', not '%s'", line,
		         expect);
		goto out;
	}
	double elapsed_s = (double)(yard_now_mono_ns() - t0) / 1e9;
	r->bw_bytes_per_s = (double)PROBE_SINK_BYTES / (elapsed_s > 1e-9 ? elapsed_s : 1e-9);
	r->rc = 0;
	goto out;
sink_failed:
	snprintf(r->why, sizeof r->why, "sending %lld bytes: %s (all within %d ms)",
	         PROBE_SINK_BYTES, strerror(errno), PROBE_DEADLINE_MS);
out:
	free(chunk);
	close(fd);
}

/* Puts the measured link into perf (unless --link-gbps says otherwise) and has the next
 * heartbeat carry it. */
void linkprobe_apply(struct agent *a)
{
	if (a->link_peer[0] == '\0' || a->perf == NULL || a->cfg.link_gbps > 0)
		return;
	char source[AGENT_NAME_MAX + 16];
	snprintf(source, sizeof source, "measured:%s", a->link_peer);
	json_object_set_new(a->perf, "inter_bw_bytes_per_s", json_real(a->link_bw_bytes_per_s));
	json_object_set_new(a->perf, "inter_latency_s", json_real(a->link_latency_s));
	json_object_set_new(a->perf, "inter_source", json_string(source));
	perf_changed(a);
}

static void probe_done(uv_work_t *w, int status)
{
	struct probe_run *r = (struct probe_run *)w;
	struct agent *a = r->agent;
	a->probe_running = 0;
	if (status == 0 && r->rc == 0) {
		snprintf(a->link_peer, sizeof a->link_peer, "%s", r->peer);
		a->link_bw_bytes_per_s = r->bw_bytes_per_s;
		a->link_latency_s = r->latency_s;
		log_info("link to node %s (%s:%d): %.3f GB/s, latency %.1f us", r->peer, r->host,
		         r->port, r->bw_bytes_per_s / 1e9, r->latency_s * 1e6);
		linkprobe_apply(a);
		perf_save(a); /* finish() saves what it applied itself */
	} else {
		log_warn("link probe to node %s (%s:%d) failed: %s; the leader asks again later",
		         r->peer, r->host, r->port, status == 0 ? r->why : "cancelled");
	}
	free(r);
}

void linkprobe_offer(struct agent *a, const json_t *offer)
{
	const char *peer = json_string_value(json_object_get(offer, "node"));
	const char *host = json_string_value(json_object_get(offer, "host"));
	const json_t *port = json_object_get(offer, "port");
	if (a->probe_running || a->link_peer[0] != '\0' || a->cfg.link_gbps > 0)
		return; /* one at a time; measured or configured already */
	if (peer == NULL || peer[0] == '\0' || strlen(peer) > AGENT_NAME_MAX) {
		log_warn("heartbeat answer: link_probe.node: want a node name: ignored");
		return;
	}
	if (host == NULL || host[0] == '\0' || strlen(host) >= 256) {
		log_warn("heartbeat answer: link_probe.host: want a host name: ignored");
		return;
	}
	if (!json_is_integer(port) || json_integer_value(port) < 1 ||
	    json_integer_value(port) > 65535) {
		log_warn("heartbeat answer: link_probe.port: want a port in 1..65535: ignored");
		return;
	}
	struct probe_run *r = calloc(1, sizeof *r);
	if (r == NULL)
		return;
	r->agent = a;
	snprintf(r->peer, sizeof r->peer, "%s", peer);
	snprintf(r->host, sizeof r->host, "%s", host);
	r->port = (int)json_integer_value(port);
	log_info("measuring the link to node %s (%s:%d) as the leader asked", r->peer, r->host,
	         r->port);
	a->probe_running = 1;
	if (uv_queue_work(a->loop, &r->work, probe_run, probe_done) != 0) {
		a->probe_running = 0;
		free(r);
	}
}
