/* test_coll_rdma.c: the RDMA verbs transport (transport_rdma.c).
 * Everywhere: without a usable RDMA device, YARD_TRANSPORT=rdma fails init on every rank
 * with an error that says why, and auto between two emulated hosts runs over TCP (the pair
 * agreed on the fallback) with correct results.
 * Where a device with an active port exists (an HCA, or soft-RoCE:
 * `rdma link add rxe0 type rxe netdev lo`): every collective, every dtype × op, at small
 * sizes and 64 MiB, at 2 and 4 ranks over forced rdma and over auto between emulated hosts,
 * yd_comm_transport saying rdma; and a SIGKILLed rank becomes, on every survivor, an error
 * naming it within the deadline.
 * Exits 77 (skip) after the fallback checks where no device exists. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "dataplane/dp.h"
#include "tests/integration/dp_harness.h"
#include "tests/integration/dp_values.h"

static int victim = -1;

static int body_forced_without_device(yd_comm *c, void *arg)
{
	const char *err = arg;
	DP_CHECK(c == NULL, "YARD_TRANSPORT=rdma initialised without an RDMA device");
	DP_CHECK(strstr(err, "transport rdma") &&
	             (strstr(err, "no RDMA device") || strstr(err, "no active port") ||
	              strstr(err, "without libibverbs")),
	         "init error does not say why RDMA is impossible: %s", err);
	return 0;
}

static int allreduce_ok(yd_comm *c, enum yd_dtype dt, enum yd_op op, size_t count)
{
	size_t esz = yd_dtype_size(dt);
	char *buf = malloc(count * esz + 8), *ref = malloc(count * esz + 8);
	for (size_t i = 0; i < count; i++) {
		dpv_set(buf, dt, i, dpv_value(op, yd_comm_rank(c), i));
		dpv_ref(ref, dt, op, yd_comm_size(c), i);
	}
	int rc = yd_allreduce(c, buf, buf, count, dt, op);
	int good = rc == 0 && memcmp(buf, ref, count * esz) == 0;
	if (!good)
		fprintf(stderr, "rank %d allreduce %s %s count=%zu: rc=%d (%s)\n", yd_comm_rank(c),
		        yd_dtype_name(dt), yd_op_name(op), count, rc, yd_comm_last_error(c));
	free(buf);
	free(ref);
	return good;
}

static int other_collectives_ok(yd_comm *c, enum yd_dtype dt, enum yd_op op, size_t count)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c), root = (int)(count % (size_t)n);
	size_t esz = yd_dtype_size(dt), total = count * (size_t)n;
	char *in = malloc(total * esz + 8), *out = malloc(total * esz + 8);
	char *ref = malloc(total * esz + 8);
	int bad = 0;
	/* reduce_scatter */
	for (size_t i = 0; i < total; i++) {
		dpv_set(in, dt, i, dpv_value(op, me, i));
		dpv_ref(ref, dt, op, n, i);
	}
	bad |= yd_reduce_scatter(c, in, out, count, dt, op) != 0 ||
	       memcmp(out, ref + (size_t)me * count * esz, count * esz) != 0;
	/* reduce to root */
	bad |= yd_reduce(c, in, out, count, dt, op, root) != 0 ||
	       (me == root && memcmp(out, ref, count * esz) != 0);
	/* allgather */
	for (size_t i = 0; i < count; i++)
		dpv_set(in, dt, i, dpv_value(YD_SUM, me, i));
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < count; i++)
			dpv_set(ref + (size_t)r * count * esz, dt, i, dpv_value(YD_SUM, r, i));
	bad |= yd_allgather(c, in, out, count, dt) != 0 || memcmp(out, ref, total * esz) != 0;
	/* broadcast */
	for (size_t i = 0; i < count; i++)
		dpv_set(in, dt, i, me == root ? dpv_value(YD_SUM, root, i) : 99.0);
	bad |= yd_broadcast(c, in, count, dt, root) != 0 ||
	       memcmp(in, ref + (size_t)root * count * esz, count * esz) != 0;
	if (bad)
		fprintf(stderr, "rank %d %s %s count=%zu: a collective failed (%s)\n", me,
		        yd_dtype_name(dt), yd_op_name(op), count, yd_comm_last_error(c));
	free(in);
	free(out);
	free(ref);
	return !bad;
}

struct plan {
	enum yd_transport want; /* what every peer on another host (or every peer) must use */
	int full;               /* every op and 64 MiB, or sums at small sizes only */
};

static int body_collectives(yd_comm *c, void *arg)
{
	static const size_t counts[] = {0, 1, 13, 4099, 300007};
	int n, me;
	if (!c) {
		fprintf(stderr, "init failed: %s\n", (const char *)arg);
		return 1;
	}
	const struct plan *p = arg;
	enum yd_transport want = p->want;
	n = yd_comm_size(c);
	me = yd_comm_rank(c);
	for (int j = 0; j < n; j++) {
		enum yd_transport t = yd_comm_transport(c, j);
		DP_CHECK(j == me || t == want || t == YD_TRANSPORT_SHM,
		         "rank %d: transport to rank %d is %s, expected %s", me, j,
		         yd_transport_name(t), yd_transport_name(want));
	}
	for (int dt = 0; dt < YD_DTYPE_COUNT; dt++)
		for (int op = 0; op < (p->full ? YD_OP_COUNT : 1); op++)
			for (size_t k = 0; k < sizeof counts / sizeof counts[0] - !p->full; k++) {
				yd_comm_set_algo(c,
				                 (enum yd_algo)((k + (size_t)op) % YD_ALGO_COUNT));
				if (!allreduce_ok(c, dt, op, counts[k]) ||
				    !other_collectives_ok(c, dt, op, counts[k]))
					return 1;
			}
	yd_comm_set_algo(c, YD_ALGO_AUTO);
	DP_CHECK(!p->full || allreduce_ok(c, YD_F32, YD_SUM, 16u << 20), "64 MiB allreduce failed");
	return yd_barrier(c) != 0;
}

/* Loops until the victim's death turns into an error that names it. */
static int body_kill(yd_comm *c, void *arg)
{
	char want[64];
	(void)arg;
	if (!c)
		return 1;
	snprintf(want, sizeof want, "rank %d", victim);
	for (int it = 0; it < 1000000; it++) {
		size_t count = it % 2 ? 1000 : 300000;
		if (!allreduce_ok(c, YD_F32, YD_SUM, count)) {
			DP_CHECK(strstr(yd_comm_last_error(c), want),
			         "rank %d: error does not name rank %d: %s", yd_comm_rank(c),
			         victim, yd_comm_last_error(c));
			return 0;
		}
	}
	fprintf(stderr, "rank %d: the victim never failed anything\n", yd_comm_rank(c));
	return 1;
}

static int run(const char *what, struct dp_spawn *sp, dp_rank_fn fn, void *arg)
{
	int status[64];
	uint64_t t0 = yard_now_mono_ms();
	int failed = dp_spawn_run(sp, fn, arg, status);
	printf("%s %s world=%d transport=%s hosts=%s (%llu ms)\n", failed ? "FAIL" : "ok", what,
	       sp->world, sp->transport ? sp->transport : "auto", sp->hosts ? sp->hosts : "-",
	       (unsigned long long)(yard_now_mono_ms() - t0));
	fflush(stdout);
	return failed != 0;
}

/* Asked in a child so that the parent never opens a verbs device before forking. */
static int device_present(char *why, size_t len)
{
	int pfd[2];
	if (pipe(pfd) != 0)
		return 0;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		char buf[256];
		close(pfd[0]);
		int have = dp_rdma_device_present(buf, sizeof buf);
		if (!have && write(pfd[1], buf, strlen(buf)) < 0)
			_exit(2);
		_exit(have);
	}
	close(pfd[1]);
	ssize_t got = pid > 0 ? read(pfd[0], why, len - 1) : -1;
	why[got > 0 ? got : 0] = 0;
	close(pfd[0]);
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return 0;
	return WEXITSTATUS(st) == 1;
}

/* The ranks of world over forced rdma (hosts NULL) or auto between emulated hosts, none killed
 * or missing. */
static struct dp_spawn spawn_of(int world, const char *hosts, int timeout_ms, int wall_s)
{
	return (struct dp_spawn){.world = world,
	                         .hosts = hosts,
	                         .transport = hosts ? NULL : "rdma",
	                         .timeout_ms = timeout_ms,
	                         .wall_s = wall_s,
	                         .kill_rank = -1,
	                         .skip_rank = -1};
}

int main(void)
{
	char why[256];
	int bad = 0;
	struct plan tcp = {YD_TRANSPORT_TCP, 0}, rdma = {YD_TRANSPORT_RDMA, 1};
	int have = device_present(why, sizeof why);
	if (!have) {
		struct dp_spawn forced = spawn_of(2, NULL, 5000, 60);
		struct dp_spawn fallback = spawn_of(4, "a,a,b,b", 10000, 120);
		bad += run("forced rdma fails at init with the reason", &forced,
		           body_forced_without_device, NULL);
		bad +=
		    run("auto between hosts falls back to tcp", &fallback, body_collectives, &tcp);
		if (bad)
			return 1;
		printf("SKIP: the RDMA data path was not exercised: %s (soft-RoCE needs the "
		       "rdma_rxe kernel module: `rdma link add rxe0 type rxe netdev lo`)\n",
		       why);
		return 77;
	}
#ifdef YD_VERBS_EMULATED
	printf("emulated verbs (tests/integration/verbs_emul.c): queue pairs are datagram "
	       "sockets between the rank processes\n");
#endif
	for (int world = 2; world <= 4; world += 2) {
		struct dp_spawn forced = spawn_of(world, NULL, 20000, 300);
		bad += run("collectives", &forced, body_collectives, &rdma);
	}
	struct dp_spawn hosts = spawn_of(4, "a,a,b,b", 20000, 300);
	bad +=
	    run("collectives (shm inside a host, rdma between)", &hosts, body_collectives, &rdma);
	/* a RoCE GID index that is not one, or that the port lacks, fails init naming it */
	const char *gid_bad[][2] = {
	    {"abc", "YARD_RDMA_GID_INDEX=abc: want a GID table index 0-255"},
	    {"1x", "YARD_RDMA_GID_INDEX=1x: want a GID table index 0-255"},
	    {"256", "YARD_RDMA_GID_INDEX=256: want a GID table index 0-255"},
	    {"1", "cannot read GID index 1"}};
	for (int i = 0; i < 4; i++) {
		struct dp_spawn forced = spawn_of(2, NULL, 5000, 60);
		int status[2];
		setenv("YARD_RDMA_GID_INDEX", gid_bad[i][0], 1);
		int refused = dp_spawn_refused(&forced, gid_bad[i][1], status) == 0;
		unsetenv("YARD_RDMA_GID_INDEX");
		printf("%s YARD_RDMA_GID_INDEX=%s refused: %s\n", refused ? "ok" : "FAIL",
		       gid_bad[i][0], gid_bad[i][1]);
		bad += !refused;
	}
	for (int k = 0; k < 3; k++) {
		victim = 1 + k % 3;
		struct dp_spawn kill = spawn_of(4, NULL, 3000, 60);
		kill.kill_rank = victim;
		kill.kill_after_ms = 100 + 150 * k;
		bad += run("SIGKILL a rank: survivors name it", &kill, body_kill, NULL);
	}
	return bad ? 1 : 0;
}
