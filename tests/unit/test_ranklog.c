/* test_ranklog.c: an agent's rank log as a stream (agent/ranklog.h): pieces in order across
 * a rotation, nothing sent twice once acknowledged, a gap when bytes were rotated out twice
 * before being sent, and the tail resent after a leader change. Real files in a temp dir. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pieces_follow_across_rotation),
	    cmocka_unit_test(test_rotated_twice_before_sending_is_a_gap),
	    cmocka_unit_test(test_rewind_resends_only_the_tail),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
