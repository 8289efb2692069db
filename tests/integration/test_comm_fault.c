/* test_comm_fault.c: failures become errors, never hangs or wrong answers.
 * - SIGKILL one rank at random points while the group loops over collectives (shm, tcp,
 *   mixed): every survivor must return an error naming the dead rank, within the deadline,
 *   and every result reported as success must be correct.
 * - init with a missing rank (rendezvous file and explicit peer list) times out naming it.
 * - yd_comm_abort from another thread ends a blocked receive promptly.
 * - mismatched collectives (count, op, dtype, root) fail with YARD_EMISMATCH on both sides.
 * DP_FAULT_KILLS overrides the number of kill points (scripts/dp-fault-soak uses it). */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/integration/dp_harness.h"
#include "tests/integration/dp_values.h"

#define DEADLINE_MS 2500

static int victim;

/* Loops over collectives of varied sizes until an error; checks every result. The error
 * must name the victim. Exit 0 = behaved (error naming the victim), 1 = misbehaved. */
static int loop_body(yd_comm *c, void *arg)
{
	char want[64];
	int n, me;
	size_t sizes[] = {1, 1000, 65536, 1 << 20};
	if (!c)
		return 1;
	n = yd_comm_size(c);
	me = yd_comm_rank(c);
	snprintf(want, sizeof want, "peer rank %d (host", victim);
	float *buf = malloc(sizeof(float) << 20), *ref = malloc(sizeof(float) << 20);
	for (int it = 0;; it++) {
		size_t count = sizes[it % 4];
		int kind = it % 5, rc;
		for (size_t i = 0; i < count; i++) {
			buf[i] = (float)dpv_value(YD_SUM, me, i);
			dpv_ref(ref, YD_F32, YD_SUM, n, i);
		}
		/* every algorithm in turn, or (arg set) the shared buffers throughout */
		yd_comm_set_algo(c, arg ? YD_ALGO_SHARED : (enum yd_algo)(it % YD_ALGO_COUNT));
		switch (kind) {
		case 0:
		case 1:
			rc = yd_allreduce(c, buf, buf, count, YD_F32, YD_SUM);
			break;
		case 2:
			rc = yd_reduce(c, buf, buf, count, YD_F32, YD_SUM, it % n);
			if (me != it % n)
				memcpy(buf, ref, count * sizeof *buf);
			break;
		case 3: {
			rc = yd_broadcast(c, buf, count, YD_F32, it % n);
			for (size_t i = 0; i < count; i++)
				ref[i] = (float)dpv_value(YD_SUM, it % n, i);
			break;
		}
		default:
			rc = yd_barrier(c);
			memcpy(buf, ref, count * sizeof *buf);
		}
		if (rc) {
			const char *msg = yd_comm_last_error(c);
			if (!strstr(msg, want) || (rc != YARD_EPEER && rc != YARD_ETIMEDOUT)) {
				fprintf(stderr, "rank %d: error does not name rank %d: rc=%d %s\n",
				        me, victim, rc, msg);
				return 1;
			}
			/* later operations fail at once with the same error */
			if (yd_barrier(c) != rc) {
				fprintf(stderr, "rank %d: failure was not sticky\n", me);
				return 1;
			}
			free(buf);
			free(ref);
			return 0;
		}
		DP_CHECK(memcmp(buf, ref, count * sizeof *buf) == 0,
		         "rank %d: wrong result reported as success (iteration %d)", me, it);
	}
}

static int kill_points(int kills)
{
	static const struct {
		int world;
		const char *transport, *hosts;
		int shared; /* every allreduce through the shared buffers */
	} groups[] = {{2, "shm", NULL, 0},     {3, "tcp", NULL, 0},    {4, "shm", NULL, 0},
	              {4, NULL, "a,a,b,b", 0}, {5, "tcp", NULL, 0},    {3, NULL, "x,y,x", 0},
	              {3, "shm", NULL, 1},     {4, NULL, "a,b,a,b", 1}};
	int bad = 0;
	for (int k = 0; k < kills; k++) {
		int g = k % (int)(sizeof groups / sizeof groups[0]), status[64];
		struct dp_spawn sp = {.world = groups[g].world,
		                      .transport = groups[g].transport,
		                      .hosts = groups[g].hosts,
		                      .timeout_ms = DEADLINE_MS,
		                      .wall_s = 30,
		                      .skip_rank = -1};
		sp.kill_rank = victim = rand() % sp.world;
		sp.kill_after_ms = 30 + rand() % 400;
		int failed =
		    dp_spawn_run(&sp, loop_body, groups[g].shared ? (void *)groups : NULL, status);
		long took = dp_spawn_last_kill_to_exit_ms;
		int slow = took > DEADLINE_MS + 1500;
		printf("%s kill %d: world=%d %s%s kill rank %d at %d ms: survivors done %ld ms "
		       "after\n",
		       failed || slow ? "FAIL" : "ok", k, sp.world,
		       groups[g].hosts ? groups[g].hosts : groups[g].transport,
		       groups[g].shared ? " (shared buffers)" : "", sp.kill_rank, sp.kill_after_ms,
		       took);
		fflush(stdout);
		bad += failed || slow;
	}
	return bad;
}

static int missing_body(yd_comm *c, void *arg)
{
	char want[32];
	snprintf(want, sizeof want, "rank %d", victim);
	if (c) {
		fprintf(stderr, "init succeeded without rank %d\n", victim);
		return 1;
	}
	if (!strstr((const char *)arg, want) || !strstr((const char *)arg, "missing")) {
		fprintf(stderr, "init error does not name missing rank %d: %s\n", victim,
		        (const char *)arg);
		return 1;
	}
	return 0;
}

static int missing_rank_rendezvous(void)
{
	int status[64];
	struct dp_spawn sp = {
	    .world = 4, .timeout_ms = 800, .wall_s = 20, .kill_rank = -1, .skip_rank = 2};
	victim = 2;
	uint64_t t0 = yard_now_mono_ms();
	int failed = dp_spawn_run(&sp, missing_body, NULL, status);
	printf("%s init with rank 2 missing (rendezvous file): %llu ms\n", failed ? "FAIL" : "ok",
	       (unsigned long long)(yard_now_mono_ms() - t0));
	return failed != 0;
}

/* Explicit endpoints: the parent reserves ports by binding port 0 (closing them again, so
 * another process could take one in between: acceptable for a test). */
static int missing_rank_peers(void)
{
	char peers[256] = "";
	int world = 3, fails = 0;
	victim = 1;
	for (int r = 0; r < world; r++) {
		struct sockaddr_in a = {.sin_family = AF_INET};
		socklen_t al = sizeof a;
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		bind(fd, (struct sockaddr *)&a, sizeof a);
		getsockname(fd, (struct sockaddr *)&a, &al);
		snprintf(peers + strlen(peers), sizeof peers - strlen(peers), "%s127.0.0.1:%d",
		         r ? "," : "", ntohs(a.sin_port));
		close(fd);
	}
	const char *eps[3];
	char *save, *copy = strdup(peers);
	eps[0] = strtok_r(copy, ",", &save);
	eps[1] = strtok_r(NULL, ",", &save);
	eps[2] = strtok_r(NULL, ",", &save);
	pid_t pid = fork();
	if (pid == 0) {
		char err[512];
		yd_comm *c;
		struct yd_config cfg = {
		    .rank = 2, .world_size = 3, .endpoints = eps, .timeout_ms = 700};
		int rc = yd_comm_init(&cfg, &c, err, sizeof err);
		_exit(rc == YARD_ETIMEDOUT && strstr(err, "rank 1 (host") ? 0 : 1);
	}
	char err[512];
	yd_comm *c = NULL;
	struct yd_config cfg = {.rank = 0, .world_size = 3, .endpoints = eps, .timeout_ms = 700};
	uint64_t t0 = yard_now_mono_ms();
	int rc = yd_comm_init(&cfg, &c, err, sizeof err);
	uint64_t took = yard_now_mono_ms() - t0;
	if (rc != YARD_ETIMEDOUT || !strstr(err, "rank 1 (host") || strstr(err, "rank 2 (host") ||
	    took > 3000) {
		fprintf(stderr, "init without rank 1: rc=%d after %llu ms: %s\n", rc,
		        (unsigned long long)took, err);
		fails++;
	}
	int st;
	waitpid(pid, &st, 0);
	fails += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	printf("%s init with rank 1 missing (peer list): %s\n", fails ? "FAIL" : "ok", err);
	free(copy);
	return fails;
}

static void *abort_later(void *arg)
{
	yard_sleep_ms(150);
	yd_comm_abort(arg);
	return NULL;
}

static int abort_body(yd_comm *c, void *arg)
{
	if (!c)
		return 1;
	int me = yd_comm_rank(c);
	char buf[64];
	if (me == 0) {
		pthread_t t;
		pthread_create(&t, NULL, abort_later, c);
		uint64_t t0 = yard_now_mono_ms();
		int rc = yd_recv(c, buf, sizeof buf, YD_I32, 1, 7);
		uint64_t took = yard_now_mono_ms() - t0;
		pthread_join(t, NULL);
		DP_CHECK(rc == YARD_EABORTED, "recv after abort returned %d (%s)", rc,
		         yd_comm_last_error(c));
		DP_CHECK(took < 1000, "abort took %llu ms", (unsigned long long)took);
		DP_CHECK(yd_barrier(c) == YARD_EABORTED, "later ops must fail");
		return 0;
	}
	/* the peer: its next operation fails, naming rank 0 */
	int rc = yd_recv(c, buf, 1, YD_I32, 0, 9);
	DP_CHECK(rc == YARD_EPEER && strstr(yd_comm_last_error(c), "rank 0"),
	         "peer of aborted rank: rc=%d %s", rc, yd_comm_last_error(c));
	return 0;
}

static int abort_from_thread(const char *transport)
{
	int status[4];
	struct dp_spawn sp = {.world = 2,
	                      .transport = transport,
	                      .timeout_ms = 5000,
	                      .wall_s = 20,
	                      .kill_rank = -1,
	                      .skip_rank = -1};
	int failed = dp_spawn_run(&sp, abort_body, NULL, status);
	printf("%s abort from another thread (%s)\n", failed ? "FAIL" : "ok", transport);
	return failed != 0;
}

static int mismatch_body(yd_comm *c, void *arg)
{
	/* a rank still finishing the communicator's creation (its calibration) when a faster
	 * rank finds the mismatch learns of it there: init fails with the mismatch reported */
	if (!c)
		return strstr((const char *)arg, "mismatch") != NULL ? 0 : 1;
	int me = yd_comm_rank(c), which = *(int *)arg, rc = 0;
	float buf[64] = {0};
	switch (which) {
	case 0: /* count */
		rc = yd_allreduce(c, buf, buf, me ? 12 : 10, YD_F32, YD_SUM);
		break;
	case 1: /* op */
		rc = yd_allreduce(c, buf, buf, 16, YD_F32, me ? YD_MAX : YD_SUM);
		break;
	case 2: /* dtype */
		rc = yd_allreduce(c, buf, buf, 16, me ? YD_I32 : YD_F32, YD_SUM);
		break;
	case 3: /* root: the extra root's messages are found by the next operation at the
	         * latest (a broadcast root receives nothing to compare) */
		rc = yd_broadcast(c, buf, 16, YD_F32, me == 1 ? 1 : 0);
		if (rc == 0)
			rc = yd_barrier(c);
		break;
	case 4: /* different collectives */
		rc = me ? yd_broadcast(c, buf, 16, YD_F32, 0)
		        : yd_allreduce(c, buf, buf, 16, YD_F32, YD_SUM);
		break;
	case 5: /* shared buffers, count: the staged headers differ */
		yd_comm_set_algo(c, YD_ALGO_SHARED);
		rc = yd_allreduce(c, buf, buf, me ? 12 : 10, YD_F32, YD_SUM);
		break;
	case 6: /* shared buffers on rank 0, a ring elsewhere: rank 0 finds a ring frame of
	         * this operation in its inbound ring, the others find rank 0 staging it */
		yd_comm_set_algo(c, me ? YD_ALGO_RING : YD_ALGO_SHARED);
		rc = yd_allreduce(c, buf, buf, 16, YD_F32, YD_SUM);
		break;
	case 8: /* shared-buffer allreduce on rank 0, a broadcast from rank 0 elsewhere: the
	         * broadcast's ranks, waiting for rank 0, find it staging this operation */
		yd_comm_set_algo(c, YD_ALGO_SHARED);
		rc = me ? yd_broadcast(c, buf, 16, YD_F32, 0)
		        : yd_allreduce(c, buf, buf, 16, YD_F32, YD_SUM);
		break;
	case 9:  /* a tree allreduce on rank 0 (its root: it receives first), a broadcast from
	          * rank 0 elsewhere (receiving first too): no message ever flows, each side finds
	          * the other's announced collective (over shm) or hears what the other waits in
	          * (over TCP: DP_NOTE_DOING) */
	case 10: /* the same between hosts */
		if (me == 0)
			yd_comm_set_algo(c, YD_ALGO_TREE);
		rc = me ? yd_broadcast(c, buf, 16, YD_F32, 0)
		        : yd_allreduce(c, buf, buf, 16, YD_F32, YD_SUM);
		break;
	default: /* shared-buffer allreduce on rank 0, a broadcast from rank 1 elsewhere: rank 0
	          * finds rank 1's frame; the broadcast's ranks learn it by their next operation */
		yd_comm_set_algo(c, YD_ALGO_SHARED);
		rc = me ? yd_broadcast(c, buf, 16, YD_F32, 1)
		        : yd_allreduce(c, buf, buf, 16, YD_F32, YD_SUM);
		if (rc == 0)
			rc = yd_barrier(c);
	}
	DP_CHECK(rc == YARD_EMISMATCH || rc == YARD_EPEER, "mismatch %d: rc=%d (%s)", which, rc,
	         yd_comm_last_error(c));
	DP_CHECK(strstr(yd_comm_last_error(c), "mismatch") != NULL, "mismatch %d: message: %s",
	         which, yd_comm_last_error(c));
	return 0;
}

static int mismatches(void)
{
	int bad = 0;
	/* 0-4 over both transports, 5-9 through the shared memory's buffers and announcements,
	 * 10 over TCP, where nothing is announced */
	for (int w = 0; w < 11; w++) {
		int status[4];
		struct dp_spawn sp = {.world = 3,
		                      .transport = (w % 2 && w < 5) || w == 10 ? "tcp" : "shm",
		                      .timeout_ms = 3000,
		                      .wall_s = 20,
		                      .kill_rank = -1,
		                      .skip_rank = -1};
		int failed = dp_spawn_run(&sp, mismatch_body, &w, status);
		printf("%s mismatch case %d detected\n", failed ? "FAIL" : "ok", w);
		bad += failed != 0;
	}
	return bad;
}

int main(void)
{
	const char *k = getenv("DP_FAULT_KILLS"), *seed = getenv("DP_FAULT_SEED");
	int kills = k ? atoi(k) : 24, bad = 0;
	unsigned s =
	    seed ? (unsigned)atoi(seed) : (unsigned)(yard_now_mono_ns() ^ (uint64_t)getpid());
	printf("seed %u (DP_FAULT_SEED to repeat)\n", s);
	srand(s);
	bad += missing_rank_rendezvous();
	bad += missing_rank_peers();
	bad += abort_from_thread("shm");
	bad += abort_from_thread("tcp");
	bad += mismatches();
	bad += kill_points(kills);
	printf("%d failures\n", bad);
	return bad ? 1 : 0;
}
