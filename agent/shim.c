/* shim.c: the small parent every rank runs under (`yard-agent --rank-shim EXIT_FILE -- ARGV`),
 * in the spirit of containerd-shim and conmon.
 *
 * The agent may die or be upgraded while its ranks run; a restarted agent re-adopts them but
 * is not their parent, so it could see that a rank ended and never how. The shim is the
 * rank's session leader (the agent starts it detached): it starts the command as its child,
 * waits for it and writes "EXIT_CODE SIGNAL" to EXIT_FILE (atomically) before it ends the
 * same way: with the same exit code, or killed by the same signal. It ignores SIGTERM and
 * SIGINT itself (the command, in the same process group, receives them and decides), so a
 * graceful stop still records the command's status; SIGKILL of the group ends both.
 * It does nothing else: no output handling, no restarts. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent.h"

static void write_exit_file(const char *path, int code, int sig)
{
	char tmp[PATH_MAX + 8], text[32];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	int n = snprintf(text, sizeof text, "%d %d\n", code, sig);
	if (write(fd, text, (size_t)n) == n && fsync(fd) == 0)
		rename(tmp, path);
	close(fd);
}

int shim_main(int argc, char **argv)
{
	/* argv: yard-agent --rank-shim EXIT_FILE -- CMD ARGS... */
	if (argc < 5 || strcmp(argv[3], "--") != 0) {
		fprintf(stderr, "usage: yard-agent --rank-shim EXIT_FILE -- COMMAND [ARGS...]\n");
		return 2;
	}
	const char *exit_file = argv[2];
	/* what the agent had open and did not mark close-on-exec (libuv's and libcurl's
	 * internal socket pairs, ...) is not the rank's: only stdin, stdout and stderr go on */
	if (close_range(3, ~0U, 0) != 0)
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	pid_t child = fork();
	if (child < 0) {
		fprintf(stderr, "yard-agent shim: fork: %s\n", strerror(errno));
		write_exit_file(exit_file, 127, 0);
		return 127;
	}
	if (child == 0) {
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		execvp(argv[4], argv + 4);
		fprintf(stderr, "yard-agent shim: cannot run %s: %s\n", argv[4], strerror(errno));
		_exit(127);
	}
	int status = 0;
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		write_exit_file(exit_file, 0, sig);
		signal(sig, SIG_DFL);
		raise(sig);
		return 128 + sig; /* a signal that does not end us (SIGCHLD, ...) */
	}
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	write_exit_file(exit_file, code, 0);
	return code;
}

int shim_read_exit(const char *exit_file, int *code, int *sig)
{
	FILE *f = fopen(exit_file, "r");
	if (f == NULL)
		return YARD_ENOTFOUND;
	int ok = fscanf(f, "%d %d", code, sig) == 2;
	fclose(f);
	return ok ? 0 : YARD_ECORRUPT;
}
