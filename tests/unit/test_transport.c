/* test_transport.c: every raft stream, accepted and connected, gets TCP_NODELAY from the
 * wrapper (raft 0.15 never sets it: 40 ms Nagle stalls, raft-probe.md §4.2), and a
 * connection whose peer end closed is reported. Two wrapped raft_uv_tcp transports connect
 * to each other through the real handshake. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "raft/transport.h"

static uv_stream_t *accepted, *connected;
static int connect_status = 1;

static void on_accept(struct raft_uv_transport *t, raft_id id, const char *address, uv_stream_t *s)
{
	accepted = s;
}

static void on_connect(struct raft_uv_connect *req, uv_stream_t *s, int status)
{
	connect_status = status;
	connected = s;
}

static int nodelay_of(uv_stream_t *s)
{
	uv_os_fd_t fd;
	int v = 0;
	socklen_t len = sizeof v;
	assert_int_equal(uv_fileno((uv_handle_t *)s, &fd), 0);
	assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	return v != 0;
}

static int closed;
static void transport_closed(struct raft_uv_transport *t)
{
	closed++;
}
static void stream_closed(uv_handle_t *h)
{
	free(h);
}
static void tick(uv_timer_t *t) {}

/* Two wrapped transports on a loop: a (member 1) listens on a free loopback port, b (member
 * 2) connects to it through raft_uv_tcp's handshake; accepted and connected are set. */
struct pair {
	uv_loop_t loop;
	struct nodelay_transport a, b;
	struct raft_uv_connect req;
	uv_timer_t timer;
	char addr[64];
};

static void pair_connect(struct pair *p)
{
	accepted = connected = NULL;
	connect_status = 1;
	closed = 0;
	uv_loop_init(&p->loop);
	uv_timer_init(&p->loop, &p->timer);
	uv_timer_start(&p->timer, tick, 5, 5);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
	close(s);
	snprintf(p->addr, sizeof p->addr, "127.0.0.1:%d", ntohs(sa.sin_port));

	assert_int_equal(nodelay_transport_init(&p->a, &p->loop), 0);
	assert_int_equal(nodelay_transport_init(&p->b, &p->loop), 0);
	assert_int_equal(p->a.super.init(&p->a.super, 1, p->addr), 0);
	assert_int_equal(p->b.super.init(&p->b.super, 2, "127.0.0.1:1"), 0);
	assert_int_equal(p->a.super.listen(&p->a.super, on_accept), 0);
	assert_int_equal(nodelay_transport_peer_closed(&p->b, 1), 0); /* nothing known yet */
	assert_int_equal(p->b.super.connect(&p->b.super, &p->req, 1, p->addr, on_connect), 0);
	uint64_t deadline = yard_now_mono_ms() + 5000;
	while ((accepted == NULL || connected == NULL) && yard_now_mono_ms() < deadline)
		uv_run(&p->loop, UV_RUN_ONCE);
	assert_int_equal(connect_status, 0);
	assert_non_null(accepted);
	assert_non_null(connected);
}

/* Closes what is left open (accepted already closed when accepted_gone) and the loop. */
static void pair_close(struct pair *p, int accepted_gone)
{
	if (!accepted_gone)
		uv_close((uv_handle_t *)accepted, stream_closed);
	uv_close((uv_handle_t *)connected, stream_closed);
	p->a.super.close(&p->a.super, transport_closed);
	p->b.super.close(&p->b.super, transport_closed);
	uv_close((uv_handle_t *)&p->timer, NULL);
	while (closed < 2)
		uv_run(&p->loop, UV_RUN_ONCE);
	uv_run(&p->loop, UV_RUN_DEFAULT);
	nodelay_transport_close(&p->a);
	nodelay_transport_close(&p->b);
	assert_int_equal(uv_loop_close(&p->loop), 0);
}

static void test_connected_and_accepted_streams_have_nodelay(void **state)
{
	struct pair p;
	pair_connect(&p);
	assert_true(nodelay_of(connected));
	assert_true(nodelay_of(accepted));
	assert_int_equal(p.a.streams_tuned + p.b.streams_tuned, 2);
	pair_close(&p, 0);
}

/* The wrapper tells a connection whose peer end closed (a crashed peer's kernel closes it
 * at once) from one that is still open, once per connection, without touching the stream
 * raft_uv writes on. */
static void test_peer_end_closing_is_seen_once(void **state)
{
	struct pair p;
	pair_connect(&p);
	/* open: not closed, however often asked */
	for (int i = 0; i < 3; i++) {
		uv_run(&p.loop, UV_RUN_NOWAIT);
		assert_int_equal(nodelay_transport_peer_closed(&p.b, 1), 0);
	}
	assert_int_equal(nodelay_transport_peer_closed(&p.b, 3), 0); /* no such peer */

	/* the peer's end goes (as when its process dies): seen within the deadline, once */
	uv_close((uv_handle_t *)accepted, stream_closed);
	int seen = 0;
	uint64_t deadline = yard_now_mono_ms() + 5000;
	while (!seen && yard_now_mono_ms() < deadline) {
		uv_run(&p.loop, UV_RUN_ONCE);
		seen = nodelay_transport_peer_closed(&p.b, 1);
	}
	assert_true(seen);
	assert_int_equal(nodelay_transport_peer_closed(&p.b, 1), 0);
	/* the stream raft_uv owns is untouched: still writable (libuv refuses writes on a
	 * stream whose read failed, which raft 0.15 would turn into RAFT_UNAVAILABLE) */
	assert_true(uv_is_writable(connected));
	pair_close(&p, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_connected_and_accepted_streams_have_nodelay),
	    cmocka_unit_test(test_peer_end_closing_is_seen_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
