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
 *
 * Output: when its stdout and stderr are one regular file (the rank's log, as the agent
 * starts it), the command writes into a pipe and the shim appends what comes out of it to
 * the log, each piece under a shared flock (rank_log_write), so the agent's copy-truncate
 * rotation never truncates a write away. When the command has ended, the shim takes what is
 * left in the pipe (what a background process it left behind writes later is not taken)
 * before it records the exit, so the log is complete when the agent learns of the end.
 * Otherwise (run by hand on a terminal) the command inherits stdout and stderr as they are.
 * It does nothing else: no restarts. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/ranklog.h"

#define SHIM_DRAIN_MAX (16 << 20) /* taken from the pipe after the command ended */

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

/* A pipe for the command's output when stdout and stderr are the same regular file. */
static int output_pipe(int fds[2])
{
	struct stat out, err;
	if (fstat(STDOUT_FILENO, &out) != 0 || fstat(STDERR_FILENO, &err) != 0 ||
	    !S_ISREG(out.st_mode) || out.st_dev != err.st_dev || out.st_ino != err.st_ino)
		return -1;
	return pipe2(fds, O_CLOEXEC);
}

/* One read from the pipe appended to the log. Returns the bytes read, 0 at the end, -1
 * when nothing is there now (non-blocking) or on an error. */
static ssize_t pump(int from)
{
	char buf[65536];
	ssize_t n;
	while ((n = read(from, buf, sizeof buf)) < 0 && errno == EINTR)
		;
	if (n > 0)
		rank_log_write(STDOUT_FILENO, buf, (size_t)n);
	return n;
}

/* Copies the command's output into the log until the command has ended, then what is left
 * in the pipe (bounded). sfd: a signalfd for SIGCHLD, or -1 (then it looks every 100 ms).
 * SIGKILL of the process group ends the shim too: what is still in the pipe then (what the
 * command wrote in the moment before) is lost. */
static void wait_copying(pid_t child, int from, int sfd, int *status)
{
	for (;;) {
		pid_t w = waitpid(child, status, from >= 0 ? WNOHANG : 0);
		if (w < 0 && errno == EINTR)
			continue;
		if (w == child || w < 0)
			break;
		if (from < 0)
			continue;
		struct pollfd p[2] = {{.fd = from, .events = POLLIN},
		                      {.fd = sfd, .events = POLLIN}};
		/* never leave without the command's status: when the signalfd fails, look every
		 * 100 ms instead */
		if (poll(p, sfd >= 0 ? 2 : 1, sfd >= 0 ? -1 : 100) < 0) {
			if (errno != EINTR)
				sfd = -1;
			continue;
		}
		if (sfd >= 0 && (p[1].revents & POLLIN)) {
			struct signalfd_siginfo info;
			if (read(sfd, &info, sizeof info) < 0 && errno != EAGAIN && errno != EINTR)
				sfd = -1;
		}
		if (p[0].revents != 0 && pump(from) <= 0) {
			close(from); /* the end: every writer closed it */
			from = -1;
		}
	}
	if (from < 0)
		return;
	/* the command ended: what it wrote is in the pipe; a process it left behind that still
	 * holds the pipe must not keep the shim (and the exit record) waiting */
	fcntl(from, F_SETFL, fcntl(from, F_GETFL) | O_NONBLOCK);
	long taken = 0;
	ssize_t n;
	while (taken < SHIM_DRAIN_MAX && (n = pump(from)) > 0)
		taken += n;
	close(from);
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
	int out[2] = {-1, -1}, sfd = -1;
	sigset_t chld, old;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (output_pipe(out) == 0) {
		sigprocmask(SIG_BLOCK, &chld, &old);
		sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	}
	pid_t child = fork();
	if (child < 0) {
		fprintf(stderr, "yard-agent shim: fork: %s\n", strerror(errno));
		write_exit_file(exit_file, 127, 0);
		return 127;
	}
	if (child == 0) {
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		if (out[1] >= 0) {
			sigprocmask(SIG_SETMASK, &old, NULL);
			if (dup2(out[1], STDOUT_FILENO) < 0 || dup2(out[1], STDERR_FILENO) < 0)
				_exit(127);
		}
		execvp(argv[4], argv + 4);
		fprintf(stderr, "yard-agent shim: cannot run %s: %s\n", argv[4], strerror(errno));
		_exit(127);
	}
	int status = 0;
	if (out[1] >= 0)
		close(out[1]);
	wait_copying(child, out[0], sfd, &status);
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
