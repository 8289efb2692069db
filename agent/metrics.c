/* metrics.c: per-step metrics from the ranks. The agent binds a unix datagram socket at
 * DATA_DIR/agent.sock and passes its path to every rank as YARD_AGENT_SOCK; a rank sends
 * each per-step JSON line as one datagram. The kernel attaches the sender's pid
 * (SO_PASSCRED), so a rank cannot report for another and needs no identity in the line; a
 * line from another process of the rank's session (a command job's yard-report) counts as the
 * rank's. A sender with an address of its own (yard-report binds one; the built-in trainer
 * does not) gets one datagram back once its line has been attributed and applied: "ok", or
 * "refused: " and why. Attribution by session needs the sender alive, so yard-report waits
 * for that answer before it exits.
 *
 * For straggler detection (scheduler/straggler.h) the agent also summarises each rank's
 * compute_ms and comm_wait_ms per window of W steps (the job's failure.straggler.window_steps):
 * the medians over the window, so a slow step (a checkpoint, a page fault) does not count as a
 * slow rank. Only the summaries travel in heartbeats, a bounded few per rank, however fast
 * the steps are. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/common.h"
#include "common/stats.h"

void metrics_set_window(struct agent_rank *r, const json_t *spec)
{
	const json_t *st = json_object_get(json_object_get(spec, "failure"), "straggler");
	const char *policy = json_string_value(json_object_get(st, "policy"));
	int w = (int)json_integer_value(json_object_get(st, "window_steps"));
	if (policy == NULL || strcmp(policy, "off") == 0 || w < 1)
		w = 0;
	if (w == r->window_steps)
		return;
	r->window_steps = w;
	r->window_index = -1;
	r->window_seen = 0;
	r->n_windows = r->windows_next = 0;
}

static void window_close(struct agent_rank *r)
{
	int n = YARD_MIN(r->window_seen, AGENT_WINDOW_SAMPLES);
	struct agent_window *w = &r->windows[r->windows_next];
	if (r->window_index < 0 || n == 0)
		return;
	w->index = r->window_index;
	w->steps = r->window_seen;
	w->compute_ms = yard_median(r->window_compute_ms, (size_t)n);
	w->comm_wait_ms = yard_median(r->window_comm_wait_ms, (size_t)n);
	r->windows_next = (r->windows_next + 1) % AGENT_WINDOWS_KEPT;
	if (r->n_windows < AGENT_WINDOWS_KEPT)
		r->n_windows++;
}

/* Adds one step's sample; the first step of a later window closes the current one. A step
 * that goes back (a rank restored an older checkpoint) starts over from its window. */
static void window_add(struct agent_rank *r, int64_t step, double compute_ms, double comm_wait_ms)
{
	if (r->window_steps < 1 || step < 1)
		return;
	int64_t index = (step - 1) / r->window_steps;
	if (index != r->window_index) {
		if (index > r->window_index)
			window_close(r);
		r->window_index = index;
		r->window_seen = 0;
	}
	int slot = r->window_seen % AGENT_WINDOW_SAMPLES;
	r->window_compute_ms[slot] = compute_ms;
	r->window_comm_wait_ms[slot] = comm_wait_ms;
	/* a step reported over and over stays in its window: bounded as the controller
	 * bounds a window's count */
	if (r->window_seen < AGENT_WINDOW_REPORTS_MAX)
		r->window_seen++;
	/* the window's last step closes it at once rather than one step later */
	if (step % r->window_steps == 0) {
		window_close(r);
		r->window_index = index + 1;
		r->window_seen = 0;
	}
}

json_t *metrics_windows_json(const struct agent_rank *r)
{
	json_t *arr = json_array();
	for (int k = 0; k < r->n_windows; k++) {
		int at =
		    (r->windows_next - r->n_windows + k + AGENT_WINDOWS_KEPT) % AGENT_WINDOWS_KEPT;
		const struct agent_window *w = &r->windows[at];
		json_array_append_new(arr,
		                      json_pack("{s:I,s:i,s:f,s:f}", "index", (json_int_t)w->index,
		                                "steps", w->steps, "compute_ms", w->compute_ms,
		                                "comm_wait_ms", w->comm_wait_ms));
	}
	return arr;
}

#define METRICS_FD_ENV "YARD_AGENT_METRICS_FD"

/* What the controller accepts of a rank's report in a heartbeat (scheduler/leader.c,
 * clean_reports): a value outside makes it refuse the node's whole heartbeat, and a node
 * whose heartbeats are refused goes down with every job on it. A step stays within 2^53,
 * where JSON readers that hold numbers as doubles (the dashboard) still count exactly. */
#define REPORT_STEP_MAX (INT64_C(1) << 53)
#define REPORT_LOSS_MAX 1e300
#define REPORT_MS_MAX 1e9
/* bad lines logged per rank; later ones are dropped without a message */
#define REPORT_BAD_LOGGED 8

/* NULL when the line can stand in a heartbeat, else what is wrong with it. */
static const char *report_problem(const json_t *j, char *why, size_t why_len)
{
	static const char *const timings[] = {"step_ms", "compute_ms", "comm_wait_ms"};
	if (!json_is_object(j))
		return "not one JSON object";
	const json_t *step = json_object_get(j, "step"), *loss = json_object_get(j, "loss");
	if (step != NULL && (!json_is_integer(step) || json_integer_value(step) < 0 ||
	                     json_integer_value(step) > REPORT_STEP_MAX)) {
		snprintf(why, why_len, "step: must be an integer from 0 to 2^53");
		return why;
	}
	if (loss != NULL && !json_is_null(loss) &&
	    (!json_is_number(loss) || !(fabs(json_number_value(loss)) <= REPORT_LOSS_MAX))) {
		snprintf(why, why_len, "loss: must be a number within +-1e300");
		return why;
	}
	for (size_t i = 0; i < sizeof timings / sizeof timings[0]; i++) {
		const json_t *v = json_object_get(j, timings[i]);
		if (v != NULL && !json_is_null(v) &&
		    (!json_is_number(v) || !(json_number_value(v) >= 0) ||
		     json_number_value(v) > REPORT_MS_MAX)) {
			snprintf(why, why_len, "%s: must be a number from 0 to 1e9", timings[i]);
			return why;
		}
	}
	return NULL;
}

int metrics_apply_line(struct agent *a, pid_t sender, const char *line, size_t len, char *why,
                       size_t why_len)
{
	struct agent_rank *r = ranks_find_pid(a, sender);
	json_t *j, *step;
	char detail[96];
	const char *problem;
	pid_t sid = 0;

	/* A command job reports through a helper it runs (yard-report): any process in the
	 * rank's session (ranks are session leaders, so the session id is the rank's pid). */
	if (r == NULL) {
		sid = getsid(sender);
		if (sid > 0)
			r = ranks_find_pid(a, sid);
	}
	if (r == NULL) {
		if (why != NULL && sid < 0)
			snprintf(why, why_len, "pid %d is not a rank of this agent and is gone",
			         (int)sender);
		else if (why != NULL)
			snprintf(why, why_len,
			         "pid %d is not a rank of this agent nor in a rank's session (its "
			         "session: %d)",
			         (int)sender, (int)sid);
		return YARD_ENOTFOUND;
	}
	j = jsonx_loadb(line, len, 0, NULL);
	problem = j == NULL ? "not JSON" : report_problem(j, detail, sizeof detail);
	if (problem != NULL) {
		json_decref(j);
		if (why != NULL)
			snprintf(why, why_len, "%s", problem);
		if (r->bad_reports < REPORT_BAD_LOGGED)
			log_warn("rank %d of %s (generation %lld): report dropped: %s%s", r->rank,
			         r->job, (long long)r->generation, problem,
			         r->bad_reports + 1 == REPORT_BAD_LOGGED
			             ? " (its later bad reports are dropped without a message)"
			             : "");
		r->bad_reports++;
		return YARD_EINVAL;
	}
	step = json_object_get(j, "step");
	if (json_is_integer(step)) {
		r->step = json_integer_value(step);
		r->loss = json_number_value(json_object_get(j, "loss"));
		r->step_ms = json_number_value(json_object_get(j, "step_ms"));
		r->compute_ms = json_number_value(json_object_get(j, "compute_ms"));
		r->comm_wait_ms = json_number_value(json_object_get(j, "comm_wait_ms"));
		r->last_step_mono_ms = yard_now_mono_ms();
		if (json_is_number(json_object_get(j, "compute_ms")))
			window_add(r, r->step, r->compute_ms, r->comm_wait_ms);
	}
	json_decref(j);
	return 0;
}

static void on_readable(uv_poll_t *poll, int status, int events)
{
	struct agent *a = poll->data;
	for (int i = 0; i < 256; i++) {
		char buf[4096];
		char control[CMSG_SPACE(sizeof(struct ucred))];
		char answer[160] = "ok";
		struct sockaddr_un from;
		struct iovec iov = {buf, sizeof buf};
		struct msghdr msg = {0};
		struct cmsghdr *cm;
		pid_t sender = 0;
		ssize_t n;

		msg.msg_name = &from;
		msg.msg_namelen = sizeof from;
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = control;
		msg.msg_controllen = sizeof control;
		n = recvmsg(a->metrics_fd, &msg, MSG_DONTWAIT);
		if (n < 0)
			return;
		for (cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS) {
				struct ucred cred;
				memcpy(&cred, CMSG_DATA(cm), sizeof cred);
				sender = cred.pid;
			}
		if (sender <= 0)
			continue;
		char why[128];
		if (metrics_apply_line(a, sender, buf, (size_t)n, why, sizeof why) != 0)
			snprintf(answer, sizeof answer, "refused: %s", why);
		/* an unbound sender (the trainer's connected socket) has no address to answer;
		 * a sender that went away or stopped reading just misses its answer */
		if (msg.msg_namelen > offsetof(struct sockaddr_un, sun_path))
			sendto(a->metrics_fd, answer, strlen(answer), MSG_DONTWAIT,
			       (struct sockaddr *)&from, msg.msg_namelen);
	}
}

/* The socket an agent that exec'd us (an upgrade, or the guardian's rollback) handed over
 * in YARD_AGENT_METRICS_FD: ranks keep sending to the very socket they connected to (the
 * built-in trainer connects once), and what they sent during the exec is still queued. */
static int metrics_inherited(const char *path)
{
	const char *text = getenv(METRICS_FD_ENV);
	struct sockaddr_un bound = {0};
	socklen_t len = sizeof bound;
	char *end;
	if (text == NULL)
		return -1;
	long fd = strtol(text, &end, 10);
	unsetenv(METRICS_FD_ENV);
	if (*end != '\0' || fd < 3 || fd > 65535 ||
	    getsockname((int)fd, (struct sockaddr *)&bound, &len) != 0 ||
	    bound.sun_family != AF_UNIX || strcmp(bound.sun_path, path) != 0) {
		log_warn("%s=%s is not the socket %s: binding a new one", METRICS_FD_ENV, text,
		         path);
		return -1;
	}
	fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	return (int)fd;
}

int metrics_handover(const struct agent *a)
{
	char text[16];
	if (a->metrics_fd < 0)
		return YARD_EINVAL;
	snprintf(text, sizeof text, "%d", a->metrics_fd);
	if (fcntl(a->metrics_fd, F_SETFD, 0) != 0 || setenv(METRICS_FD_ENV, text, 1) != 0)
		return YARD_EIO;
	return 0;
}

int metrics_open(struct agent *a)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int one = 1;

	snprintf(a->metrics_path, sizeof a->metrics_path, "%s/agent.sock", a->cfg.data_dir);
	if (strlen(a->metrics_path) >= sizeof addr.sun_path) {
		log_error("metrics socket path %s is too long for a unix socket", a->metrics_path);
		return YARD_EINVAL;
	}
	strcpy(addr.sun_path, a->metrics_path);
	a->metrics_fd = metrics_inherited(a->metrics_path);
	if (a->metrics_fd >= 0) {
		log_info("metrics socket %s kept across the exec", a->metrics_path);
		goto poll;
	}
	unlink(a->metrics_path);
	a->metrics_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (a->metrics_fd < 0 ||
	    setsockopt(a->metrics_fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0 ||
	    bind(a->metrics_fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		log_error("cannot bind metrics socket %s: %s", a->metrics_path, strerror(errno));
		return YARD_EIO;
	}
poll:
	uv_poll_init(a->loop, &a->metrics_poll, a->metrics_fd);
	a->metrics_poll.data = a;
	uv_poll_start(&a->metrics_poll, UV_READABLE, on_readable);
	return 0;
}

void metrics_close(struct agent *a)
{
	if (a->metrics_fd >= 0) {
		uv_poll_stop(&a->metrics_poll);
		uv_close((uv_handle_t *)&a->metrics_poll, NULL);
		close(a->metrics_fd);
		a->metrics_fd = -1;
	}
}
