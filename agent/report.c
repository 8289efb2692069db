/* report.c: yard-report, how a command job tells its agent about training progress.
 *
 *   yard-report STEP [LOSS]      sends {"step": STEP, "loss": LOSS}
 *   yard-report --json LINE      sends LINE as it is (one JSON object, see docs/api.md)
 *
 * The line goes as one datagram to the agent's unix socket ($YARD_AGENT_SOCK), which the
 * agent attributes to the rank whose session the sender belongs to. The agent can tell whose
 * session a sender is in only while the sender is alive, so yard-report binds an address of
 * its own and waits for the agent's answer, sent once the line has been attributed and
 * applied: "ok", or "refused: " and why. The agent says it answers by setting
 * YARD_AGENT_ANSWERS=1 in its ranks' environment. Without it (a rank of an agent from before
 * answers existed), the report counts as delivered once the agent has read it (the datagram
 * stops being charged to the sender, SIOCOUTQ 0); with it, when no answer came within 1 s of
 * the read (an agent rolled back to such a build under a running rank).
 *
 * An agent restarting into a new build keeps its socket across the exec and reads the
 * queued line once it is up again, which can take seconds on a loaded machine (the leader
 * allows a restart 10 s by default): a line sent but not read is awaited for 15 s. (A socket
 * nobody holds refuses the datagram at once.)
 *
 * Exit status: 0 delivered, 1 bad arguments, 2 no agent socket, 3 not sent within 5 s (the
 * agent's queue full) or not read within 15 s, 4 refused by the agent (the reason on
 * stderr). */
#include <errno.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* how long a line sent is awaited while the agent has not read it (see above) */
#define REPORT_READ_WAIT_MS 15000

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int usage(void)
{
	fprintf(stderr,
	        "usage: yard-report STEP [LOSS] | yard-report --json '{\"step\": N, ...}'\n");
	return 1;
}

int main(int argc, char **argv)
{
	char line[4096];
	const char *sock_path = getenv("YARD_AGENT_SOCK");
	struct sockaddr_un addr = {.sun_family = AF_UNIX};

	if (argc == 3 && strcmp(argv[1], "--json") == 0) {
		if (strlen(argv[2]) >= sizeof line)
			return usage();
		snprintf(line, sizeof line, "%s", argv[2]);
	} else if (argc == 2 || argc == 3) {
		char *end;
		long long step = strtoll(argv[1], &end, 10);
		if (*end != '\0' || step < 0)
			return usage();
		if (argc == 3) {
			double loss = strtod(argv[2], &end);
			if (*end != '\0')
				return usage();
			snprintf(line, sizeof line, "{\"step\":%lld,\"loss\":%.9g}", step, loss);
		} else {
			snprintf(line, sizeof line, "{\"step\":%lld}", step);
		}
	} else {
		return usage();
	}
	if (sock_path == NULL || strlen(sock_path) >= sizeof addr.sun_path) {
		fprintf(stderr,
		        "yard-report: YARD_AGENT_SOCK is not set (not started by yard-agent?)\n");
		return 2;
	}
	strcpy(addr.sun_path, sock_path);
	/* an address of our own (autobind: an abstract name the kernel picks) for the answer */
	struct sockaddr_un own = {.sun_family = AF_UNIX};
	/* a stalled agent whose queue is full blocks the send: 5 s at most */
	struct timeval send_limit = {5, 0};
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&own, sizeof own.sun_family) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_limit, sizeof send_limit) != 0) {
		fprintf(stderr, "yard-report: socket: %s\n", strerror(errno));
		return 2;
	}
	if (sendto(fd, line, strlen(line), 0, (struct sockaddr *)&addr, sizeof addr) < 0) {
		int full = errno == EAGAIN || errno == EWOULDBLOCK;
		fprintf(stderr, "yard-report: %s: %s\n", sock_path,
		        full ? "the agent's queue stayed full for 5 s" : strerror(errno));
		return full ? 3 : 2;
	}
	const char *answers_env = getenv("YARD_AGENT_ANSWERS");
	bool answers = answers_env != NULL && strcmp(answers_env, "1") == 0;
	/* 1 ms polls: up to REPORT_READ_WAIT_MS for the answer; once the line was read, up to
	 * 1 s */
	long start = now_ms();
	for (long waited = 0, read_at = -1; waited < REPORT_READ_WAIT_MS;
	     waited = now_ms() - start) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		char answer[256];
		int queued = 0;
		if (poll(&p, 1, 1) > 0) {
			struct sockaddr_un from = {0};
			socklen_t from_len = sizeof from;
			ssize_t n = recvfrom(fd, answer, sizeof answer - 1, 0,
			                     (struct sockaddr *)&from, &from_len);
			/* an answer counts only from the agent's own socket */
			if (n < 0 || from_len <= offsetof(struct sockaddr_un, sun_path) ||
			    strncmp(from.sun_path, addr.sun_path, sizeof from.sun_path) != 0)
				continue;
			answer[n] = '\0';
			close(fd);
			if (strcmp(answer, "ok") == 0)
				return 0;
			fprintf(stderr, "yard-report: the agent %s\n", answer);
			return 4;
		}
		/* (a kernel that cannot tell counts as read, as before answers existed) */
		if (read_at < 0 && (ioctl(fd, SIOCOUTQ, &queued) != 0 || queued == 0))
			read_at = waited;
		if (read_at >= 0 && (!answers || waited - read_at >= 1000))
			break;
	}
	int queued = 0;
	bool was_read = ioctl(fd, SIOCOUTQ, &queued) != 0 || queued == 0;
	close(fd);
	if (was_read)
		return 0;
	fprintf(stderr, "yard-report: the agent did not read the report within %d s\n",
	        REPORT_READ_WAIT_MS / 1000);
	return 3;
}
