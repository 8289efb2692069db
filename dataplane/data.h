/* data.h: the training data of the built-in trainer and the order every layout reads it in.
 *
 * Two sources: a deterministic synthetic classification task (features from a counter-based
 * generator, labels from a fixed random teacher network, both from train.data_seed) and a user
 * file in the format of docs/dataset.md. The read order is a function of the global sample
 * position only (position g -> epoch g / N, shuffled per epoch from the seed), so every
 * dp x tp x pp layout sees the same samples in the same order: step s reads positions
 * [s*B, (s+1)*B), data-parallel rank i the i-th contiguous B/dp of them, micro-batch j the j-th
 * contiguous B/(dp*m) of those. */
#ifndef YARD_DATA_H
#define YARD_DATA_H

#include <stdint.h>

#include "common/err.h"

#define DATA_FILE_MAGIC "YARDDATA"
#define DATA_FILE_VERSION 1u

struct data_set {
	int samples, d_in, classes;
	float *x;   /* (samples, d_in), owned */
	int32_t *y; /* (samples), owned */
	uint64_t shuffle_seed;
	int64_t perm_epoch; /* epoch whose permutation is cached in perm, -1 if none */
	int32_t *perm;      /* (samples), owned */
};

/* Builds the synthetic task: samples x ~ N(0, 1)^d_in, label = argmax of a random teacher
 * 2-layer tanh network. Deterministic in seed. */
int data_synthetic(struct data_set *ds, int samples, int d_in, int classes, uint64_t seed,
                   struct yard_err *err);
/* Loads a file in the documented format; err names the file and what is wrong with it. */
int data_load_file(struct data_set *ds, const char *path, uint64_t shuffle_seed,
                   struct yard_err *err);
/* Writes ds in the documented format (atomically: temp file and rename). */
int data_save_file(const struct data_set *ds, const char *path, struct yard_err *err);
void data_free(struct data_set *ds);

/* Copies rows for global positions [pos, pos + n) into x (n, d_in) and y (n). */
int data_fetch(struct data_set *ds, uint64_t pos, int n, float *x, int32_t *y);

#endif
