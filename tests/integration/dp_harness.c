/* dp_harness.c: fork N ranks on 127.0.0.1, rendezvous through a temp file, run, reap. */
#include "config.h"

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
	int failed = 0, live = 0;
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return sp->world;
	}
	snprintf(file, sizeof file, "%s/rdv", dir);
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
				_exit(rc ? 1 : 0);
			}
			rc = fn(c, arg);
			yd_comm_destroy(c);
			_exit(rc ? 1 : 0);
		}
		pids[r] = pid;
		live++;
	}
	uint64_t start = yard_now_mono_ms(), killed_at = 0, last_exit = 0;
	for (int r = 0; r < sp->world; r++)
		status[r] = 0;
	while (live > 0) {
		uint64_t now = yard_now_mono_ms();
		if (sp->kill_rank >= 0 && !killed_at &&
		    now - start >= (uint64_t)sp->kill_after_ms && pids[sp->kill_rank] > 0) {
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
	unlink(file);
	rmdir(dir);
	return failed;
}
