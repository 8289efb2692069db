/* test_model.c: the residual MLP's layers, its backward against finite differences, that every
 * layout's parameter slices come from the same full tensors, and the data sources (synthetic
 * determinism, dataset file round trip and rejection of bad files). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dataplane/data.h"
#include "dataplane/model.h"

static const struct model_config small = {
    .d_in = 5, .d_model = 8, .d_ff = 12, .layers = 4, .classes = 3, .seed = 7};

static void test_matmul_matches_plain_loops(void **state)
{
	enum { N = 3, I = 5, O = 4 };
	float in[N * I], w[O * I], b[O], out[N * O], dout[N * O], din[N * I], dw[O * I] = {0},
	                                                                             db[O] = {0};
	for (int k = 0; k < N * I; k++)
		in[k] = (float)model_rng_normal(1, 1, k);
	for (int k = 0; k < O * I; k++)
		w[k] = (float)model_rng_normal(1, 2, k);
	for (int k = 0; k < O; k++)
		b[k] = (float)k;
	for (int k = 0; k < N * O; k++)
		dout[k] = (float)model_rng_normal(1, 3, k);
	model_matmul_forward(out, in, w, b, N, I, O);
	model_matmul_backward(din, dw, db, dout, in, w, N, I, O);
	for (int r = 0; r < N; r++)
		for (int o = 0; o < O; o++) {
			double ref = b[o];
			for (int i = 0; i < I; i++)
				ref += (double)in[r * I + i] * w[o * I + i];
			assert_float_equal(out[r * O + o], ref, 1e-5);
		}
	for (int r = 0; r < N; r++)
		for (int i = 0; i < I; i++) {
			double ref = 0;
			for (int o = 0; o < O; o++)
				ref += (double)dout[r * O + o] * w[o * I + i];
			assert_float_equal(din[r * I + i], ref, 1e-5);
		}
	for (int o = 0; o < O; o++) {
		double refb = 0;
		for (int r = 0; r < N; r++)
			refb += dout[r * O + o];
		assert_float_equal(db[o], refb, 1e-5);
		for (int i = 0; i < I; i++) {
			double ref = 0;
			for (int r = 0; r < N; r++)
				ref += (double)dout[r * O + o] * in[r * I + i];
			assert_float_equal(dw[o * I + i], ref, 1e-5);
		}
	}
}

/* Loss of the whole (single-rank) model on fixed inputs, in double. */
static double model_loss(struct model *m, const float *x, const int32_t *y, int n)
{
	struct model_acts *a = model_acts_new(m, 0, n);
	memcpy(a->x_in, x, sizeof(float) * n * m->cfg.d_in);
	memcpy(a->labels, y, sizeof(int32_t) * n);
	double loss = 0;
	int correct = 0;
	assert_int_equal(model_chunk_forward(m, 0, a, NULL, NULL, &loss, &correct), 0);
	model_acts_free(a);
	return loss / n;
}

static int ready_count;
static void count_ready(void *ctx, const struct model_param *p)
{
	(void)ctx;
	(void)p;
	ready_count++;
}

static void test_backward_matches_finite_differences(void **state)
{
	struct model m;
	struct model_layout lay = {.tp = 1, .pp = 1, .v = 1};
	struct yard_err err = {0};
	assert_int_equal(model_init(&m, &small, &lay, &err), 0);
	enum { N = 6 };
	float x[N * 5];
	int32_t y[N];
	for (int k = 0; k < N * 5; k++)
		x[k] = (float)model_rng_normal(3, 1, k);
	for (int r = 0; r < N; r++)
		y[r] = r % 3;
	/* make biases and layernorm non-trivial so their gradients are exercised */
	for (size_t k = 0; k < m.numel; k++)
		m.data[k] += 0.05f * (float)model_rng_normal(9, 9, k);
	struct model_acts *a = model_acts_new(&m, 0, N);
	memcpy(a->x_in, x, sizeof x);
	memcpy(a->labels, y, sizeof y);
	double loss = 0;
	int correct = 0;
	assert_int_equal(model_chunk_forward(&m, 0, a, NULL, NULL, &loss, &correct), 0);
	float *dresid = calloc((size_t)N * m.cfg.d_model, sizeof(float));
	model_zero_grad(&m);
	ready_count = 0;
	assert_int_equal(
	    model_chunk_backward(&m, 0, a, dresid, 1.0f / N, NULL, NULL, count_ready, NULL), 0);
	assert_int_equal(ready_count, m.nparams); /* every gradient announced once */
	model_acts_free(a);
	free(dresid);
	int checked = 0;
	for (int i = 0; i < m.nparams; i++) {
		struct model_param *p = &m.params[i];
		for (size_t e = 0; e < p->numel; e += 1 + p->numel / 4) {
			const float h = 1e-2f;
			float keep = p->data[e];
			p->data[e] = keep + h;
			double up = model_loss(&m, x, y, N);
			p->data[e] = keep - h;
			double down = model_loss(&m, x, y, N);
			p->data[e] = keep;
			double numeric = (up - down) / (2.0 * h), analytic = p->grad[e];
			if (fabs(numeric - analytic) > 2e-3 + 2e-2 * fabs(numeric))
				fail_msg("%s[%zu]: backward %.6g, finite difference %.6g", p->name,
				         e, analytic, numeric);
			checked++;
		}
	}
	assert_true(checked > 40);
	model_free(&m);
}

/* Every rank's slice equals the same region of the single-process model. */
static void test_slices_come_from_the_same_full_tensors(void **state)
{
	struct model full;
	struct model_layout one = {.tp = 1, .pp = 1, .v = 1};
	struct yard_err err = {0};
	assert_int_equal(model_init(&full, &small, &one, &err), 0);
	struct model_layout layouts[] = {
	    {.tp = 2, .tp_i = 1, .pp = 1, .v = 1},
	    {.tp = 4, .tp_i = 2, .pp = 2, .pp_i = 1, .v = 1},
	    {.tp = 1, .pp = 2, .pp_i = 0, .v = 2},
	};
	for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
		struct model part;
		assert_int_equal(model_init(&part, &small, &layouts[l], &err), 0);
		int matched = 0;
		for (int i = 0; i < part.nparams; i++) {
			const struct model_param *p = &part.params[i];
			const struct model_param *f = NULL;
			for (int j = 0; j < full.nparams; j++)
				if (full.params[j].tensor_id == p->tensor_id)
					f = &full.params[j];
			assert_non_null(f);
			assert_string_equal(f->name, p->name);
			for (int r = 0; r < p->rows; r++)
				for (int c = 0; c < p->cols; c++) {
					float want =
					    f->data[(size_t)(p->row0 + r) * f->cols + p->col0 + c];
					if (p->data[(size_t)r * p->cols + c] != want)
						fail_msg("layout %zu: %s[%d][%d] differs from the "
						         "full tensor",
						         l, p->name, r, c);
				}
			matched++;
		}
		assert_true(matched > 0);
		model_free(&part);
	}
	/* the stages of pp = 2, v = 2 hold every block exactly once between them */
	int blocks_seen[4] = {0};
	for (int s = 0; s < 2; s++) {
		struct model part;
		struct model_layout lay = {.tp = 1, .pp = 2, .pp_i = s, .v = 2};
		assert_int_equal(model_init(&part, &small, &lay, &err), 0);
		for (int c = 0; c < part.nchunks; c++)
			for (int k = 0; k < part.chunks[c].nblocks; k++)
				blocks_seen[part.chunks[c].blocks[k].index]++;
		assert_int_equal(part.chunks[0].has_input, s == 0);
		assert_int_equal(part.chunks[1].has_head, s == 1);
		model_free(&part);
	}
	for (int b = 0; b < 4; b++)
		assert_int_equal(blocks_seen[b], 1);
	model_free(&full);
}

static void test_init_rejects_layouts_that_do_not_fit(void **state)
{
	struct model m;
	struct yard_err err = {0};
	struct model_layout tp5 = {.tp = 5, .pp = 1, .v = 1};
	assert_int_equal(model_init(&m, &small, &tp5, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "parallel.tp: 5 does not divide model.d_ff (12)"));
	struct model_layout deep = {.tp = 1, .pp = 4, .v = 2};
	assert_int_equal(model_init(&m, &small, &deep, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "model.layers"));
}

static void test_synthetic_data_is_deterministic_and_balanced(void **state)
{
	struct data_set a, b;
	struct yard_err err = {0};
	assert_int_equal(data_synthetic(&a, 2000, 16, 4, 42, &err), 0);
	assert_int_equal(data_synthetic(&b, 2000, 16, 4, 42, &err), 0);
	assert_memory_equal(a.x, b.x, sizeof(float) * 2000 * 16);
	assert_memory_equal(a.y, b.y, sizeof(int32_t) * 2000);
	int count[4] = {0};
	for (int s = 0; s < 2000; s++)
		count[a.y[s]]++;
	for (int c = 0; c < 4; c++)
		if (count[c] < 100)
			fail_msg("class %d has only %d of 2000 samples", c, count[c]);
	/* positions: an epoch is a permutation, and reading in pieces equals reading at once */
	float x1[20 * 16], x2[20 * 16];
	int32_t y1[20], y2[20];
	data_fetch(&a, 1990, 20, x1, y1);
	data_fetch(&b, 1990, 7, x2, y2);
	data_fetch(&b, 1997, 13, x2 + 7 * 16, y2 + 7);
	assert_memory_equal(x1, x2, sizeof x1);
	assert_memory_equal(y1, y2, sizeof y1);
	unsigned char *seen = calloc(2000, 1);
	float row[16];
	int32_t label;
	for (int pos = 0; pos < 2000; pos++) {
		data_fetch(&a, 4000 + pos, 1, row, &label); /* epoch 2 */
		for (int s = 0; s < 2000; s++)
			if (memcmp(row, a.x + (size_t)s * 16, sizeof row) == 0) {
				assert_int_equal(seen[s], 0);
				seen[s] = 1;
				break;
			}
	}
	free(seen);
	data_free(&a);
	data_free(&b);
}

static void test_dataset_file_round_trip_and_rejects(void **state)
{
	char path[] = "/tmp/test_model_dataXXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	struct data_set a, b;
	struct yard_err err = {0};
	assert_int_equal(data_synthetic(&a, 50, 3, 2, 1, &err), 0);
	assert_int_equal(data_save_file(&a, path, &err), 0);
	assert_int_equal(data_load_file(&b, path, 1, &err), 0);
	assert_int_equal(b.samples, 50);
	assert_memory_equal(a.x, b.x, sizeof(float) * 150);
	assert_memory_equal(a.y, b.y, sizeof(int32_t) * 50);
	data_free(&b);
	/* a label out of range is refused, naming the file and the sample */
	a.y[17] = 5;
	assert_int_equal(data_save_file(&a, path, &err), 0);
	assert_int_equal(data_load_file(&b, path, 1, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, "sample 17 has label 5"));
	/* a truncated file is refused */
	assert_int_equal(truncate(path, 40), 0);
	assert_int_equal(data_load_file(&b, path, 1, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "needs"));
	unlink(path);
	data_free(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_matmul_matches_plain_loops),
	    cmocka_unit_test(test_backward_matches_finite_differences),
	    cmocka_unit_test(test_slices_come_from_the_same_full_tensors),
	    cmocka_unit_test(test_init_rejects_layouts_that_do_not_fit),
	    cmocka_unit_test(test_synthetic_data_is_deterministic_and_balanced),
	    cmocka_unit_test(test_dataset_file_round_trip_and_rejects),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
