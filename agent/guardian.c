/* guardian.c: `yard-agent --upgrade-guardian DATA_DIR AGENT_PID GATE_MS VERSION -- ARGV...`,
 * the watcher that returns a node to its previous build when a new one does not come up
 * (the design is in upgrade.c's top comment).
 *
 * Started by the agent from its current, known-good binary right before it execs the new
 * build, so AGENT_PID is its parent. It polls, every GUARDIAN_POLL_MS and for at most GATE_MS:
 * DATA_DIR/upgrade.healthy naming VERSION ends it (exit 0: the upgrade is done). Its parent
 * changing means the agent process ended (the new build crashed); GATE_MS passing means the
 * new build runs without ever getting a heartbeat through, and the guardian SIGKILLs it (the
 * agent process only: ranks have their own sessions). Either way it records "rolled-back"
 * and why in DATA_DIR/upgrade.json, then execs ARGV (the previous binary with the agent's
 * arguments) and so becomes the node's agent; that agent re-adopts the ranks. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/common.h"

#define GUARDIAN_POLL_MS 50
#define GUARDIAN_KILL_WAIT_MS 5000

static int marker_names(const char *path, const char *version)
{
	char buf[64] = "";
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strcmp(buf, version) == 0;
}

int guardian_main(int argc, char **argv)
{
	char marker[PATH_MAX + 32], reason[300], *end;
	if (argc < 8 || strcmp(argv[6], "--") != 0) {
		fprintf(stderr, "usage: yard-agent --upgrade-guardian DATA_DIR AGENT_PID GATE_MS "
		                "VERSION -- BINARY ARGS...\n");
		return 2;
	}
	const char *data_dir = argv[2], *version = argv[5];
	long agent_pid = strtol(argv[3], &end, 10);
	long gate_ms = *end == '\0' ? strtol(argv[4], &end, 10) : -1;
	if (agent_pid <= 1 || gate_ms <= 0 || *end != '\0') {
		fprintf(stderr,
		        "yard-agent --upgrade-guardian: bad AGENT_PID '%s' or GATE_MS '%s'\n",
		        argv[3], argv[4]);
		return 2;
	}
	yard_log_init("yard-agent guardian");
	snprintf(marker, sizeof marker, "%s/upgrade.healthy", data_dir);
	uint64_t deadline = yard_now_mono_ms() + (uint64_t)gate_ms;
	for (;;) {
		if (marker_names(marker, version))
			return 0;
		if (getppid() != (pid_t)agent_pid) {
			snprintf(
			    reason, sizeof reason,
			    "the new agent %s (pid %ld) ended before its first healthy heartbeat",
			    version, agent_pid);
			break;
		}
		if (yard_now_mono_ms() >= deadline) {
			snprintf(
			    reason, sizeof reason,
			    "the new agent %s (pid %ld) sent no healthy heartbeat within %.1f s",
			    version, agent_pid, (double)gate_ms / 1000);
			kill((pid_t)agent_pid, SIGKILL);
			uint64_t wait_until = yard_now_mono_ms() + GUARDIAN_KILL_WAIT_MS;
			while (getppid() == (pid_t)agent_pid && yard_now_mono_ms() < wait_until)
				yard_sleep_ms(10);
			break;
		}
		yard_sleep_ms(GUARDIAN_POLL_MS);
	}
	struct agent_upgrade up;
	if (upgrade_state_load(data_dir, &up) != 0)
		memset(&up, 0, sizeof up);
	up.state = UPGRADE_ROLLED_BACK;
	up.guardian_pid = 0;
	snprintf(up.error, sizeof up.error, "%s; back on %s", reason,
	         up.previous_version[0] ? up.previous_version : "the previous build");
	upgrade_refuse(&up);
	upgrade_state_save(data_dir, &up);
	log_warn("%s: rolling back to %s (%s)", reason, up.previous_version, argv[7]);
	fflush(stdout);
	fflush(stderr);
	execv(argv[7], argv + 7);
	log_error("exec %s: %s: the node has no agent", argv[7], strerror(errno));
	return 1;
}
