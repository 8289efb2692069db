/* yd_harness.c: see yd_harness.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/yd_harness.h"

static char g_killfile[512];

void harness_expect_kill(void)
{
	int fd = open(g_killfile, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) {
		char line[32];
		int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
		if (write(fd, line, (size_t)n) < 0)
			perror("write");
		close(fd);
	}
}

int harness_value(int rank, size_t i, int salt)
{
	return (int)((rank * 7u + i * 3u + (unsigned)salt * 5u) % 11u) - 5;
}

static int was_expected(pid_t pid)
{
	FILE *f = fopen(g_killfile, "r");
	int p, found = 0;
	if (!f)
		return 0;
	while (fscanf(f, "%d", &p) == 1)
		if (p == (int)pid)
			found = 1;
	fclose(f);
	return found;
}

int harness_run(const struct harness_opts *o, harness_fn fn, void *arg)
{
	char dir[] = "/tmp/yd-test-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return o->world;
	}
	char rdv[600], world_s[16], timeout_s[16];
	snprintf(rdv, sizeof rdv, "%s/rendezvous", dir);
	snprintf(g_killfile, sizeof g_killfile, "%s/killed", dir);
	snprintf(world_s, sizeof world_s, "%d", o->world);
	snprintf(timeout_s, sizeof timeout_s, "%d", o->timeout_ms ? o->timeout_ms : 2000);
	pid_t *pids = calloc((size_t)o->world, sizeof *pids);
	fflush(stdout);
	fflush(stderr);
	for (int r = 0; r < o->world; r++) {
		if (r == o->absent_rank && o->absent_rank >= 0)
			continue;
		pid_t pid = fork();
		if (pid == 0) {
			char rank_s[16];
			snprintf(rank_s, sizeof rank_s, "%d", r);
			setenv("YARD_RANK", rank_s, 1);
			setenv("YARD_WORLD_SIZE", world_s, 1);
			setenv("YARD_RENDEZVOUS_FILE", rdv, 1);
			setenv("YARD_TIMEOUT_MS", timeout_s, 1);
			setenv("YARD_ADDR", "127.0.0.1", 1);
			setenv("YARD_BIND", "127.0.0.1", 1);
			if (o->hosts)
				setenv("YARD_HOSTS", o->hosts, 1);
			if (o->transport)
				setenv("YARD_TRANSPORT", o->transport, 1);
			struct harness_rank h = {r, o->world, NULL, arg};
			if (!o->skip_init) {
				char err[1024];
				int rc = yd_comm_init_env(&h.comm, err, sizeof err);
				if (rc) {
					fprintf(stderr, "rank %d: init failed (%d): %s\n", r, rc,
					        err);
					_exit(2);
				}
			}
			int rc = fn(&h);
			if (h.comm)
				yd_comm_destroy(h.comm);
			_exit(rc ? 1 : 0);
		}
		pids[r] = pid;
	}
	int failed = 0, limit = o->wall_limit_s ? o->wall_limit_s : 120;
	time_t start = time(NULL);
	int left = 0;
	for (int r = 0; r < o->world; r++)
		left += pids[r] > 0;
	while (left > 0) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid == 0) {
			/* ranks that stopped themselves on purpose are killed once the rest exited
			 */
			int others = 0;
			for (int r = 0; r < o->world; r++)
				others += pids[r] > 0 && !was_expected(pids[r]);
			if (others == 0)
				for (int r = 0; r < o->world; r++)
					if (pids[r] > 0)
						kill(pids[r], SIGKILL);
			if (time(NULL) - start > limit) {
				fprintf(stderr,
				        "harness: ranks still running after %d s (hang): killing\n",
				        limit);
				for (int r = 0; r < o->world; r++)
					if (pids[r] > 0)
						kill(pids[r], SIGKILL);
				failed++;
				limit = 1 << 30;
			}
			struct timespec ts = {0, 2000000};
			nanosleep(&ts, NULL);
			continue;
		}
		if (pid < 0)
			break;
		for (int r = 0; r < o->world; r++)
			if (pids[r] == pid) {
				pids[r] = -1;
				left--;
				int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
				if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && was_expected(pid))
					ok = 1;
				if (!ok) {
					fprintf(stderr, "harness: rank %d failed (%s %d)\n", r,
					        WIFEXITED(st) ? "exit" : "signal",
					        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
					failed++;
				}
			}
	}
	unlink(rdv);
	unlink(g_killfile);
	rmdir(dir);
	free(pids);
	return failed;
}
