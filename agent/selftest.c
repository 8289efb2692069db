/* selftest.c: `yard-agent --self-test [--node NAME]`, the data-plane check a new build must pass on
 * a node before the running agent execs it (upgrade.c), and that a rollout's health gate relies on.
 *
 * For each transport this node's ranks use between themselves and with other nodes (shared
 * memory and TCP), two ranks are forked, meet through a rendezvous file on 127.0.0.1 (each
 * picks its own free port), and run an allreduce through libyd whose result is checked
 * element by element. Exit status 0 when every transport passed, 1 otherwise; one line per
 * transport on stdout, the reason of a failure on stderr. It needs no controller and changes
 * nothing on the node. Every wait is bounded (SELFTEST_TIMEOUT_MS per transport). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/common.h"
#include "dataplane/yd.h"

#define SELFTEST_RANKS 2
#define SELFTEST_COUNT (1 << 18) /* floats per rank: 1 MiB, enough to pipeline chunks */
#define SELFTEST_TIMEOUT_MS 20000

/* Rank r contributes (r + 1) * (i % 97): the sum over ranks is known in closed form. */
static int rank_body(int rank, const char *rendezvous, const char *transport, char *why,
                     size_t why_len)
{
	char buf[32], err[512];
	yd_comm *c = NULL;
	snprintf(buf, sizeof buf, "%d", rank);
	setenv("YARD_RANK", buf, 1);
	snprintf(buf, sizeof buf, "%d", SELFTEST_RANKS);
	setenv("YARD_WORLD_SIZE", buf, 1);
	setenv("YARD_RENDEZVOUS_FILE", rendezvous, 1);
	snprintf(buf, sizeof buf, "%d", SELFTEST_TIMEOUT_MS / 2);
	setenv("YARD_TIMEOUT_MS", buf, 1);
	setenv("YARD_TRANSPORT", transport, 1);
	unsetenv("YARD_PEERS");
	unsetenv("YARD_HOSTS");
	unsetenv("YARD_ALGO");
	/* as the trainer's ranks: no calibration, whose collectives only make a loaded node
	 * slower to pass (worker.c) */
	setenv("YARD_CALIBRATE", "0", 1);
	if (yd_comm_init_env(&c, err, sizeof err) != 0) {
		snprintf(why, why_len, "communicator: %s", err);
		return -1;
	}
	float *data = malloc(SELFTEST_COUNT * sizeof *data);
	int rc = -1;
	if (data == NULL) {
		snprintf(why, why_len, "no memory for %d floats", SELFTEST_COUNT);
		goto out;
	}
	for (int i = 0; i < SELFTEST_COUNT; i++)
		data[i] = (float)((rank + 1) * (i % 97));
	if (yd_allreduce(c, data, data, SELFTEST_COUNT, YD_F32, YD_SUM) != 0) {
		snprintf(why, why_len, "allreduce: %s", yd_comm_last_error(c));
		goto out;
	}
	for (int i = 0; i < SELFTEST_COUNT; i++) {
		float want = (float)(3 * (i % 97)); /* (1 + 2) * (i % 97) */
		if (data[i] != want) {
			snprintf(why, why_len, "allreduce: element %d is %g, want %g", i,
			         (double)data[i], (double)want);
			goto out;
		}
	}
	if (yd_comm_transport(c, 1 - rank) != (enum yd_transport)yd_transport_parse(transport)) {
		snprintf(why, why_len, "peer reached over %s, not %s",
		         yd_transport_name(yd_comm_transport(c, 1 - rank)), transport);
		goto out;
	}
	rc = 0;
out:
	free(data);
	yd_comm_destroy(c);
	return rc;
}

/* Runs one transport's check; 0 on success, else the reason in why. */
static int check_transport(const char *transport, char *why, size_t why_len)
{
	char dir[] = "/tmp/yard-selftest-XXXXXX", rendezvous[64];
	pid_t pids[SELFTEST_RANKS];
	int pipes[SELFTEST_RANKS][2];
	int failed = 0;
	if (mkdtemp(dir) == NULL) {
		snprintf(why, why_len, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(rendezvous, sizeof rendezvous, "%s/rdv", dir);
	fflush(stdout);
	fflush(stderr);
	for (int r = 0; r < SELFTEST_RANKS; r++) {
		if (pipe(pipes[r]) != 0) {
			snprintf(why, why_len, "pipe: %s", strerror(errno));
			return -1;
		}
		pids[r] = fork();
		if (pids[r] == 0) {
			char msg[600] = "";
			close(pipes[r][0]);
			int rc = rank_body(r, rendezvous, transport, msg, sizeof msg);
			if (rc != 0 && write(pipes[r][1], msg, strlen(msg)) < 0)
				_exit(2);
			_exit(rc != 0 ? 1 : 0);
		}
		close(pipes[r][1]);
		if (pids[r] < 0) {
			snprintf(why, why_len, "fork: %s", strerror(errno));
			return -1;
		}
	}
	uint64_t deadline = yard_now_mono_ms() + SELFTEST_TIMEOUT_MS;
	for (int r = 0; r < SELFTEST_RANKS; r++) {
		int status = 0;
		pid_t got;
		while ((got = waitpid(pids[r], &status, WNOHANG)) == 0 &&
		       yard_now_mono_ms() < deadline)
			yard_sleep_ms(5);
		if (got == 0) {
			kill(pids[r], SIGKILL);
			waitpid(pids[r], &status, 0);
			if (!failed)
				snprintf(why, why_len, "rank %d did not finish within %d ms", r,
				         SELFTEST_TIMEOUT_MS);
			failed = 1;
		} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			char msg[600];
			ssize_t n = read(pipes[r][0], msg, sizeof msg - 1);
			msg[n > 0 ? n : 0] = '\0';
			if (!failed)
				snprintf(why, why_len, "rank %d: %s", r,
				         msg[0] ? msg : "exited abnormally");
			failed = 1;
		}
		close(pipes[r][0]);
	}
	unlink(rendezvous);
	rmdir(dir);
	return failed ? -1 : 0;
}

int selftest_main(int argc, char **argv)
{
	static const char *const transports[] = {"shm", "tcp"};
	char version[32];
	int failed = 0;
	const char *node = NULL;
	if (argc == 4 && strcmp(argv[2], "--node") == 0) {
		node = argv[3];
	} else if (argc != 2) {
		fprintf(stderr, "usage: yard-agent --self-test [--node NAME]\n");
		return 2;
	}
	buildinfo_version(version, sizeof version);
	if (buildinfo_fault(node) == BUILD_FAULT_SELF_TEST) {
		fprintf(stderr,
		        "yard-agent %s self-test: failed on purpose (a build marked with "
		        "the self-test fault by scripts/mark-build)\n",
		        version);
		return 1;
	}
	/* the agent reports the last line of this output: successes are printed (and flushed)
	 * as they come, failures after them */
	char why[YARD_ARRAY_LEN(transports)][700];
	for (size_t i = 0; i < YARD_ARRAY_LEN(transports); i++) {
		uint64_t t0 = yard_now_mono_ms();
		why[i][0] = '\0';
		if (check_transport(transports[i], why[i], sizeof why[i]) != 0) {
			failed = 1;
			if (!why[i][0])
				snprintf(why[i], sizeof why[i], "failed");
			continue;
		}
		printf("yard-agent %s self-test: %s allreduce of %d floats over %d ranks ok "
		       "(%llu ms)\n",
		       version, transports[i], SELFTEST_COUNT, SELFTEST_RANKS,
		       (unsigned long long)(yard_now_mono_ms() - t0));
		fflush(stdout);
	}
	for (size_t i = 0; i < YARD_ARRAY_LEN(transports); i++)
		if (why[i][0])
			fprintf(stderr, "yard-agent %s self-test: %s allreduce failed: %s\n",
			        version, transports[i], why[i]);
	return failed ? 1 : 0;
}
