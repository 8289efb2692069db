/* test_comm_split.c: split communicators used at once (TP × DP groups of a world of 8, as the
 * trainer lays them out), point-to-point with tags, nonblocking allreduce overlapped with
 * blocking work, isend + blocking recv in both directions with messages far larger than any
 * socket or ring buffer (must not deadlock), and colour < 0. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/dp_harness.h"
#include "tests/integration/dp_values.h"

static int split_body(yd_comm *c, void *arg)
{
	if (!c)
		return 1;
	int me = yd_comm_rank(c), n = yd_comm_size(c), tp = 2, rc;
	yd_comm *tpc = NULL, *dpc = NULL, *none = NULL;
	/* TP groups: consecutive pairs; DP groups: same TP index; keys reverse the DP order */
	rc = yd_comm_split(c, me / tp, me, &tpc);
	DP_CHECK(rc == 0, "split tp: %s", yd_comm_last_error(c));
	rc = yd_comm_split(c, me % tp, n - me, &dpc);
	DP_CHECK(rc == 0, "split dp: %s", yd_comm_last_error(c));
	rc = yd_comm_split(c, me == 0 ? 0 : -1, 0, &none);
	DP_CHECK(rc == 0 && (me == 0 ? none != NULL : none == NULL), "split with colour -1");
	DP_CHECK(yd_comm_size(tpc) == tp && yd_comm_rank(tpc) == me % tp, "tp layout");
	DP_CHECK(yd_comm_size(dpc) == n / tp && yd_comm_rank(dpc) == (n - 1 - me) / tp,
	         "dp layout: size %d rank %d", yd_comm_size(dpc), yd_comm_rank(dpc));
	for (int it = 0; it < 20; it++) {
		size_t count = 1000 + (size_t)it * 777;
		float *a = malloc(count * 4), *b = malloc(count * 4);
		for (size_t i = 0; i < count; i++) {
			a[i] = (float)(me + (int)i % 5);
			b[i] = (float)(me * 2 + it);
		}
		yd_request *req;
		/* DP gradient allreduce in flight while TP does its blocking allreduce */
		rc = yd_iallreduce(dpc, b, b, count, YD_F32, YD_SUM, &req);
		DP_CHECK(rc == 0, "iallreduce: %s", yd_comm_last_error(dpc));
		rc = yd_allreduce(tpc, a, a, count, YD_F32, YD_SUM);
		DP_CHECK(rc == 0, "tp allreduce: %s", yd_comm_last_error(tpc));
		rc = yd_wait(req);
		DP_CHECK(rc == 0, "wait: %s", yd_comm_last_error(dpc));
		int base = me - me % tp;
		for (size_t i = 0; i < count; i++) {
			float ta = 0, tb = 0;
			for (int r = base; r < base + tp; r++)
				ta += (float)(r + (int)i % 5);
			for (int r = me % tp; r < n; r += tp)
				tb += (float)(r * 2 + it);
			DP_CHECK(a[i] == ta && b[i] == tb, "split results at %zu: %g/%g want %g/%g",
			         i, a[i], b[i], ta, tb);
		}
		free(a);
		free(b);
	}
	if (none)
		yd_comm_destroy(none);
	yd_comm_destroy(tpc);
	yd_comm_destroy(dpc);
	return 0;
}

/* Pipeline-style exchange: both neighbours isend a large buffer, then recv (blocking). */
static int p2p_body(yd_comm *c, void *arg)
{
	if (!c)
		return 1;
	int me = yd_comm_rank(c), n = yd_comm_size(c);
	int next = (me + 1) % n, prev = (me - 1 + n) % n;
	size_t big = 8u << 20; /* 32 MiB of f32: bigger than socket buffers and shm rings */
	float *out = malloc(big * 4), *in = malloc(big * 4);
	for (int it = 0; it < 3; it++) {
		size_t count = it == 1 ? 5 : big - (size_t)it;
		for (size_t i = 0; i < count; i += 1 + i / 7)
			out[i] = (float)(me * 1000 + it) + (float)(i % 100);
		yd_request *r1, *r2;
		int rc = yd_isend(c, out, count, YD_F32, next, it, &r1);
		DP_CHECK(rc == 0, "isend");
		rc = yd_isend(c, out, 3, YD_F32, prev, 100 + it, &r2);
		DP_CHECK(rc == 0, "isend small");
		rc = yd_recv(c, in, count, YD_F32, prev, it);
		DP_CHECK(rc == 0, "recv: %s", yd_comm_last_error(c));
		float small[3];
		yd_request *r3;
		rc = yd_irecv(c, small, 3, YD_F32, next, 100 + it, &r3);
		DP_CHECK(rc == 0 && yd_wait(r3) == 0, "irecv: %s", yd_comm_last_error(c));
		DP_CHECK(yd_wait(r1) == 0 && yd_wait(r2) == 0, "waits: %s", yd_comm_last_error(c));
		for (size_t i = 0; i < count; i += 1 + i / 7)
			DP_CHECK(in[i] == (float)(prev * 1000 + it) + (float)(i % 100),
			         "p2p data at %zu", i);
		DP_CHECK(small[0] == (float)(next * 1000 + it), "small p2p data");
	}
	/* blocking send/recv with tags; a wrong tag is a mismatch, not silent data */
	int v = me, got = -1;
	if (me % 2 == 0 && me + 1 < n) {
		DP_CHECK(yd_send(c, &v, 1, YD_I32, me + 1, 5) == 0, "send");
	} else if (me % 2 == 1) {
		DP_CHECK(yd_recv(c, &got, 1, YD_I32, me - 1, 5) == 0 && got == me - 1,
		         "recv tag 5");
	}
	free(out);
	free(in);
	int rc = yd_barrier(c);
	DP_CHECK(rc == 0, "barrier: %s", yd_comm_last_error(c));
	return 0;
}

static int tag_mismatch_body(yd_comm *c, void *arg)
{
	if (!c)
		return 1;
	int v = 1, rc;
	if (yd_comm_rank(c) == 0)
		rc = yd_send(c, &v, 1, YD_I32, 1, 1);
	else
		rc = yd_recv(c, &v, 1, YD_I32, 0, 2);
	if (yd_comm_rank(c) == 1)
		DP_CHECK(rc == YARD_EMISMATCH && strstr(yd_comm_last_error(c), "tag=1"),
		         "tag mismatch: rc=%d %s", rc, yd_comm_last_error(c));
	return 0;
}

int main(void)
{
	int bad = 0, status[64];
	static const struct {
		const char *transport, *hosts;
	} t[] = {{"shm", NULL}, {"tcp", NULL}, {NULL, "a,a,a,a,b,b,b,b"}};
	for (int i = 0; i < 3; i++) {
		struct dp_spawn sp = {.world = 8,
		                      .transport = t[i].transport,
		                      .hosts = t[i].hosts,
		                      .timeout_ms = 20000,
		                      .wall_s = 120,
		                      .kill_rank = -1,
		                      .skip_rank = -1};
		int f = dp_spawn_run(&sp, split_body, NULL, status);
		printf("%s split tp x dp groups (%s)\n", f ? "FAIL" : "ok",
		       t[i].hosts ? t[i].hosts : t[i].transport);
		bad += f != 0;
		sp.world = i == 2 ? 4 : 3;
		sp.hosts = i == 2 ? "a,b,a,b" : NULL;
		f = dp_spawn_run(&sp, p2p_body, NULL, status);
		printf("%s isend/recv ring exchange, 32 MiB messages (%s)\n", f ? "FAIL" : "ok",
		       sp.hosts ? sp.hosts : t[i].transport);
		bad += f != 0;
		sp.world = 2;
		sp.hosts = NULL;
		f = dp_spawn_run(&sp, tag_mismatch_body, NULL, status);
		printf("%s tag mismatch detected (%s)\n", f ? "FAIL" : "ok",
		       t[i].transport ? t[i].transport : "auto");
		bad += f != 0;
	}
	return bad ? 1 : 0;
}
