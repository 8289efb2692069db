/* fuzz_report.c: step reports from a rank's program (whatever it sends to the agent's socket)
 * through the agent (metrics_apply_line, then ranks_report, what its heartbeat carries) into
 * the leader's scheduler (sched_heartbeat of node-a, tests/unit/sched_world.h). The first
 * byte picks the job's straggler window (1..64 steps); every line after it is one datagram.
 * Property: whatever a rank sent, the leader accepts the agent's heartbeat (a refused
 * heartbeat leaves the node to go down with every job on it). */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/log.h"
#include "tests/fuzz/fuzz.h"
#include "tests/unit/sched_world.h"

#define LINES_MAX 256

static struct agent agent; /* large: static, not on the stack */

static void heartbeat(struct sched_world *w, int after_line)
{
	struct yard_err err = {0};
	json_t *body = json_pack("{s:s,s:o}", "node", "node-a", "ranks", ranks_report(&agent));
	json_t *answer = sched_heartbeat(w->sched, "node-a", body, &err);
	if (answer == NULL) {
		char *text = json_dumps(body, JSON_COMPACT);
		fuzz_fail("after line %d the leader refused the agent's heartbeat: %s (%s)",
		          after_line, err.msg, text ? text : "?");
	}
	json_decref(answer);
	json_decref(body);
}

FUZZ_LOG_LEVEL(YARD_LOG_ERROR) /* a line per refused report or new leader: noise */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	struct sched_world w;
	char why[256] = "";
	if (sched_world_init(&w, 100, why, sizeof why) != 0)
		fuzz_fail("%s", why);
	memset(&agent, 0, sizeof agent);
	struct agent_rank *r = &agent.ranks[0];
	r->in_use = 1;
	snprintf(r->job, sizeof r->job, "j-000001");
	r->generation = 1;
	r->pid = getpid();
	r->step = -1;
	json_t *spec = json_pack("{s:{s:{s:s,s:i}}}", "failure", "straggler", "policy", "report",
	                         "window_steps", 1 + data[0] % 64);
	metrics_set_window(r, spec);
	json_decref(spec);
	size_t at = 1;
	for (int k = 0; at < size && k < LINES_MAX; k++) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
		metrics_apply_line(&agent, getpid(), (const char *)data + at, len, NULL, 0);
		if (k % 16 == 0)
			heartbeat(&w, k);
		at += len + 1;
	}
	heartbeat(&w, -1);
	sched_world_close(&w);
	return 0;
}
