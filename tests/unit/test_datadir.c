/* test_datadir.c: a controller data dir's guards (raft/datadir.h): one process per dir, and
 * the member a dir belongs to. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "raft/datadir.h"

static char dir[64];

static int setup(void **state)
{
	snprintf(dir, sizeof dir, "/tmp/yard-datadir.XXXXXX");
	return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void write_member_file(const char *text)
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", dir, DATADIR_MEMBER_FILE);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void read_member_file(char *buf, size_t len)
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", dir, DATADIR_MEMBER_FILE);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

static void test_claim_writes_then_holds(void **state)
{
	struct yard_err err = {0};
	char buf[32];
	assert_int_equal(datadir_claim(dir, 3, &err), 0);
	read_member_file(buf, sizeof buf);
	assert_string_equal(buf, "3\n");
	assert_int_equal(datadir_claim(dir, 3, &err), 0); /* a restart */
	assert_int_equal(datadir_claim(dir, 1, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "belongs to member 3, not --id 1"));
	assert_non_null(strstr(err.msg, "start it with --id 3, or give member 1 a data dir"));
	read_member_file(buf, sizeof buf);
	assert_string_equal(buf, "3\n"); /* refused: unchanged */
	char tmp[128];
	snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, DATADIR_MEMBER_FILE);
	assert_int_not_equal(access(tmp, F_OK), 0);
}

static void test_unclaim_lets_another_claim(void **state)
{
	struct yard_err err = {0};
	char buf[32];
	assert_int_equal(datadir_claim(dir, 2, &err), 0);
	assert_int_equal(datadir_unclaim(dir, &err), 0);
	assert_int_equal(datadir_unclaim(dir, &err), 0); /* nothing to remove: fine */
	assert_int_equal(datadir_claim(dir, 5, &err), 0);
	read_member_file(buf, sizeof buf);
	assert_string_equal(buf, "5\n");
}

static void test_damaged_file_refused(void **state)
{
	static const char *const bad[] = {"", "abc\n", "3x\n", "0\n", "3", "-1\n", "3\n4\n",
	                                  "99999999999999999999999\n"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct yard_err err = {0};
		write_member_file(bad[i]);
		assert_int_equal(datadir_claim(dir, 3, &err), YARD_EIO);
		assert_non_null(strstr(err.msg, "does not hold a member id"));
		assert_non_null(strstr(err.msg, "--id 3's"));
	}
}

static void test_lock_is_exclusive(void **state)
{
	struct yard_err err = {0};
	int fd = -1, fd2 = -1;
	assert_int_equal(datadir_lock(dir, &fd, &err), 0);
	assert_int_equal(datadir_lock(dir, &fd2, &err), YARD_EBUSY);
	assert_non_null(strstr(err.msg, "is in use by another yardd"));
	close(fd);
	assert_int_equal(datadir_lock(dir, &fd2, &err), 0);
	close(fd2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_claim_writes_then_holds, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unclaim_lets_another_claim, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_damaged_file_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lock_is_exclusive, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
