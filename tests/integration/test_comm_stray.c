/* test_comm_stray.c: connections that are not peers, arriving at the ranks' ports while a
 * communicator forms (a port scanner, a health check, another job's rank dialling a reused
 * port), do not keep the peers out. World 3 over TCP: ranks 0 and 1 start and wait for rank
 * 2; the test then opens 150 connections to each of their ports (first 100 that never send,
 * more than the spare slots, then garbage, handshakes with a wrong magic or world, ones that
 * close at once) and only then starts rank 2: every rank must form the communicator within
 * its deadline (the silent ones are dropped after 2 s) and sum correctly. Before the fix a
 * closed stray kept its slot and a silent one held it for good: init timed out. */
#include "config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "dataplane/dp.h"

#define WORLD 3
#define STRAYS 150
#define IDLE 100 /* the first strays to each port never send: more than the spare slots */

/* the handshake's layout (transport_tcp.c) */
struct hello {
	uint32_t magic, world;
	int32_t src, dst, idx, pid;
	uint64_t nonce;
};

static int rank_main(int rank, const char *rdv)
{
	char buf[32], err[512];
	snprintf(buf, sizeof buf, "%d", rank);
	setenv("YARD_RANK", buf, 1);
	snprintf(buf, sizeof buf, "%d", WORLD);
	setenv("YARD_WORLD_SIZE", buf, 1);
	setenv("YARD_RENDEZVOUS_FILE", rdv, 1);
	setenv("YARD_TRANSPORT", "tcp", 1);
	setenv("YARD_TIMEOUT_MS", "20000", 1);
	setenv("YARD_CALIBRATE", "0", 1);
	yd_comm *c = NULL;
	if (yd_comm_init_env(&c, err, sizeof err) != 0) {
		fprintf(stderr, "rank %d: init failed: %s\n", rank, err);
		return 1;
	}
	float v[1000];
	for (int i = 0; i < 1000; i++)
		v[i] = (float)(rank + 1);
	int rc = yd_allreduce(c, v, v, 1000, YD_F32, YD_SUM);
	for (int i = 0; rc == 0 && i < 1000; i++)
		if (v[i] != 6.0f)
			rc = 1;
	if (rc)
		fprintf(stderr, "rank %d: allreduce: %s\n", rank, rc == 1 ? "wrong sum" : "failed");
	yd_comm_destroy(c);
	return rc ? 1 : 0;
}

/* The ports ranks 0 and 1 wrote to the rendezvous file ("RANK HOST:PORT" lines). */
static int ports_of(const char *rdv, int port[2])
{
	FILE *f = fopen(rdv, "r");
	char line[256];
	int found = 0;
	port[0] = port[1] = 0;
	while (f && fgets(line, sizeof line, f)) {
		int r;
		char *colon = strrchr(line, ':');
		if (sscanf(line, "%d", &r) == 1 && r >= 0 && r < 2 && colon && !port[r]) {
			port[r] = atoi(colon + 1);
			found++;
		}
	}
	if (f)
		fclose(f);
	return found;
}

static int stray(int port, int kind)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	struct hello h = {DP_MAGIC, WORLD, 2, 0, 0, 1, 0};
	if (kind < IDLE) /* connects and says nothing */
		return fd;
	switch (kind % 4) {
	case 0: /* garbage */
		(void)!write(fd, "GET / HTTP/1.0\r\n\r\n", 18);
		return fd;
	case 1:
		h.magic ^= 1;
		(void)!write(fd, &h, sizeof h);
		return fd;
	case 2:
		h.world = 99;
		(void)!write(fd, &h, sizeof h);
		return fd;
	default: /* gone at once */
		close(fd);
		return -1;
	}
}

int main(void)
{
	char dir[] = "/tmp/test_comm_strayXXXXXX", rdv[64];
	if (!mkdtemp(dir))
		return 1;
	snprintf(rdv, sizeof rdv, "%s/rdv", dir);
	signal(SIGPIPE, SIG_IGN);
	pid_t pids[WORLD];
	for (int r = 0; r < 2; r++)
		if ((pids[r] = fork()) == 0)
			_exit(rank_main(r, rdv));
	int port[2];
	uint64_t t0 = yard_now_mono_ms();
	while (ports_of(rdv, port) < 2 && yard_now_mono_ms() - t0 < 10000)
		yard_sleep_ms(5);
	int bad = ports_of(rdv, port) < 2, fds[2 * STRAYS], nfds = 0;
	if (bad)
		fprintf(stderr, "ranks 0 and 1 did not write their ports\n");
	for (int i = 0; !bad && i < STRAYS; i++)
		for (int r = 0; r < 2; r++) {
			int fd = stray(port[r], i);
			if (fd >= 0)
				fds[nfds++] = fd;
		}
	if ((pids[2] = fork()) == 0)
		_exit(rank_main(2, rdv));
	for (int r = 0; r < WORLD; r++) {
		int st;
		waitpid(pids[r], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "rank %d failed (status 0x%x)\n", r, st);
			bad = 1;
		}
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	unlink(rdv);
	rmdir(dir);
	printf("%s 3 ranks formed their communicator past %d stray connections (%d still open "
	       "while they did) in %llu ms\n",
	       bad ? "FAIL" : "ok", 2 * STRAYS, nfds,
	       (unsigned long long)(yard_now_mono_ms() - t0));
	return bad;
}
