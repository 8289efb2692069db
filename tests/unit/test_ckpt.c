/* test_ckpt.c: CRC32C against the standard check values, and the shard format: round trip,
 * a flipped byte anywhere is caught and the file named, a table that points outside the file
 * is refused, a shard of another layout or job is refused naming the mismatch, and a layout
 * planned again assembles its slices from the shards that hold them. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "dataplane/ckpt.h"

static void test_crc32c_check_values(void **state)
{
	assert_int_equal(ckpt_crc32c(0, "123456789", 9), 0xE3069283u);
	unsigned char zeros[32] = {0};
	assert_int_equal(ckpt_crc32c(0, zeros, sizeof zeros), 0x8A9136AAu); /* RFC 3720 B.4 */
	unsigned char ones[32];
	memset(ones, 0xff, sizeof ones);
	assert_int_equal(ckpt_crc32c(0, ones, sizeof ones), 0x62A8AB43u);
	/* incremental equals one shot */
	uint32_t part = ckpt_crc32c(ckpt_crc32c(0, "1234", 4), "56789", 5);
	assert_int_equal(part, 0xE3069283u);
}

static struct ckpt_meta meta_example(void)
{
	struct ckpt_meta m = {.step = 10,
	                      .rank = 1,
	                      .world = 2,
	                      .dp = 2,
	                      .tp = 1,
	                      .pp = 1,
	                      .v = 1,
	                      .m = 2,
	                      .d_in = 4,
	                      .d_model = 8,
	                      .d_ff = 16,
	                      .layers = 2,
	                      .classes = 3,
	                      .model_seed = 5,
	                      .optimizer = 1,
	                      .optim_t = 10,
	                      .data_seed = 9,
	                      .data_position = 640};
	snprintf(m.job, sizeof m.job, "job-a");
	return m;
}

static char dir[64];
static char path[128];

static int setup(void **state)
{
	snprintf(dir, sizeof dir, "/tmp/test_ckptXXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof path, "%s/rank-00001.shard", dir);
	return 0;
}

static int teardown(void **state)
{
	unlink(path);
	rmdir(dir);
	return 0;
}

static void write_example(float *a, float *b)
{
	for (int k = 0; k < 6; k++)
		a[k] = (float)k * 0.5f;
	for (int k = 0; k < 4; k++)
		b[k] = -(float)k;
	struct ckpt_tensor t[2] = {
	    {.name = "block0.w1",
	     .kind = 0,
	     .tensor_id = 102,
	     .rows = 2,
	     .cols = 3,
	     .row0 = 2,
	     .full_rows = 4,
	     .full_cols = 3,
	     .data = a},
	    {.name = "block0.w1",
	     .kind = 1,
	     .tensor_id = 102,
	     .rows = 2,
	     .cols = 2,
	     .row0 = 0,
	     .full_rows = 2,
	     .full_cols = 2,
	     .data = b},
	};
	struct ckpt_meta meta = meta_example();
	struct yard_err err = {0};
	if (ckpt_write(path, &meta, t, 2, &err) != 0)
		fail_msg("write: %s", err.msg);
}

static void test_round_trip(void **state)
{
	float a[6], b[4], ra[6] = {0}, rb[4] = {0};
	write_example(a, b);
	struct ckpt_tensor t[2] = {
	    {.name = "block0.w1",
	     .kind = 1,
	     .rows = 2,
	     .cols = 2,
	     .full_rows = 2,
	     .full_cols = 2,
	     .data = rb},
	    {.name = "block0.w1",
	     .kind = 0,
	     .rows = 2,
	     .cols = 3,
	     .row0 = 2,
	     .full_rows = 4,
	     .full_cols = 3,
	     .data = ra},
	};
	struct ckpt_meta expect = meta_example(), got;
	expect.step = 0; /* step, optim_t and data position come from the file */
	struct yard_err err = {0};
	assert_int_equal(ckpt_read(path, &expect, &got, t, 2, &err), 0);
	assert_memory_equal(a, ra, sizeof a);
	assert_memory_equal(b, rb, sizeof b);
	assert_int_equal(got.step, 10);
	assert_int_equal(got.data_position, 640);
	/* no temp file is left behind */
	char tmp[160];
	snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
	assert_int_equal(access(tmp, F_OK), -1);
}

static void test_every_flipped_byte_is_detected(void **state)
{
	float a[6], b[4], ra[6], rb[4];
	write_example(a, b);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	struct ckpt_tensor t[2] = {
	    {.name = "block0.w1",
	     .kind = 0,
	     .rows = 2,
	     .cols = 3,
	     .row0 = 2,
	     .full_rows = 4,
	     .full_cols = 3,
	     .data = ra},
	    {.name = "block0.w1",
	     .kind = 1,
	     .rows = 2,
	     .cols = 2,
	     .full_rows = 2,
	     .full_cols = 2,
	     .data = rb},
	};
	struct ckpt_meta expect = meta_example(), got;
	for (off_t at = 0; at < st.st_size; at += 7) {
		int fd = open(path, O_RDWR);
		unsigned char byte;
		assert_int_equal(pread(fd, &byte, 1, at), 1);
		byte ^= 0x10;
		assert_int_equal(pwrite(fd, &byte, 1, at), 1);
		struct yard_err err = {0};
		int rc = ckpt_read(path, &expect, &got, t, 2, &err);
		if (rc == 0)
			fail_msg("a flipped byte at offset %lld went unnoticed", (long long)at);
		assert_non_null(strstr(err.msg, path));
		byte ^= 0x10;
		assert_int_equal(pwrite(fd, &byte, 1, at), 1);
		close(fd);
	}
	struct yard_err err = {0};
	assert_int_equal(ckpt_read(path, &expect, &got, t, 2, &err), 0);
	/* and the message says what is wrong */
	int fd = open(path, O_RDWR);
	unsigned char byte = 0x55;
	assert_int_equal(pwrite(fd, &byte, 1, 300), 1);
	close(fd);
	assert_int_equal(ckpt_read(path, &expect, &got, t, 2, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "checksum mismatch"));
}

static void test_mismatched_shard_is_refused_naming_the_field(void **state)
{
	float a[6], b[4];
	write_example(a, b);
	struct ckpt_tensor t[1] = {{.name = "block0.w1",
	                            .kind = 0,
	                            .rows = 2,
	                            .cols = 3,
	                            .row0 = 2,
	                            .full_rows = 4,
	                            .full_cols = 3,
	                            .data = a}};
	struct ckpt_meta expect = meta_example(), got;
	struct yard_err err = {0};
	expect.tp = 2;
	assert_int_equal(ckpt_read(path, &expect, &got, t, 1, &err), YARD_EMISMATCH);
	assert_non_null(strstr(err.msg, "shard is for tp 1, this run has 2"));
	assert_non_null(strstr(err.msg, path));
	expect = meta_example();
	snprintf(expect.job, sizeof expect.job, "job-b");
	assert_int_equal(ckpt_read(path, &expect, &got, t, 1, &err), YARD_EMISMATCH);
	assert_non_null(strstr(err.msg, "job 'job-a'"));
	expect = meta_example();
	t[0].row0 = 0;
	assert_int_equal(ckpt_read(path, &expect, &got, t, 1, &err), YARD_EMISMATCH);
	assert_non_null(strstr(err.msg, "tensor block0.w1"));
	t[0].row0 = 2;
	snprintf(t[0].name, sizeof t[0].name, "block9.w1");
	assert_int_equal(ckpt_read(path, &expect, &got, t, 1, &err), YARD_EMISMATCH);
	assert_non_null(strstr(err.msg, "has no tensor block9.w1"));
}

/* A shard whose checksum holds but whose tensor table lies (a writer's bug, or a file made to
 * hurt): an offset that points a tensor's data before the file or past it is refused; the
 * sum of data start, offset and size wrapped past 2^64 once, and the read copied from before
 * the buffer. Table entry 0 (128 bytes from byte 256) keeps its offset at byte 80. */
static void test_table_offsets_outside_the_file_are_refused(void **state)
{
	float a[6], b[4], ra[6];
	write_example(a, b);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	size_t len = (size_t)st.st_size, data_start = 256 + 2 * 128;
	unsigned char *file = malloc(len);
	int fd = open(path, O_RDWR);
	assert_int_equal(pread(fd, file, len, 0), (ssize_t)len);
	const uint64_t offsets[] = {UINT64_MAX - data_start - 6 * sizeof(float) + 1, UINT64_MAX - 3,
	                            (uint64_t)len, len - data_start - 4 - 8};
	struct ckpt_tensor t[1] = {{.name = "block0.w1",
	                            .kind = 0,
	                            .rows = 2,
	                            .cols = 3,
	                            .row0 = 2,
	                            .full_rows = 4,
	                            .full_cols = 3,
	                            .data = ra}};
	struct ckpt_meta expect = meta_example(), got;
	for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
		memcpy(file + 256 + 80, &offsets[i], 8);
		uint32_t crc = ckpt_crc32c(0, file, len - 4);
		memcpy(file + len - 4, &crc, 4);
		assert_int_equal(pwrite(fd, file, len, 0), (ssize_t)len);
		struct yard_err err = {0};
		int rc = ckpt_read(path, &expect, &got, t, 1, &err);
		if (rc != YARD_ECORRUPT || strstr(err.msg, "lies outside the file") == NULL)
			fail_msg("offset %llu: rc %d, %s", (unsigned long long)offsets[i], rc,
			         err.msg);
	}
	close(fd);
	free(file);
}

/* Two shards of a tp 2 layout: each holds two rows of w (4 x 3, split by rows) and all of the
 * replicated b (4 x 1). Row r of w holds 10 r + c; b holds 100 + r. */
static void write_tp2(const char *a, const char *b, int64_t step_b)
{
	for (int i = 0; i < 2; i++) {
		float w[6], bias[4];
		for (int r = 0; r < 2; r++)
			for (int c = 0; c < 3; c++)
				w[r * 3 + c] = (float)(10 * (2 * i + r) + c);
		for (int r = 0; r < 4; r++)
			bias[r] = (float)(100 + r);
		struct ckpt_tensor t[2] = {{.name = "block0.w1",
		                            .rows = 2,
		                            .cols = 3,
		                            .row0 = 2 * i,
		                            .full_rows = 4,
		                            .full_cols = 3,
		                            .data = w},
		                           {.name = "block0.b1",
		                            .rows = 4,
		                            .cols = 1,
		                            .full_rows = 4,
		                            .full_cols = 1,
		                            .data = bias}};
		struct ckpt_meta meta = meta_example();
		meta.rank = i;
		meta.dp = 1;
		meta.tp = 2;
		if (i == 1)
			meta.step = step_b;
		struct yard_err err = {0};
		if (ckpt_write(i == 0 ? a : b, &meta, t, 2, &err) != 0)
			fail_msg("write: %s", err.msg);
	}
}

/* A layout planned again reads the slices it needs from whichever shards hold them: the whole
 * of w from both halves, a slice across the halves' border, the replicated b from either;
 * an element in no shard, shards of different steps, another full shape and a slice that
 * lies outside its tensor are refused, naming the tensor or the file. */
static void test_resharded_read_assembles_slices(void **state)
{
	char a[160], b[160];
	snprintf(a, sizeof a, "%s/rank-00000.shard", dir);
	snprintf(b, sizeof b, "%s/rank-00001.shard", dir);
	write_tp2(a, b, 10);
	const char *both[2] = {a, b};
	float w[12] = {0}, bias[4] = {0};
	struct ckpt_tensor t[2] = {
	    {.name = "block0.w1", .rows = 4, .cols = 3, .full_rows = 4, .full_cols = 3, .data = w},
	    {.name = "block0.b1",
	     .rows = 4,
	     .cols = 1,
	     .full_rows = 4,
	     .full_cols = 1,
	     .data = bias}};
	struct ckpt_meta expect = meta_example(), got;
	expect.tp = 1; /* this run: tp 1, dp 2 */
	struct yard_err err = {0};
	if (ckpt_read_resharded(both, 2, &expect, &got, t, 2, &err) != 0)
		fail_msg("%s", err.msg);
	for (int r = 0; r < 4; r++) {
		for (int c = 0; c < 3; c++)
			assert_true(w[r * 3 + c] == (float)(10 * r + c));
		assert_true(bias[r] == (float)(100 + r));
	}
	assert_int_equal(got.tp, 2);
	assert_int_equal(got.step, 10);
	/* rows 1-2, columns 1-2: one row from each shard */
	float mid[4] = {0};
	struct ckpt_tensor part = {.name = "block0.w1",
	                           .rows = 2,
	                           .cols = 2,
	                           .row0 = 1,
	                           .col0 = 1,
	                           .full_rows = 4,
	                           .full_cols = 3,
	                           .data = mid};
	assert_int_equal(ckpt_read_resharded(both, 2, &expect, &got, &part, 1, &err), 0);
	assert_true(mid[0] == 11 && mid[1] == 12 && mid[2] == 21 && mid[3] == 22);
	/* one half only: rows 2-3 are in no shard */
	assert_int_equal(ckpt_read_resharded(both, 1, &expect, &got, t, 2, &err), YARD_EMISMATCH);
	assert_non_null(strstr(err.msg, "tensor block0.w1 (kind 0): 6 of its 12 elements"));
	/* another full shape */
	float wide[16];
	struct ckpt_tensor other = t[0];
	other.cols = other.full_cols = 4;
	other.data = wide;
	assert_int_equal(ckpt_read_resharded(both, 2, &expect, &got, &other, 1, &err),
	                 YARD_EMISMATCH);
	assert_non_null(strstr(err.msg, "tensor block0.w1 is (4 x 3), this run's is (4 x 4)"));
	/* another model */
	expect.d_ff = 32;
	assert_int_equal(ckpt_read_resharded(both, 2, &expect, &got, t, 2, &err), YARD_EMISMATCH);
	assert_non_null(strstr(err.msg, "shard is for model.d_ff 16, this run has 32"));
	expect = meta_example();
	expect.tp = 1;
	/* the second shard of another step */
	write_tp2(a, b, 20);
	assert_int_equal(ckpt_read_resharded(both, 2, &expect, &got, t, 2, &err), YARD_EMISMATCH);
	assert_non_null(strstr(err.msg, "rank-00001.shard: shard is of step 20"));
	/* a table whose slice lies past its tensor (the checksum made to hold): row0 3 of rows 2
	 * in a tensor of 4 rows; table entry 0 starts at byte 256, its row0 at 256 + 64 */
	write_tp2(a, b, 10);
	int fd = open(a, O_RDWR);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	size_t len = (size_t)st.st_size;
	unsigned char *file = malloc(len);
	assert_int_equal(pread(fd, file, len, 0), (ssize_t)len);
	int32_t row0 = 3;
	memcpy(file + 256 + 64, &row0, 4);
	uint32_t crc = ckpt_crc32c(0, file, len - 4);
	memcpy(file + len - 4, &crc, 4);
	assert_int_equal(pwrite(fd, file, len, 0), (ssize_t)len);
	close(fd);
	free(file);
	assert_int_equal(ckpt_read_resharded(both, 2, &expect, &got, t, 2, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "rank-00000.shard: tensor block0.w1: its slice"));
	unlink(a);
	unlink(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crc32c_check_values),
	    cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_every_flipped_byte_is_detected, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_table_offsets_outside_the_file_are_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_mismatched_shard_is_refused_naming_the_field,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_resharded_read_assembles_slices, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
