/* fuzz_ckpt.c: a checkpoint shard as a restoring rank reads it (ckpt_read, and
 * ckpt_read_resharded for a slice of another layout), from a file a
 * crash, a full disk or another program may have left, or that came through the controller
 * store. The input is the file with its last 4 bytes replaced by the CRC32C of the rest, so
 * that mutations reach the header and tensor table behind the checksum. The run it restores
 * into is fixed: job "fuzz", rank 0 of dp 2 x tp 1 x pp 1, one (3 x 4) parameter and its
 * momentum. Property of an accepted shard: every tensor was filled from inside the file
 * (ASan sees any read outside it). With YARD_FUZZ_WRITE_SEED=PATH the target first writes a
 * valid shard of that run to PATH (how tests/fuzz/corpus/ckpt/ was seeded). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dataplane/ckpt.h"
#include "tests/fuzz/fuzz.h"

static const struct ckpt_meta run = {.job = "fuzz",
                                     .step = 10,
                                     .rank = 0,
                                     .world = 2,
                                     .dp = 2,
                                     .tp = 1,
                                     .pp = 1,
                                     .v = 1,
                                     .m = 1,
                                     .d_in = 4,
                                     .d_model = 3,
                                     .d_ff = 8,
                                     .layers = 1,
                                     .classes = 2,
                                     .model_seed = 7,
                                     .optimizer = 0,
                                     .optim_t = 10,
                                     .data_seed = 9,
                                     .data_position = 640};

static void tensors(struct ckpt_tensor t[2], float *w, float *m)
{
	memset(t, 0, 2 * sizeof *t);
	snprintf(t[0].name, sizeof t[0].name, "block0.w1");
	snprintf(t[1].name, sizeof t[1].name, "block0.w1");
	t[0].kind = CKPT_PARAM;
	t[1].kind = CKPT_OPTIM_M;
	for (int k = 0; k < 2; k++) {
		t[k].tensor_id = 1;
		t[k].rows = t[k].full_rows = 3;
		t[k].cols = t[k].full_cols = 4;
	}
	t[0].data = w;
	t[1].data = m;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *seed = getenv("YARD_FUZZ_WRITE_SEED");
	if (seed == NULL)
		return 0;
	float w[12], m[12];
	for (int i = 0; i < 12; i++) {
		w[i] = (float)i / 4;
		m[i] = -(float)i / 8;
	}
	struct ckpt_tensor t[2];
	struct yard_err err = {0};
	tensors(t, w, m);
	if (ckpt_write(seed, &run, t, 2, &err) != 0)
		fuzz_fail("writing the seed: %s", err.msg);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("shard", 0);
	if (fd < 0)
		fuzz_fail("memfd_create failed");
	uint8_t *copy = malloc(size ? size : 1);
	memcpy(copy, data, size);
	if (size >= 4) {
		uint32_t crc = ckpt_crc32c(0, copy, size - 4);
		memcpy(copy + size - 4, &crc, 4);
	}
	if (write(fd, copy, size) != (ssize_t)size)
		fuzz_fail("writing the input to a memfd failed");
	free(copy);
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	/* exactly the tensors' sizes: a fill past them is ASan's to see */
	float *w = malloc(12 * sizeof *w), *m = malloc(12 * sizeof *m);
	struct ckpt_tensor t[2];
	struct ckpt_meta got;
	struct yard_err err = {0};
	tensors(t, w, m);
	struct ckpt_meta expect = run;
	if (ckpt_read(path, &expect, &got, t, 2, &err) == 0 && strcmp(got.job, run.job) != 0)
		fuzz_fail("accepted a shard of job '%s'", got.job);
	/* the same file as the one shard of a layout planned again, read for a (2 x 4) slice at
	 * row 1: an accepted shard filled it from inside the file */
	float *part = malloc(8 * sizeof *part);
	struct ckpt_tensor slice = t[0];
	slice.rows = 2;
	slice.row0 = 1;
	slice.data = part;
	const char *paths[1] = {path};
	if (ckpt_read_resharded(paths, 1, &expect, &got, &slice, 1, &err) == 0 &&
	    strcmp(got.job, run.job) != 0)
		fuzz_fail("resharded: accepted a shard of job '%s'", got.job);
	free(part);
	free(w);
	free(m);
	close(fd);
	return 0;
}
