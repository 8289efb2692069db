/* report.c: yard-report, how a command job tells its agent about training progress.
 *
 *   yard-report STEP [LOSS]      sends {"step": STEP, "loss": LOSS}
 *   yard-report --json LINE      sends LINE as it is (one JSON object, see docs/api.md)
 *
 * The line goes as one datagram to the agent's unix socket ($YARD_AGENT_SOCK), which the
 * agent attributes to the rank whose session the sender belongs to. The agent learns who
 * sent a datagram only while the sender is alive, so yard-report waits (up to 1 s) until
 * the agent has read it: on a unix socket the unread datagram stays charged to the sender
 * (SIOCOUTQ), which drops to 0 once the agent has consumed it.
 *
 * Exit status: 0 sent and read, 1 bad arguments, 2 no agent socket, 3 not read in time. */
#include <errno.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

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
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 ||
	    sendto(fd, line, strlen(line), 0, (struct sockaddr *)&addr, sizeof addr) < 0) {
		fprintf(stderr, "yard-report: %s: %s\n", sock_path, strerror(errno));
		return 2;
	}
	for (int i = 0; i < 1000; i++) {
		int queued = 0;
		if (ioctl(fd, SIOCOUTQ, &queued) != 0 || queued == 0) {
			close(fd);
			return 0;
		}
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
	}
	close(fd);
	fprintf(stderr, "yard-report: the agent did not read the report within 1 s\n");
	return 3;
}
