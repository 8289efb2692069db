/* test_ranklog.c: an agent's rank log as a stream (agent/ranklog.h): pieces in order across
 * a rotation, nothing sent twice once acknowledged, a gap when bytes were rotated out twice
 * before being sent, and the tail resent after a leader change; a writer that locks loses
 * nothing to rotations, and the rank shim (agent/shim.c) writes the rank's output that way
 * and has all of it in the log before it records the exit. Real files and processes in a
 * temp dir. */
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/agent.h"
#include "agent/ranklog.h"

static char dir[64];

static int setup(void **state)
{
	snprintf(dir, sizeof dir, "/tmp/yard-ranklog.XXXXXX");
	return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void append(const char *path, const char *text)
{
	FILE *f = fopen(path, "a");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Sends everything (max bytes a piece) and acknowledges it, as heartbeats would; returns
 * what the leader received, with "[gap N]" where an offset jumped. */
static void ship_all(struct rank_log *l, size_t max, char *got, size_t got_len)
{
	char buf[4096];
	int64_t off;
	size_t n;
	got[0] = '\0';
	for (int i = 0; i < 100 && (n = rank_log_next(l, max, &off, buf)) > 0; i++) {
		size_t used = strlen(got);
		if (off > l->shipped)
			used += (size_t)snprintf(got + used, got_len - used, "[gap %lld]",
			                         (long long)(off - l->shipped));
		snprintf(got + used, got_len - used, "%.*s", (int)n, buf);
		l->shipped = off + (int64_t)n;
	}
}

static void test_pieces_follow_across_rotation(void **state)
{
	struct rank_log l;
	char path[128], got[4096];
	snprintf(path, sizeof path, "%s/a.log", dir);
	rank_log_init(&l, path);
	append(path, "line 1\nline 2\n");
	ship_all(&l, 5, got, sizeof got);
	assert_string_equal(got, "line 1\nline 2\n");
	assert_int_equal(l.shipped, 14);
	append(path, "line 3\n");
	/* rotated before line 3 was sent: it is read from the rotated file */
	assert_int_equal(rank_log_rotate(&l, 10), 1);
	assert_int_equal(l.base, 21);
	append(path, "line 4\n");
	assert_int_equal(rank_log_end(&l), 28);
	ship_all(&l, 4, got, sizeof got);
	assert_string_equal(got, "line 3\nline 4\n");
	assert_int_equal(rank_log_rotate(&l, 10), 0); /* 7 bytes: under the limit */
}

static void test_rotated_twice_before_sending_is_a_gap(void **state)
{
	struct rank_log l;
	char path[128], got[4096];
	snprintf(path, sizeof path, "%s/b.log", dir);
	rank_log_init(&l, path);
	append(path, "aaaaaaaaaa\n");
	assert_int_equal(rank_log_rotate(&l, 5), 1);
	append(path, "bbbbbbbbbb\n");
	assert_int_equal(rank_log_rotate(&l, 5), 1);
	append(path, "cc\n");
	ship_all(&l, 100, got, sizeof got);
	assert_string_equal(got, "[gap 11]bbbbbbbbbb\ncc\n");
}

static void test_rewind_resends_only_the_tail(void **state)
{
	struct rank_log l;
	char path[128], got[4096];
	snprintf(path, sizeof path, "%s/c.log", dir);
	rank_log_init(&l, path);
	append(path, "0123456789");
	ship_all(&l, 100, got, sizeof got);
	rank_log_rewind(&l, 4);
	assert_int_equal(l.shipped, 6);
	ship_all(&l, 100, got, sizeof got);
	assert_string_equal(got, "6789");
	rank_log_rewind(&l, 100); /* never before offset 0 */
	assert_int_equal(l.shipped, 0);
	l.shipped = 10;
	l.pending_end = 10;
	rank_log_rewind(&l, 0); /* nothing to resend; the piece in flight is forgotten */
	assert_int_equal(l.shipped, 10);
	assert_int_equal(l.pending_end, -1);
}

/* reads the whole file (malloc'd, NUL-terminated; "" when it does not exist) */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = calloc(1, 1 << 20);
	assert_non_null(text);
	if (f != NULL) {
		size_t n = fread(text, 1, (1 << 20) - 1, f);
		text[n] = '\0';
		fclose(f);
	}
	return text;
}

static void test_rotation_waits_for_a_writer_holding_the_lock(void **state)
{
	struct rank_log l;
	char path[128], rotated[140];
	snprintf(path, sizeof path, "%s/d.log", dir);
	snprintf(rotated, sizeof rotated, "%s.1", path);
	rank_log_init(&l, path);
	append(path, "0123456789\n");
	int fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_SH), 0); /* a write in progress */
	assert_int_equal(rank_log_rotate(&l, 5), 0);
	assert_int_equal(access(rotated, F_OK), -1); /* neither FILE.1 nor FILE touched */
	char *text = slurp(path);
	assert_string_equal(text, "0123456789\n");
	free(text);
	assert_int_equal(l.base, 0);
	assert_int_equal(flock(fd, LOCK_UN), 0);
	assert_int_equal(rank_log_rotate(&l, 5), 1);
	assert_int_equal(l.base, 11);
	text = slurp(rotated);
	assert_string_equal(text, "0123456789\n");
	free(text);
	close(fd);
}

#define MIN_LINES 20000
#define MIN_ROTATIONS 20
#define LINES_A_ROTATION 2000 /* the most the writer gets ahead of the rotations */
#define MAX_LINES (MIN_LINES + (MIN_ROTATIONS + 1) * LINES_A_ROTATION)

/* A writer appending numbered lines through rank_log_write while the log is rotated at 256
 * bytes over and over, and everything shipped after each rotation: every line arrives, once,
 * in order, with no gap (without the lock, lines written between a rotation's last copy and
 * its truncation are lost). The writer goes on until the reader has rotated MIN_ROTATIONS
 * times and it has written MIN_LINES, and never gets more than LINES_A_ROTATION lines ahead
 * of the rotations, so the overlap does not depend on how the two processes are scheduled
 * (a fast writer once finished before the 11th rotation). */
static void test_a_locking_writer_loses_nothing_to_rotations(void **state)
{
	struct rank_log l;
	char path[128], buf[4096];
	size_t cap = (size_t)MAX_LINES * 12, got_len = 0;
	char *got = malloc(cap);
	assert_non_null(got);
	/* shared with the writer: [0] rotations so far, [1] lines written */
	int *shared = mmap(NULL, 2 * sizeof(int), PROT_READ | PROT_WRITE,
	                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(shared != MAP_FAILED);
	shared[0] = shared[1] = 0;
	snprintf(path, sizeof path, "%s/e.log", dir);
	rank_log_init(&l, path);
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	assert_true(fd >= 0);
	pid_t writer = fork();
	assert_true(writer >= 0);
	if (writer == 0) {
		int i = 0, rotated;
		time_t give_up = time(NULL) + 60;
		while ((rotated = __atomic_load_n(&shared[0], __ATOMIC_ACQUIRE)),
		       i < MIN_LINES || rotated < MIN_ROTATIONS) {
			if (i >= (rotated + 1) * LINES_A_ROTATION) { /* wait for the reader */
				if (time(NULL) > give_up)
					_exit(2);
				sched_yield();
				continue;
			}
			char line[32];
			int n = snprintf(line, sizeof line, "line %06d\n", i);
			if (rank_log_write(fd, line, (size_t)n) != 0)
				_exit(1);
			__atomic_store_n(&shared[1], ++i, __ATOMIC_RELEASE);
		}
		_exit(0);
	}
	close(fd);
	int rotations = 0, status = 0, done = 0;
	while (!done) {
		done = waitpid(writer, &status, WNOHANG) == writer;
		rotations += rank_log_rotate(&l, 256) == 1;
		__atomic_store_n(&shared[0], rotations, __ATOMIC_RELEASE);
		int64_t off;
		size_t n;
		while ((n = rank_log_next(&l, sizeof buf, &off, buf)) > 0) {
			assert_int_equal(off, l.shipped); /* no gap */
			assert_true(got_len + n <= cap);
			memcpy(got + got_len, buf, n);
			got_len += n;
			l.shipped = off + (int64_t)n;
		}
	}
	int lines = __atomic_load_n(&shared[1], __ATOMIC_ACQUIRE);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("the writer failed (status %d) after %d lines and %d rotations", status,
		         lines, rotations);
	assert_true(rotations >= MIN_ROTATIONS);
	assert_int_equal(got_len, (size_t)lines * 12);
	for (int i = 0; i < lines; i++) {
		char line[32];
		snprintf(line, sizeof line, "line %06d\n", i);
		if (memcmp(got + (size_t)i * 12, line, 12) != 0)
			fail_msg("line %d is \"%.11s\" after %d rotations", i, got + (size_t)i * 12,
			         rotations);
	}
	munmap(shared, 2 * sizeof(int));
	free(got);
}

/* The shim under a held exclusive lock (a rotation in progress): the command's output waits
 * in the pipe and the exit is not recorded; released, both lines are in the log, in the
 * order written, before the exit record appears. */
static void test_the_shim_writes_the_output_under_the_lock(void **state)
{
	char path[128], exit_path[128], marker[128], script[512];
	snprintf(path, sizeof path, "%s/f.log", dir);
	snprintf(exit_path, sizeof exit_path, "%s/f.exit", dir);
	snprintf(marker, sizeof marker, "%s/f.printed", dir);
	snprintf(script, sizeof script, "echo out; echo err >&2; : > %s; exit 3", marker);
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	assert_true(fd >= 0);
	int lock = open(path, O_RDONLY);
	assert_true(lock >= 0);
	assert_int_equal(flock(lock, LOCK_EX), 0);
	pid_t shim = fork();
	assert_true(shim >= 0);
	if (shim == 0) {
		char *argv[] = {"yard-agent", "--rank-shim", exit_path, "--",
		                "sh",         "-c",          script,    NULL};
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		_exit(shim_main(7, argv));
	}
	close(fd);
	/* bounded: the command prints and marks within 10 s */
	for (int i = 0; i < 10000 && access(marker, F_OK) != 0; i++) {
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
	}
	assert_int_equal(access(marker, F_OK), 0);
	char *text = slurp(path);
	assert_string_equal(text, ""); /* the shim waits for the lock */
	free(text);
	assert_int_equal(access(exit_path, F_OK), -1);
	assert_int_equal(flock(lock, LOCK_UN), 0);
	int status = 0;
	assert_int_equal(waitpid(shim, &status, 0), shim);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 3);
	text = slurp(path);
	assert_string_equal(text, "out\nerr\n");
	free(text);
	int code = -1, sig = -1;
	assert_int_equal(shim_read_exit(exit_path, &code, &sig), 0);
	assert_int_equal(code, 3);
	assert_int_equal(sig, 0);
	close(lock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pieces_follow_across_rotation),
	    cmocka_unit_test(test_rotated_twice_before_sending_is_a_gap),
	    cmocka_unit_test(test_rewind_resends_only_the_tail),
	    cmocka_unit_test(test_rotation_waits_for_a_writer_holding_the_lock),
	    cmocka_unit_test(test_a_locking_writer_loses_nothing_to_rotations),
	    cmocka_unit_test(test_the_shim_writes_the_output_under_the_lock),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
