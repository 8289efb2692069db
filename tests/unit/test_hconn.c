/* test_hconn.c: yard-simnodes' keep-alive HTTP client (tests/tools/hconn.c) against a small
 * scripted server on 127.0.0.1, in a thread: answers in pieces, reuse of a connection, a
 * connection the server closed while idle, and answers it must refuse or give up on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/tools/hconn.h"

enum mode { M_SPLIT, M_CLOSE_AFTER, M_CHUNKED, M_TRUNCATED, M_SILENT };

static struct {
	int listen_fd, port;
	enum mode mode;
	int accepted, requests;
	pthread_mutex_t mu;
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER};

static enum mode srv_mode(void)
{
	pthread_mutex_lock(&srv.mu);
	enum mode m = srv.mode;
	pthread_mutex_unlock(&srv.mu);
	return m;
}

/* Reads one request (head and Content-Length body); 0, or -1 at EOF. */
static int read_request(int fd, char *path, size_t path_len)
{
	char buf[8192];
	size_t len = 0;
	for (;;) {
		ssize_t r = recv(fd, buf + len, sizeof buf - 1 - len, 0);
		if (r <= 0)
			return -1;
		len += (size_t)r;
		buf[len] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		const char *cl = strstr(buf, "Content-Length: ");
		if (end != NULL && cl != NULL &&
		    len >= (size_t)(end + 4 - buf) + strtoul(cl + 16, NULL, 10))
			break;
	}
	sscanf(buf, "POST %255s", path);
	(void)path_len;
	return 0;
}

static void send_all(int fd, const char *s)
{
	size_t len = strlen(s), off = 0;
	while (off < len) {
		ssize_t w = send(fd, s + off, len - off, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		off += (size_t)w;
	}
}

/* One client connection, in a thread of its own (connections are served at once, as a
 * controller does): requests answered as srv.mode says until the client closes. */
static void *serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char path[256];
	while (read_request(fd, path, sizeof path) == 0) {
		pthread_mutex_lock(&srv.mu);
		int n = ++srv.requests;
		pthread_mutex_unlock(&srv.mu);
		char body[128], head[256];
		snprintf(body, sizeof body, "{\"path\":\"%s\",\"n\":%d}", path, n);
		enum mode m = srv_mode();
		if (m == M_SILENT)
			continue;
		if (m == M_CHUNKED) {
			send_all(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			             "5\r\nhello\r\n0\r\n\r\n");
			continue;
		}
		snprintf(head, sizeof head,
		         "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
		         "content-length: %zu\r\n\r\n",
		         m == M_TRUNCATED ? strlen(body) + 50 : strlen(body));
		if (m == M_SPLIT) { /* the head and the body in pieces, apart */
			char first[8];
			snprintf(first, sizeof first, "%.5s", head);
			send_all(fd, first);
			usleep(20000);
			send_all(fd, head + 5);
			usleep(20000);
			send_all(fd, body);
			continue;
		}
		send_all(fd, head);
		send_all(fd, body);
		if (m == M_CLOSE_AFTER || m == M_TRUNCATED)
			break; /* close it, saying nothing (as an idle timeout does) */
	}
	close(fd);
	return NULL;
}

static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(srv.listen_fd, NULL, NULL);
		if (fd < 0)
			return NULL;
		pthread_mutex_lock(&srv.mu);
		srv.accepted++;
		pthread_mutex_unlock(&srv.mu);
		pthread_t t;
		if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd) != 0)
			close(fd);
		else
			pthread_detach(t);
	}
}

struct answer {
	int done, status;
	char body[256], err[256];
};

static void on_done(void *user, int status, const char *body, size_t len, const char *err)
{
	struct answer *a = user;
	a->done = 1;
	a->status = status;
	snprintf(a->body, sizeof a->body, "%.*s", (int)len, body);
	snprintf(a->err, sizeof a->err, "%s", err ? err : "");
}

/* Runs the epoll loop until a is answered (or 5 s pass; expire_ms > 0: requests older time
 * out). */
static void wait_answer(int epfd, struct hconn_pool *p, struct answer *a, uint64_t expire_ms)
{
	uint64_t until = yard_now_mono_ms() + 5000;
	while (!a->done && yard_now_mono_ms() < until) {
		struct epoll_event evs[8];
		int n = epoll_wait(epfd, evs, 8, 10);
		for (int i = 0; i < n; i++)
			hconn_event(p, (uint32_t)evs[i].data.u64, evs[i].events);
		if (expire_ms > 0)
			hconn_expire(p, expire_ms);
	}
	assert_true(a->done);
}

/* Posts {} to path with a fresh answer a and waits for it. */
static void post_and_wait(int epfd, struct hconn_pool *p, const char *path, struct answer *a)
{
	char err[256];
	memset(a, 0, sizeof *a);
	assert_int_equal(hconn_post(p, path, "tok", "{}", 2, a, err, sizeof err), 0);
	wait_answer(epfd, p, a, 0);
}

static pthread_t server_thread;

static int setup(void **state)
{
	(void)state;
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof addr;
	srv.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(srv.listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
	assert_int_equal(listen(srv.listen_fd, 16), 0);
	getsockname(srv.listen_fd, (struct sockaddr *)&addr, &len);
	srv.port = ntohs(addr.sin_port);
	assert_int_equal(pthread_create(&server_thread, NULL, serve, NULL), 0);
	return 0;
}

/* accept fails once the socket is shut down: the accepting thread ends (a connection's
 * thread ends when its client closes it) */
static int teardown(void **state)
{
	(void)state;
	shutdown(srv.listen_fd, SHUT_RDWR);
	pthread_join(server_thread, NULL);
	close(srv.listen_fd);
	return 0;
}

static struct hconn_pool *pool_at(int epfd, int size)
{
	char url[64], err[256];
	struct hconn_pool *p = hconn_pool_new(epfd, 7, size, on_done);
	assert_non_null(p);
	snprintf(url, sizeof url, "http://127.0.0.1:%d", srv.port);
	assert_int_equal(hconn_set_endpoint(p, url, err, sizeof err), 0);
	return p;
}

static void set_mode(enum mode m)
{
	pthread_mutex_lock(&srv.mu);
	srv.mode = m;
	pthread_mutex_unlock(&srv.mu);
}

static int accepted(void)
{
	pthread_mutex_lock(&srv.mu);
	int n = srv.accepted;
	pthread_mutex_unlock(&srv.mu);
	return n;
}

static void test_answers_in_pieces_on_one_kept_connection(void **state)
{
	(void)state;
	int epfd = epoll_create1(0);
	struct hconn_pool *p = pool_at(epfd, 2);
	set_mode(M_SPLIT);
	int before = accepted();
	for (int i = 0; i < 3; i++) {
		struct answer a;
		post_and_wait(epfd, p, "/v1/x", &a);
		assert_int_equal(a.status, 200);
		assert_non_null(strstr(a.body, "\"path\":\"/v1/x\""));
		assert_string_equal(a.err, "");
	}
	usleep(20000);
	assert_int_equal(accepted() - before, 1); /* one connection for all three */
	hconn_pool_free(p);
	close(epfd);
}

static void test_a_connection_closed_while_idle_is_replaced(void **state)
{
	(void)state;
	int epfd = epoll_create1(0);
	struct hconn_pool *p = pool_at(epfd, 1);
	set_mode(M_CLOSE_AFTER);
	for (int i = 0; i < 3; i++) {
		struct answer a;
		/* the server closed the last connection after answering; the client has not
		 * seen that yet (no epoll turn in between): the request goes out on it and is
		 * sent again on a fresh one */
		post_and_wait(epfd, p, "/v1/y", &a);
		assert_int_equal(a.status, 200);
		assert_string_equal(a.err, "");
	}
	hconn_pool_free(p);
	close(epfd);
}

static void test_refused_and_failed_answers_name_why(void **state)
{
	(void)state;
	int epfd = epoll_create1(0);
	struct hconn_pool *p = pool_at(epfd, 1);
	char err[256];
	struct answer a = {0};

	set_mode(M_CHUNKED);
	post_and_wait(epfd, p, "/v1/z", &a);
	assert_int_equal(a.status, 0);
	assert_non_null(strstr(a.err, "chunked"));

	set_mode(M_TRUNCATED);
	post_and_wait(epfd, p, "/v1/z", &a);
	assert_int_equal(a.status, 0);
	assert_non_null(strstr(a.err, "closed the connection after"));

	set_mode(M_SILENT);
	memset(&a, 0, sizeof a);
	assert_int_equal(hconn_post(p, "/v1/z", "tok", "{}", 2, &a, err, sizeof err), 0);
	/* busy: a second request has no connection */
	struct answer b = {0};
	assert_int_equal(hconn_post(p, "/v1/z", "tok", "{}", 2, &b, err, sizeof err), -1);
	assert_non_null(strstr(err, "busy"));
	wait_answer(epfd, p, &a, 100);
	assert_int_equal(a.status, 0);
	assert_non_null(strstr(a.err, "no answer"));
	hconn_pool_free(p);
	close(epfd);
}

/* hconn_post_on: a request on the connection named (each keeps its own: a watch per node),
 * refused by name when that one is busy or not in the pool. */
static void test_a_named_connection_is_used_and_checked(void **state)
{
	(void)state;
	int epfd = epoll_create1(0);
	struct hconn_pool *p = pool_at(epfd, 3);
	char err[256];
	set_mode(M_SPLIT);
	int before = accepted();
	struct answer a[3];
	for (int round = 0; round < 2; round++) {
		memset(a, 0, sizeof a);
		for (int i = 0; i < 3; i++)
			assert_int_equal(
			    hconn_post_on(p, i, "/v1/w", "tok", "{}", 2, &a[i], err, sizeof err),
			    0);
		/* connection 1 is busy with a[1]: a second request on it is refused */
		struct answer b = {0};
		assert_int_equal(hconn_post_on(p, 1, "/v1/w", "tok", "{}", 2, &b, err, sizeof err),
		                 -1);
		assert_string_equal(err, "connection 1 is busy");
		for (int i = 0; i < 3; i++) {
			wait_answer(epfd, p, &a[i], 0);
			assert_int_equal(a[i].status, 200);
		}
	}
	usleep(20000);
	assert_int_equal(accepted() - before, 3); /* each kept its connection for both rounds */
	assert_int_equal(hconn_post_on(p, 3, "/v1/w", "tok", "{}", 2, &a[0], err, sizeof err), -1);
	assert_string_equal(err, "no connection 3 in a pool of 3");
	assert_int_equal(hconn_post_on(p, -1, "/v1/w", "tok", "{}", 2, &a[0], err, sizeof err), -1);
	hconn_pool_free(p);
	close(epfd);
}

static void test_bad_endpoints_are_named(void **state)
{
	(void)state;
	int epfd = epoll_create1(0);
	struct hconn_pool *p = hconn_pool_new(epfd, 7, 1, on_done);
	char err[256];
	struct answer a = {0};
	assert_int_equal(hconn_post(p, "/", "t", "", 0, &a, err, sizeof err), -1);
	assert_non_null(strstr(err, "no endpoint"));
	assert_int_equal(hconn_set_endpoint(p, "https://127.0.0.1:1", err, sizeof err), -1);
	assert_non_null(strstr(err, "http://HOST:PORT"));
	assert_int_equal(hconn_set_endpoint(p, "http://127.0.0.1", err, sizeof err), -1);
	assert_int_equal(hconn_set_endpoint(p, "http://127.0.0.1:x", err, sizeof err), -1);
	assert_non_null(strstr(err, "port"));
	/* a port nobody listens on: connect is refused, and said so */
	assert_int_equal(hconn_set_endpoint(p, "http://127.0.0.1:1", err, sizeof err), 0);
	assert_int_equal(hconn_post(p, "/", "t", "", 0, &a, err, sizeof err), -1);
	assert_non_null(strstr(err, "connect to 127.0.0.1:1"));
	hconn_pool_free(p);
	close(epfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_answers_in_pieces_on_one_kept_connection),
	    cmocka_unit_test(test_a_connection_closed_while_idle_is_replaced),
	    cmocka_unit_test(test_refused_and_failed_answers_name_why),
	    cmocka_unit_test(test_bad_endpoints_are_named),
	    cmocka_unit_test(test_a_named_connection_is_used_and_checked),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
