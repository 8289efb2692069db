/* data.c: the synthetic task, the dataset file reader/writer (format in docs/dataset.md) and
 * the per-epoch shuffled read order. It knows nothing about layouts: callers turn (step,
 * dp rank, micro-batch) into a global position (trainer.c). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataplane/data.h"
#include "dataplane/model.h"

enum { STREAM_FEATURES = 1, STREAM_TEACHER_W1 = 2, STREAM_TEACHER_W2 = 3 };
#define STREAM_SHUFFLE_BASE (1ULL << 40) /* + epoch */
#define TEACHER_HIDDEN 32

static const uint32_t data_header_bytes =
    32; /* magic 8, version, samples, d_in, classes, 8 reserved */

static int data_alloc(struct data_set *ds, int samples, int d_in, int classes, uint64_t seed)
{
	memset(ds, 0, sizeof *ds);
	ds->samples = samples;
	ds->d_in = d_in;
	ds->classes = classes;
	ds->shuffle_seed = seed;
	ds->perm_epoch = -1;
	ds->x = malloc((size_t)samples * d_in * sizeof(float));
	ds->y = malloc((size_t)samples * sizeof(int32_t));
	ds->perm = malloc((size_t)samples * sizeof(int32_t));
	if (!ds->x || !ds->y || !ds->perm) {
		data_free(ds);
		return YARD_ENOMEM;
	}
	return 0;
}

int data_synthetic(struct data_set *ds, int samples, int d_in, int classes, uint64_t seed,
                   struct yard_err *err)
{
	if (samples < 1 || d_in < 1 || classes < 2)
		return yard_err_set(err, YARD_EINVAL,
		                    "train.samples: synthetic data needs samples >= 1, d_in >= 1, "
		                    "classes >= 2 (got %d, %d, %d)",
		                    samples, d_in, classes);
	if (data_alloc(ds, samples, d_in, classes, seed))
		return yard_err_set(err, YARD_ENOMEM,
		                    "synthetic data: out of memory for %d samples", samples);
	float *teacher1 = malloc((size_t)TEACHER_HIDDEN * d_in * sizeof(float));
	float *teacher2 = malloc((size_t)classes * TEACHER_HIDDEN * sizeof(float));
	if (!teacher1 || !teacher2) {
		free(teacher1);
		free(teacher2);
		data_free(ds);
		return yard_err_set(err, YARD_ENOMEM, "synthetic data: out of memory");
	}
	for (int k = 0; k < TEACHER_HIDDEN * d_in; k++)
		teacher1[k] = (float)(model_rng_normal(seed, STREAM_TEACHER_W1, k) / sqrt(d_in));
	for (int k = 0; k < classes * TEACHER_HIDDEN; k++)
		teacher2[k] = (float)model_rng_normal(seed, STREAM_TEACHER_W2, k);
	for (int s = 0; s < samples; s++) {
		float *x = ds->x + (size_t)s * d_in;
		for (int j = 0; j < d_in; j++)
			x[j] =
			    (float)model_rng_normal(seed, STREAM_FEATURES, (uint64_t)s * d_in + j);
		float hidden[TEACHER_HIDDEN];
		for (int h = 0; h < TEACHER_HIDDEN; h++) {
			double acc = 0.0;
			for (int j = 0; j < d_in; j++)
				acc += (double)teacher1[(size_t)h * d_in + j] * x[j];
			hidden[h] = (float)tanh(acc);
		}
		int best = 0;
		double best_logit = -INFINITY;
		for (int c = 0; c < classes; c++) {
			double acc = 0.0;
			for (int h = 0; h < TEACHER_HIDDEN; h++)
				acc += (double)teacher2[(size_t)c * TEACHER_HIDDEN + h] * hidden[h];
			if (acc > best_logit) {
				best_logit = acc;
				best = c;
			}
		}
		ds->y[s] = best;
	}
	free(teacher1);
	free(teacher2);
	return 0;
}

static int host_is_little_endian(void)
{
	const uint16_t probe = 1;
	return *(const uint8_t *)&probe == 1;
}

int data_load_file(struct data_set *ds, const char *path, uint64_t shuffle_seed,
                   struct yard_err *err)
{
	memset(ds, 0, sizeof *ds);
	if (!host_is_little_endian())
		return yard_err_set(err, YARD_EUNSUPPORTED,
		                    "%s: dataset files are little-endian; this host is not", path);
	FILE *f = fopen(path, "rb");
	if (!f)
		return yard_err_set(err, YARD_EIO, "%s: cannot open dataset: %s", path,
		                    strerror(errno));
	unsigned char header[32];
	struct stat st;
	int rc = 0;
	if (fstat(fileno(f), &st) != 0 || fread(header, 1, sizeof header, f) != sizeof header) {
		rc = yard_err_set(err, YARD_ECORRUPT, "%s: shorter than the %u-byte dataset header",
		                  path, data_header_bytes);
		goto out;
	}
	if (memcmp(header, DATA_FILE_MAGIC, 8) != 0) {
		rc = yard_err_set(err, YARD_ECORRUPT, "%s: not a dataset file (magic is not %s)",
		                  path, DATA_FILE_MAGIC);
		goto out;
	}
	uint32_t version, samples, d_in, classes;
	memcpy(&version, header + 8, 4);
	memcpy(&samples, header + 12, 4);
	memcpy(&d_in, header + 16, 4);
	memcpy(&classes, header + 20, 4);
	if (version != DATA_FILE_VERSION) {
		rc = yard_err_set(err, YARD_ECORRUPT, "%s: dataset format version %u, expected %u",
		                  path, version, DATA_FILE_VERSION);
		goto out;
	}
	if (samples < 1 || samples > (1u << 30) || d_in < 1 || d_in > (1u << 20) || classes < 2 ||
	    classes > (1u << 20)) {
		rc = yard_err_set(err, YARD_ECORRUPT,
		                  "%s: implausible header (samples %u, d_in %u, classes %u)", path,
		                  samples, d_in, classes);
		goto out;
	}
	uint64_t expect = data_header_bytes + (uint64_t)samples * d_in * 4 + (uint64_t)samples * 4;
	if ((uint64_t)st.st_size != expect) {
		rc = yard_err_set(err, YARD_ECORRUPT,
		                  "%s: %lld bytes, but a header of %u samples x %u features needs "
		                  "%llu",
		                  path, (long long)st.st_size, samples, d_in,
		                  (unsigned long long)expect);
		goto out;
	}
	if (data_alloc(ds, (int)samples, (int)d_in, (int)classes, shuffle_seed)) {
		rc = yard_err_set(err, YARD_ENOMEM, "%s: out of memory for %u samples", path,
		                  samples);
		goto out;
	}
	if (fread(ds->x, sizeof(float), (size_t)samples * d_in, f) != (size_t)samples * d_in ||
	    fread(ds->y, sizeof(int32_t), samples, f) != samples) {
		rc = yard_err_set(err, YARD_EIO, "%s: short read", path);
		goto out;
	}
	for (uint32_t s = 0; s < samples; s++)
		if (ds->y[s] < 0 || (uint32_t)ds->y[s] >= classes) {
			rc = yard_err_set(err, YARD_ECORRUPT,
			                  "%s: sample %u has label %d, outside 0..%u", path, s,
			                  ds->y[s], classes - 1);
			goto out;
		}
out:
	fclose(f);
	if (rc)
		data_free(ds);
	return rc;
}

int data_save_file(const struct data_set *ds, const char *path, struct yard_err *err)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
	FILE *f = fopen(tmp, "wb");
	if (!f)
		return yard_err_set(err, YARD_EIO, "%s: cannot create: %s", tmp, strerror(errno));
	unsigned char header[32] = {0};
	uint32_t fields[4] = {DATA_FILE_VERSION, (uint32_t)ds->samples, (uint32_t)ds->d_in,
	                      (uint32_t)ds->classes};
	memcpy(header, DATA_FILE_MAGIC, 8);
	memcpy(header + 8, fields, sizeof fields);
	int ok = fwrite(header, 1, sizeof header, f) == sizeof header &&
	         fwrite(ds->x, sizeof(float), (size_t)ds->samples * ds->d_in, f) ==
	             (size_t)ds->samples * ds->d_in &&
	         fwrite(ds->y, sizeof(int32_t), ds->samples, f) == (size_t)ds->samples;
	ok = (fclose(f) == 0) && ok;
	if (!ok || rename(tmp, path) != 0) {
		unlink(tmp);
		return yard_err_set(err, YARD_EIO, "%s: write failed: %s", path, strerror(errno));
	}
	return 0;
}

void data_free(struct data_set *ds)
{
	free(ds->x);
	free(ds->y);
	free(ds->perm);
	memset(ds, 0, sizeof *ds);
	ds->perm_epoch = -1;
}

static void permutation_build(struct data_set *ds, int64_t epoch)
{
	for (int s = 0; s < ds->samples; s++)
		ds->perm[s] = s;
	for (int s = ds->samples - 1; s > 0; s--) {
		uint64_t r = model_rng_u64(ds->shuffle_seed, STREAM_SHUFFLE_BASE + (uint64_t)epoch,
		                           (uint64_t)s);
		int j = (int)(r % (uint64_t)(s + 1));
		int32_t t = ds->perm[s];
		ds->perm[s] = ds->perm[j];
		ds->perm[j] = t;
	}
	ds->perm_epoch = epoch;
}

int data_fetch(struct data_set *ds, uint64_t pos, int n, float *x, int32_t *y)
{
	for (int r = 0; r < n; r++) {
		uint64_t g = pos + (uint64_t)r;
		int64_t epoch = (int64_t)(g / (uint64_t)ds->samples);
		if (epoch != ds->perm_epoch)
			permutation_build(ds, epoch);
		int s = ds->perm[g % (uint64_t)ds->samples];
		memcpy(x + (size_t)r * ds->d_in, ds->x + (size_t)s * ds->d_in,
		       (size_t)ds->d_in * sizeof(float));
		y[r] = ds->y[s];
	}
	return 0;
}
