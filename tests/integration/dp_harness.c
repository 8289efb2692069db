/* dp_harness.c: fork N ranks on 127.0.0.1, rendezvous through a temp file, run, reap. */
#include "config.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/integration/dp_harness.h"

long dp_spawn_last_kill_to_exit_ms;

int dp_spawn_run(const struct dp_spawn *sp, dp_rank_fn fn, void *arg, int *status)
{
	char dir[] = "/tmp/yd-test-XXXXXX", file[64], buf[32];
	pid_t pids[64];
	int failed = 0, live = 0, ready = 0, ready_pipe[2];
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return sp->world;
	}
	snprintf(file, sizeof file, "%s/rdv", dir);
	/* each rank writes one byte here once its communicator is up: kill points count from
	 * then, so a loaded machine's slow start never turns a kill into an init failure */
	if (pipe(ready_pipe) != 0) {
		perror("pipe");
		return sp->world;
	}
	fcntl(ready_pipe[0], F_SETFL, O_NONBLOCK);
	fflush(stdout);
	fflush(stderr);
	for (int r = 0; r < sp->world; r++) {
		pids[r] = -1;
		if (r == sp->skip_rank)
			continue;
		pid_t pid = fork();
		if (pid == 0) {
			char err[512];
			yd_comm *c = NULL;
			snprintf(buf, sizeof buf, "%d", r);
			setenv("YARD_RANK", buf, 1);
			snprintf(buf, sizeof buf, "%d", sp->world);
			setenv("YARD_WORLD_SIZE", buf, 1);
			setenv("YARD_RENDEZVOUS_FILE", file, 1);
			snprintf(buf, sizeof buf, "%d", sp->timeout_ms ? sp->timeout_ms : 10000);
			setenv("YARD_TIMEOUT_MS", buf, 1);
			if (sp->hosts)
				setenv("YARD_HOSTS", sp->hosts, 1);
			if (sp->transport)
				setenv("YARD_TRANSPORT", sp->transport, 1);
			int rc = yd_comm_init_env(&c, err, sizeof err);
			if (rc) {
				if (arg == NULL && fn == NULL)
					_exit(0);
				/* the body decides whether init failing is expected */
				if (fn)
					rc = fn(NULL, err);
				if (rc)
					fprintf(stderr, "rank %d: communicator init failed: %s\n", r,
					        err);
				_exit(rc ? 1 : 0);
			}
			close(ready_pipe[0]);
			if (write(ready_pipe[1], "r", 1) != 1)
				_exit(1);
			close(ready_pipe[1]);
			rc = fn(c, arg);
			yd_comm_destroy(c);
			_exit(rc ? 1 : 0);
		}
		pids[r] = pid;
		live++;
	}
	close(ready_pipe[1]);
	uint64_t start = yard_now_mono_ms(), killed_at = 0, last_exit = 0, all_ready_at = 0;
	int expected = sp->world - (sp->skip_rank >= 0 && sp->skip_rank < sp->world);
	for (int r = 0; r < sp->world; r++)
		status[r] = 0;
	while (live > 0) {
		uint64_t now = yard_now_mono_ms();
		char bytes[64];
		ssize_t got = read(ready_pipe[0], bytes, sizeof bytes);
		if (got > 0) {
			ready += (int)got;
			if (ready >= expected && !all_ready_at)
				all_ready_at = now;
		}
		if (sp->kill_rank >= 0 && !killed_at && all_ready_at &&
		    now - all_ready_at >= (uint64_t)sp->kill_after_ms && pids[sp->kill_rank] > 0) {
			kill(pids[sp->kill_rank], SIGKILL);
			killed_at = now;
		}
		if (now - start > (uint64_t)sp->wall_s * 1000) {
			for (int r = 0; r < sp->world; r++)
				if (pids[r] > 0) {
					fprintf(
					    stderr,
					    "harness: rank %d still running after %d s: killing\n",
					    r, sp->wall_s);
					kill(pids[r], SIGKILL);
				}
		}
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p <= 0) {
			yard_sleep_ms(2);
			continue;
		}
		for (int r = 0; r < sp->world; r++)
			if (pids[r] == p) {
				pids[r] = -1;
				live--;
				status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
				if (r != sp->kill_rank && status[r] != 0)
					failed++;
				if (r != sp->kill_rank)
					last_exit = yard_now_mono_ms();
			}
	}
	dp_spawn_last_kill_to_exit_ms =
	    killed_at && last_exit > killed_at ? (long)(last_exit - killed_at) : 0;
	close(ready_pipe[0]);
	unlink(file);
	rmdir(dir);
	return failed;
}

static const char *refused_want; /* set before the fork: the children inherit it */

static int refused_body(yd_comm *c, void *err)
{
	if (c) {
		fprintf(stderr, "a communicator was created although init should fail naming %s\n",
		        refused_want);
		return 1;
	}
	if (!strstr((const char *)err, refused_want)) {
		fprintf(stderr, "init error does not name %s: %s\n", refused_want,
		        (const char *)err);
		return 1;
	}
	return 0;
}

int dp_spawn_refused(const struct dp_spawn *sp, const char *want, int *status)
{
	refused_want = want;
	return dp_spawn_run(sp, refused_body, NULL, status);
}
