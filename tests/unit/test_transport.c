/* test_transport.c: every raft stream, accepted and connected, gets TCP_NODELAY from the
 * wrapper (raft 0.15 never sets it: 40 ms Nagle stalls, raft-probe.md §4.2). Two wrapped
 * raft_uv_tcp transports connect to each other through the real handshake. */
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

static void test_connected_and_accepted_streams_have_nodelay(void **state)
{
	uv_loop_t loop;
	struct nodelay_transport a, b;
	struct raft_uv_connect req;
	uv_timer_t timer;
	char addr[64];

	uv_loop_init(&loop);
	uv_timer_init(&loop, &timer);
	uv_timer_start(&timer, tick, 5, 5);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
	close(s);
	snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));

	assert_int_equal(nodelay_transport_init(&a, &loop), 0);
	assert_int_equal(nodelay_transport_init(&b, &loop), 0);
	assert_int_equal(a.super.init(&a.super, 1, addr), 0);
	assert_int_equal(b.super.init(&b.super, 2, "127.0.0.1:1"), 0);
	assert_int_equal(a.super.listen(&a.super, on_accept), 0);
	assert_int_equal(b.super.connect(&b.super, &req, 1, addr, on_connect), 0);
	uint64_t deadline = yard_now_mono_ms() + 5000;
	while ((accepted == NULL || connected == NULL) && yard_now_mono_ms() < deadline)
		uv_run(&loop, UV_RUN_ONCE);
	assert_int_equal(connect_status, 0);
	assert_non_null(accepted);
	assert_non_null(connected);
	assert_true(nodelay_of(connected));
	assert_true(nodelay_of(accepted));
	assert_int_equal(a.streams_tuned + b.streams_tuned, 2);

	uv_close((uv_handle_t *)accepted, stream_closed);
	uv_close((uv_handle_t *)connected, stream_closed);
	a.super.close(&a.super, transport_closed);
	b.super.close(&b.super, transport_closed);
	uv_close((uv_handle_t *)&timer, NULL);
	while (closed < 2)
		uv_run(&loop, UV_RUN_ONCE);
	uv_run(&loop, UV_RUN_DEFAULT);
	nodelay_transport_close(&a);
	nodelay_transport_close(&b);
	assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_connected_and_accepted_streams_have_nodelay),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
