/* probe.c: the node measurements behind the planner's rates (see probe.h). Helper processes
 * are forked (not threads) so that each measures what a rank measures: one single-threaded
 * process per device, communicating through its own libyd communicator. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "common/common.h"
#include "dataplane/model.h"
#include "dataplane/optim.h"
#include "dataplane/probe.h"
#include "dataplane/yd.h"

/* (rows, in, out) of a linear layer: micro-batch rows × d_model × d_ff/tp as the trainer's
 * examples run them, up to a size where one call takes milliseconds. */
static const int GEMM_SHAPES[PROBE_GEMM_POINTS][3] = {
    {4, 32, 32}, {8, 64, 64}, {16, 64, 128}, {32, 128, 256}, {64, 256, 512}, {128, 512, 1024}};

/* (rows, d_model, d_ff) of one block: spread over rows and widths so the fit separates the
 * matmul, per-hidden-unit (GELU), per-model-unit (layernorm, residual) and per-call costs;
 * hidden widths below d_model too, as a tensor-parallel shard (d_ff / tp) has them, or the
 * per-model-unit cost (which tensor parallelism does not split) is confounded with GELU's */
static const int BLOCK_SHAPES[PROBE_BLOCK_SHAPES][3] = {
    {1, 64, 128},   {64, 128, 32}, {16, 64, 128},  {64, 64, 256},
    {4, 256, 1024}, {16, 256, 64}, {32, 128, 512}, {64, 256, 1024}};

#define PROBE_MAX_CONCURRENT 16
/* a block shape whose time lies this far from the fit is timed once more (good fits here:
 * within 5-12% at every shape) */
#define PROBE_BLOCK_MISFIT 0.15
#define PROBE_BLOCK_RETIMES 2
/* blocks in the chunk a block is timed in (block_time) */
#define PROBE_BLOCK_CHAIN 4
/* Each timing is the best of the short slices its window is cut into (a slice holds at least
 * one call): another program's burst on a shared machine slows some slices, not the figure.
 * The best slice is also what an undisturbed rank sees. */
#define PROBE_SLICE_S 0.002
#define PROBE_BW_BYTES (4u << 20)
#define PROBE_LAT_REPS 50
#define PROBE_BW_REPS 4
/* sync probe: work between two exchanges (alone), exchanges timed (rounds × iterations) */
#define PROBE_SYNC_WORK_S 100e-6
#define PROBE_SYNC_ITERS 12
#define PROBE_SYNC_ROUNDS 2
/* Processes released together compute this long before their common window opens (the
 * kernel spreads them over the cores in the first milliseconds), and the window lasts at
 * least PROBE_SHARE_WINDOW_S: 4 processes on 2 cores measured 0.27-0.48 of one alone each
 * in 30 ms windows opened at the release, 0.32-0.41 opened 10 ms after it, and 0.41-0.44
 * in 80 ms windows opened 10 ms after it (8 probes each, the agent's 1.2 s budget). */
#define PROBE_SETTLE_S 0.010
#define PROBE_SHARE_WINDOW_S 0.080
/* rounds of the measurements that depend on what other programs leave (median kept) */
#define PROBE_SHARE_ROUNDS 3

static double now_s(void)
{
	return (double)yard_now_mono_ns() / 1e9;
}

/* CPU seconds this process (all its threads) has used. */
static double process_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One linear layer's forward + backward (3 GEMMs) on buffers of its own. */
struct gemm_bench {
	int n, i, o;
	float *buf, *in, *din, *w, *dw, *out, *dout;
};

/* Allocates and fills the buffers and runs the layer once (warming the caches and the
 * library); 0, or -1 without memory. */
static int gemm_setup(struct gemm_bench *g, const int shape[3])
{
	g->n = shape[0], g->i = shape[1], g->o = shape[2];
	size_t ni = (size_t)g->n * g->i, oi = (size_t)g->o * g->i, no = (size_t)g->n * g->o;
	if ((g->buf = calloc(ni * 2 + oi * 2 + no * 2, sizeof *g->buf)) == NULL)
		return -1;
	g->in = g->buf, g->din = g->in + ni, g->w = g->din + ni, g->dw = g->w + oi;
	g->out = g->dw + oi, g->dout = g->out + no;
	for (size_t k = 0; k < ni; k++)
		g->in[k] = (float)(k % 7) * 0.1f;
	for (size_t k = 0; k < oi; k++)
		g->w[k] = (float)(k % 5) * 0.01f;
	for (size_t k = 0; k < no; k++)
		g->dout[k] = 0.001f;
	model_matmul_forward(g->out, g->in, g->w, NULL, g->n, g->i, g->o);
	return 0;
}

/* Runs the layer in slices of PROBE_SLICE_S (each at least one call) from now until the
 * monotonic time `until` (at least one slice): flops/s of the best slice that overlaps the
 * window [t0, t1], and in *sustained (may be NULL) the work done within the window (each
 * slice's calls prorated by its overlap) over the window's length: what this process got
 * of the machine then, the time it waited for a core included. */
static double gemm_run(const struct gemm_bench *g, double t0, double t1, double until,
                       double *sustained)
{
	double flops = 3.0 * 2.0 * g->n * g->i * g->o, best = 0, reps_in = 0;
	for (int slices = 0;; slices++) {
		double start = now_s(), elapsed = 0;
		if (slices > 0 && start >= until)
			break;
		long reps = 0;
		/* bounded by the slice: at most millions of calls of the smallest shape */
		while (elapsed < PROBE_SLICE_S && reps < 10000000L) {
			model_matmul_forward(g->out, g->in, g->w, NULL, g->n, g->i, g->o);
			model_matmul_backward(g->din, g->dw, NULL, g->dout, g->in, g->w, g->n, g->i,
			                      g->o);
			reps++;
			if ((reps & 7) == 0 || (size_t)g->n * g->i * g->o > 100000)
				elapsed = now_s() - start;
		}
		double end = now_s();
		double overlap = fmin(end, t1) - fmax(start, t0);
		if (end <= start || overlap <= 0)
			continue;
		best = fmax(best, (double)reps * flops / (end - start));
		reps_in += (double)reps * overlap / (end - start);
	}
	if (sustained != NULL)
		*sustained = t1 > t0 ? reps_in * flops / (t1 - t0) : best;
	return best;
}

/* Forward + backward (3 GEMMs) of one linear layer, repeated for window_s; flops/s of the
 * best slice (what the device does undisturbed), and in *sustained (may be NULL) over the
 * whole window (what this process got, sharing the machine). */
static double gemm_rate(const int shape[3], double window_s, double *sustained)
{
	struct gemm_bench g;
	if (gemm_setup(&g, shape) != 0)
		return 0;
	double t0 = now_s();
	double best = gemm_run(&g, t0, t0 + window_s, t0 + window_s, sustained);
	free(g.buf);
	return best;
}

/* Builds a model whose only chunk is `blocks` middle blocks (no input projection, no head),
 * as a middle pipeline stage holds them. */
static int middle_blocks_model(struct model *m, int d, int f, int blocks, struct yard_err *err)
{
	struct model_config cfg = {
	    .d_in = 8, .d_model = d, .d_ff = f, .layers = 3 * blocks, .classes = 2, .seed = 1};
	struct model_layout lay = {.tp = 1, .tp_i = 0, .pp = 3, .pp_i = 1, .v = 1};
	return model_init(m, &cfg, &lay, err);
}

/* One forward and backward of the chain on fresh inputs, its activations allocated and freed
 * as the trainer does for a micro-batch; -1 (err set) on failure. */
static int block_pass(struct model *m, int n, int d, int f, uint64_t *noise, float *dresid,
                      struct yard_err *err)
{
	double loss = 0;
	int correct = 0;
	/* the trainer allocates a micro-batch's activations at its forward and frees them after
	 * its backward: so does the probe (large ones are fresh pages every time, which the
	 * kernel faults in and zeroes) */
	struct model_acts *a = model_acts_new(m, 0, n);
	if (a == NULL) {
		yard_err_set(err, YARD_ENOMEM, "probe: no memory for a %dx%dx%d block", n, d, f);
		return -1;
	}
	/* fresh inputs every pass, as the trainer's micro-batches are: GELU's tanh branches on
	 * its argument, and a pass repeated on the same numbers lets the branch predictor learn
	 * them (measured 25-30% faster than the trainer) */
	for (size_t k = 0; k < (size_t)n * d; k++) {
		*noise = *noise * 6364136223846793005ull + 1442695040888963407ull;
		a->resid[0][k] = (float)(*noise >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
		dresid[k] = 1e-3f;
	}
	int rc = model_chunk_forward(m, 0, a, NULL, NULL, &loss, &correct) != 0 ||
	                 model_chunk_backward(m, 0, a, dresid, 1.0f, NULL, NULL, NULL, NULL) != 0
	             ? -1
	             : 0;
	model_acts_free(a);
	if (rc != 0)
		yard_err_set(err, YARD_EINTERNAL, "probe: block %dx%dx%d failed", n, d, f);
	return rc;
}

/* Seconds per forward + backward of one block of (n, d, f), over window_s (the best
 * slice), timed as a chunk of PROBE_BLOCK_CHAIN blocks: a stage of the trainer runs each
 * micro-batch through all its blocks, so a block's weights and activations are no longer in
 * the core's cache when the next micro-batch (or the backward) comes back to it; one block
 * alone would stay in cache and measure up to 1.5× faster at weight-heavy shapes. Adds the window's
 * length to *spent_s and what its calls would have taken at the best slice's pace to *best_s: their
 * ratio is the share of its best speed the process got over the window (another program on its
 * core, or a host that slows the core down for stretches of 100 ms to seconds, which a short slice
 * does not see). */
static double block_time(const int shape[3], double window_s, double *spent_s, double *best_s,
                         struct yard_err *err)
{
	int n = shape[0], d = shape[1], f = shape[2];
	struct model m;
	double per = -1;
	if (middle_blocks_model(&m, d, f, PROBE_BLOCK_CHAIN, err) != 0)
		return -1;
	uint64_t noise = 1;
	float *dresid = calloc((size_t)n * d, sizeof *dresid);
	if (dresid == NULL) {
		yard_err_set(err, YARD_ENOMEM, "probe: no memory for a %dx%dx%d block", n, d, f);
		goto out;
	}
	/* untimed first: a fresh model's weights and gradients are pages never touched (8 MiB
	 * for the largest shape), and its first pass took 2.8x the others; with the agent's
	 * budget (a 60 ms window, time for one pass of the largest) it was all the window saw */
	if (block_pass(&m, n, d, f, &noise, dresid, err) != 0)
		goto out;
	double begin = now_s(), total_reps = 0;
	while (per < 0 || now_s() - begin < window_s) {
		double start = now_s(), elapsed = 0;
		long reps = 0;
		while (elapsed < PROBE_SLICE_S && reps < 10000000L) {
			if (block_pass(&m, n, d, f, &noise, dresid, err) != 0) {
				per = -1;
				goto out;
			}
			reps++;
			elapsed = now_s() - start;
		}
		if (per < 0 || elapsed / reps < per)
			per = elapsed / reps;
		total_reps += (double)reps;
	}
	*spent_s += now_s() - begin;
	*best_s += total_reps * per;
out:
	free(dresid);
	model_free(&m);
	return per > 0 ? per / PROBE_BLOCK_CHAIN : per;
}

/* Seconds per parameter of optim_step + model_zero_grad on a block of 256 × 1024. */
static double optim_time(enum optim_kind kind, double window_s, struct yard_err *err)
{
	struct model m;
	struct optim o;
	struct optim_config cfg = {.kind = kind,
	                           .lr = 1e-3,
	                           .momentum = 0.9,
	                           .beta1 = 0.9,
	                           .beta2 = 0.999,
	                           .eps = 1e-8,
	                           .weight_decay = 0.01};
	double per = -1;
	if (middle_blocks_model(&m, 256, 1024, 1, err) != 0)
		return -1;
	if (optim_init(&o, &cfg, m.numel, err) == 0) {
		double begin = now_s();
		while (per < 0 || now_s() - begin < window_s) {
			double start = now_s(), elapsed = 0;
			long reps = 0;
			while (elapsed < PROBE_SLICE_S && reps < 100000L) {
				model_zero_grad(&m);
				optim_step(&o, &m, 1.0f);
				reps++;
				elapsed = now_s() - start;
			}
			double t = elapsed / reps / (double)m.numel;
			if (per < 0 || t < per)
				per = t;
		}
		optim_free(&o);
	}
	model_free(&m);
	return per;
}

#define FIT_TERMS 5

/* Solves the k×k system a·x = b (Gaussian elimination, partial pivoting); -1 if singular. */
static int solve(int k, double a[FIT_TERMS][FIT_TERMS], double b[FIT_TERMS], double x[FIT_TERMS])
{
	for (int c = 0; c < k; c++) {
		int p = c;
		for (int r = c + 1; r < k; r++)
			if (fabs(a[r][c]) > fabs(a[p][c]))
				p = r;
		if (fabs(a[p][c]) < 1e-300)
			return -1;
		for (int j = 0; j < k; j++) {
			double t = a[c][j];
			a[c][j] = a[p][j];
			a[p][j] = t;
		}
		double t = b[c];
		b[c] = b[p];
		b[p] = t;
		for (int r = c + 1; r < k; r++) {
			double f = a[r][c] / a[c][c];
			for (int j = c; j < k; j++)
				a[r][j] -= f * a[c][j];
			b[r] -= f * b[c];
		}
	}
	for (int r = k - 1; r >= 0; r--) {
		double s = b[r];
		for (int j = r + 1; j < k; j++)
			s -= a[r][j] * x[j];
		x[r] = s / a[r][r];
	}
	return 0;
}

/* Fits the block cost (probe.h) to the measured times, minimising relative error; a
 * negative coefficient (noise) is dropped and the rest refitted. */
void probe_block_shape(int i, int shape[3])
{
	memcpy(shape, BLOCK_SHAPES[i], sizeof BLOCK_SHAPES[i]);
}

int probe_block_fit(const double times[PROBE_BLOCK_SHAPES], struct probe_result *r)
{
	int use[FIT_TERMS] = {1, 1, 1, 1, 1};
	double x[FIT_TERMS] = {0};
	for (int round = 0; round < FIT_TERMS; round++) {
		double a[FIT_TERMS][FIT_TERMS] = {{0}}, b[FIT_TERMS] = {0}, xs[FIT_TERMS] = {0};
		int idx[FIT_TERMS], k = 0;
		for (int j = 0; j < FIT_TERMS; j++)
			if (use[j])
				idx[k++] = j;
		for (int s = 0; s < PROBE_BLOCK_SHAPES; s++) {
			double n = BLOCK_SHAPES[s][0], d = BLOCK_SHAPES[s][1],
			       f = BLOCK_SHAPES[s][2];
			double feat[FIT_TERMS] = {n * d * f, d * f, n * f, n * d, 1};
			double w = 1 / times[s];
			for (int i = 0; i < k; i++) {
				for (int j = 0; j < k; j++)
					a[i][j] += feat[idx[i]] * w * feat[idx[j]] * w;
				b[i] += feat[idx[i]] * w * times[s] * w;
			}
		}
		if (solve(k, a, b, xs) != 0)
			return -1;
		memset(x, 0, sizeof x);
		int negative = -1;
		for (int i = 0; i < k; i++)
			x[idx[i]] = xs[i];
		/* drop the most negative term other than the matmuls' (the one that must stay) */
		for (int i = 0; i < k; i++)
			if (idx[i] != 0 && xs[i] < 0 && (negative < 0 || xs[i] < x[negative]))
				negative = idx[i];
		if (negative < 0)
			break;
		use[negative] = 0;
		x[negative] = 0;
	}
	r->block_mac_s = x[0], r->block_weight_s = x[1], r->block_hidden_s = x[2];
	r->block_model_s = x[3], r->block_call_s = x[4];
	r->block_fit_error = 0;
	for (int s = 0; s < PROBE_BLOCK_SHAPES; s++) {
		double n = BLOCK_SHAPES[s][0], d = BLOCK_SHAPES[s][1], f = BLOCK_SHAPES[s][2];
		double fit = x[0] * n * d * f + x[1] * d * f + x[2] * n * f + x[3] * n * d + x[4];
		r->block_fit_error = fmax(r->block_fit_error, fabs(fit - times[s]) / times[s]);
	}
	if (x[0] > 0)
		return 0;
	/* noise left no positive matmul term: cost the block by its matmuls alone */
	double num = 0, den = 0;
	for (int s = 0; s < PROBE_BLOCK_SHAPES; s++) {
		double mac = (double)BLOCK_SHAPES[s][0] * BLOCK_SHAPES[s][1] * BLOCK_SHAPES[s][2];
		num += mac / times[s];
		den += mac * mac / (times[s] * times[s]);
	}
	memset(x, 0, sizeof x);
	x[0] = den > 0 ? num / den : 0;
	r->block_mac_s = x[0], r->block_weight_s = r->block_hidden_s = r->block_model_s = 0;
	r->block_call_s = 0;
	r->block_fit_error = 0;
	for (int s = 0; s < PROBE_BLOCK_SHAPES; s++) {
		double mac = (double)BLOCK_SHAPES[s][0] * BLOCK_SHAPES[s][1] * BLOCK_SHAPES[s][2];
		r->block_fit_error =
		    fmax(r->block_fit_error, fabs(x[0] * mac - times[s]) / times[s]);
	}
	return x[0] > 0 ? 0 : -1;
}

int probe_block_misfits(const double times[PROBE_BLOCK_SHAPES], const struct probe_result *r,
                        double limit, int max, int again[PROBE_BLOCK_SHAPES])
{
	double off[PROBE_BLOCK_SHAPES];
	for (int s = 0; s < PROBE_BLOCK_SHAPES; s++) {
		double n = BLOCK_SHAPES[s][0], d = BLOCK_SHAPES[s][1], f = BLOCK_SHAPES[s][2];
		double fit = r->block_mac_s * n * d * f + r->block_weight_s * d * f +
		             r->block_hidden_s * n * f + r->block_model_s * n * d + r->block_call_s;
		off[s] = fabs(fit - times[s]) / times[s];
		again[s] = 0;
	}
	int count = 0;
	while (count < max) {
		int worst = -1;
		for (int s = 0; s < PROBE_BLOCK_SHAPES; s++)
			if (!again[s] && off[s] > limit && (worst < 0 || off[s] > off[worst]))
				worst = s;
		if (worst < 0)
			break;
		again[worst] = 1;
		count++;
	}
	return count;
}

/* Reads exactly len bytes from fd before deadline_s (monotonic). */
static int read_full(int fd, void *buf, size_t len, double deadline_s)
{
	size_t got = 0;
	while (got < len) {
		double left = deadline_s - now_s();
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (left <= 0)
			return YARD_ETIMEDOUT;
		int rc = poll(&p, 1, (int)(left * 1000) + 1);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			return rc == 0 ? YARD_ETIMEDOUT : YARD_EIO;
		ssize_t r = read(fd, (char *)buf + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return YARD_EIO;
		got += (size_t)r;
	}
	return 0;
}

static void reap(const pid_t *pids, int n)
{
	for (int k = 0; k < n; k++)
		if (pids[k] > 0) {
			kill(pids[k], SIGKILL);
			waitpid(pids[k], NULL, 0);
		}
}

/* The GEMM the concurrency measurement runs: big enough to be compute-bound, small enough
 * for many calls in a short window. */
#define CONCURRENT_SHAPE 4

/* k processes run the same GEMM at once, released together; the sum of their sustained
 * rates, and of their best-slice rates. The one-process reference is measured the same way
 * (a fresh process, the same window), so that a scheduler's favour for a newly woken process
 * biases both alike. */
static int concurrent_rate(int k, double window_s, double deadline_s, double *sum, double *best_sum,
                           struct yard_err *err)
{
	int results[2], go[2];
	pid_t pids[PROBE_MAX_CONCURRENT] = {0};
	if (pipe(results) != 0 || pipe(go) != 0)
		return yard_err_set(err, YARD_EIO, "probe: pipe: %s", strerror(errno));
	for (int c = 0; c < k; c++) {
		pids[c] = fork();
		if (pids[c] < 0) {
			reap(pids, c);
			return yard_err_set(err, YARD_EIO, "probe: fork: %s", strerror(errno));
		}
		if (pids[c] == 0) {
			struct gemm_bench g;
			double t0 = 0, rate[2];
			close(go[1]);
			close(results[0]);
			if (gemm_setup(&g, GEMM_SHAPES[CONCURRENT_SHAPE]) != 0)
				_exit(1);
			/* wait for the release; it names the window's start, the same for every
			 * child */
			if (read_full(go[0], &t0, sizeof t0, deadline_s) != 0)
				_exit(1);
			/* every child measures the same window and computes on for two slices
			 * after it, so that none measures while others have stopped: windows
			 * of their own, begun as each got a core, put 4 processes on 2 cores
			 * at 0.59 of one alone each */
			rate[1] = gemm_run(&g, t0, t0 + window_s, t0 + window_s + 2 * PROBE_SLICE_S,
			                   &rate[0]);
			ssize_t w = write(results[1], rate, sizeof rate);
			_exit(w == (ssize_t)sizeof rate ? 0 : 1);
		}
	}
	close(go[0]);
	close(results[1]);
	/* releases every child at once: each reads the window's start */
	double starts[PROBE_MAX_CONCURRENT], t0 = now_s() + PROBE_SETTLE_S;
	for (int c = 0; c < k; c++)
		starts[c] = t0;
	ssize_t sent = write(go[1], starts, (size_t)k * sizeof starts[0]);
	close(go[1]);
	if (sent != (ssize_t)((size_t)k * sizeof starts[0])) {
		close(results[0]);
		reap(pids, k);
		return yard_err_set(err, YARD_EIO, "probe: releasing the matmul processes: %s",
		                    sent < 0 ? strerror(errno) : "short write");
	}
	*sum = *best_sum = 0;
	int rc = 0;
	for (int c = 0; c < k && rc == 0; c++) {
		double rate[2] = {0};
		rc = read_full(results[0], rate, sizeof rate, deadline_s);
		*sum += rate[0];
		*best_sum += rate[1];
	}
	close(results[0]);
	reap(pids, k);
	if (rc != 0)
		return yard_err_set(err, rc,
		                    "probe: %d concurrent matmul processes did not report "
		                    "within the budget",
		                    k);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of n values (sorts them). */
static double median_of(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Opens the communicator of one forked local rank (the environment libyd reads); exits the
 * process with 3 if it cannot. */
static yd_comm *child_comm(int rank, int world, const char *rendezvous, const char *transport,
                           int timeout_ms)
{
	char errbuf[256] = "", buf[32];
	yd_comm *comm = NULL;
	snprintf(buf, sizeof buf, "%d", rank);
	setenv("YARD_RANK", buf, 1);
	snprintf(buf, sizeof buf, "%d", world);
	setenv("YARD_WORLD_SIZE", buf, 1);
	setenv("YARD_RENDEZVOUS_FILE", rendezvous, 1);
	setenv("YARD_TRANSPORT", transport, 1);
	unsetenv("YARD_PEERS");
	unsetenv("YARD_HOSTS");
	unsetenv("YARD_ALGO");
	/* no calibration of the allreduce algorithms at init: it times every algorithm up to
	 * 4 MiB (seconds on crowded cores), and the probe opens a dozen communicators */
	setenv("YARD_CALIBRATE", "0", 1);
	snprintf(buf, sizeof buf, "%d", timeout_ms);
	setenv("YARD_TIMEOUT_MS", buf, 1);
	if (yd_comm_init_env(&comm, errbuf, sizeof errbuf) != 0)
		_exit(3);
	return comm;
}

struct rank_job {
	int world, timeout_ms;
	const char *rendezvous;
	const void *args;
	/* runs rank `rank` (forked) and _exits; rank 0 writes its answer to out_fd */
	void (*run)(const struct rank_job *job, int rank, int out_fd);
};

/* A rendezvous file for one probe communicator, created in $TMPDIR (/tmp when unset) and
 * unlinked at once: the forked ranks reach it through the descriptor they inherit
 * (/proc/self/fd/N), so a probe killed mid-way (the agent kills one that overruns its
 * budget; a stopped node's processes go with SIGKILL) leaves no file behind. Where /proc
 * cannot reopen it, the name is kept (*named = 1) for the caller to unlink. The caller
 * closes *fd. */
static int rendezvous_create(char *path, size_t len, int *fd, int *named, struct yard_err *err)
{
	const char *dir = getenv("TMPDIR");
	if (dir == NULL || *dir == '\0')
		dir = "/tmp";
	char name[4096], proc[64];
	int n = snprintf(name, sizeof name, "%s/yard-probe-XXXXXX", dir);
	if (n < 0 || (size_t)n >= sizeof name || (size_t)n >= len)
		return yard_err_set(err, YARD_EINVAL, "probe: TMPDIR %s: path too long", dir);
	if ((*fd = mkstemp(name)) < 0)
		return yard_err_set(err, YARD_EIO, "probe: rendezvous file in %s: %s", dir,
		                    strerror(errno));
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", *fd);
	int again = open(proc, O_WRONLY | O_APPEND | O_CLOEXEC);
	*named = again < 0;
	if (again >= 0) {
		close(again);
		unlink(name);
	}
	snprintf(path, len, "%s", *named ? name : proc);
	return 0;
}

/* Forks job->world (≤ PROBE_MAX_CONCURRENT) ranks over a fresh rendezvous file and reads
 * len bytes of rank 0's answer into out before deadline_s: 0, YARD_ETIMEDOUT, or YARD_EIO
 * (a rank failed; err says so only when no rank could start). */
static int run_ranks(struct rank_job *job, void *out, size_t len, double deadline_s,
                     struct yard_err *err)
{
	char rendezvous[4096];
	int fd = -1, named = 0, results[2], forked = 1;
	pid_t pids[PROBE_MAX_CONCURRENT] = {0};
	if (rendezvous_create(rendezvous, sizeof rendezvous, &fd, &named, err) != 0)
		return err->code;
	if (pipe(results) != 0) {
		close(fd);
		if (named)
			unlink(rendezvous);
		return yard_err_set(err, YARD_EIO, "probe: pipe: %s", strerror(errno));
	}
	job->rendezvous = rendezvous;
	for (int r = 0; r < job->world && r < PROBE_MAX_CONCURRENT; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			close(results[0]);
			job->run(job, r, results[1]);
			_exit(0);
		}
		forked = forked && pids[r] > 0;
	}
	close(results[1]);
	int rc = forked ? read_full(results[0], out, len, deadline_s) : YARD_EIO;
	close(results[0]);
	reap(pids, job->world);
	close(fd);
	if (named)
		unlink(rendezvous);
	return rc;
}

/* One rank of a world-rank allreduce probe; rank 0 writes {latency per ring step, bandwidth}
 * to out_fd (bandwidth only for 2 ranks, 0 otherwise). */
static void allreduce_rank(const struct rank_job *job, int rank, int out_fd)
{
	int world = job->world;
	yd_comm *comm = child_comm(rank, world, job->rendezvous, job->args, job->timeout_ms);
	size_t count = world == 2 ? PROBE_BW_BYTES / sizeof(float) : 1;
	float *data = calloc(count, sizeof *data);
	if (data == NULL || yd_allreduce(comm, data, data, count, YD_F32, YD_SUM) != 0 ||
	    yd_allreduce(comm, data, data, 1, YD_F32, YD_SUM) != 0)
		_exit(4);
	/* per-call times, so that a preemption of one call (a loaded machine) moves neither
	 * figure: the median small call is the latency, the fastest large call the bandwidth */
	double lat[PROBE_LAT_REPS], big = 0;
	for (int r = 0; r < PROBE_LAT_REPS; r++) {
		double t0 = now_s();
		if (yd_allreduce(comm, data, data, 1, YD_F32, YD_SUM) != 0)
			_exit(4);
		lat[r] = now_s() - t0;
	}
	for (int r = 0; world == 2 && r < PROBE_BW_REPS; r++) {
		double t0 = now_s();
		if (yd_allreduce(comm, data, data, count, YD_F32, YD_SUM) != 0)
			_exit(4);
		double t = now_s() - t0;
		if (r == 0 || t < big)
			big = t;
	}
	qsort(lat, PROBE_LAT_REPS, sizeof lat[0], cmp_double);
	/* as the planner counts it: a ring allreduce over n ranks takes 2(n-1) steps */
	double latency = lat[PROBE_LAT_REPS / 2] / (2.0 * (world - 1));
	double per = big - 2 * latency;
	if (per <= big / 2) /* latency noise larger than the transfer: count the transfer alone */
		per = big;
	/* ring allreduce over 2 ranks moves the buffer once each way: t = bytes / bw */
	double result[2] = {latency, world == 2 && per > 0 ? PROBE_BW_BYTES / per : 0};
	yd_barrier(comm);
	yd_comm_destroy(comm);
	free(data);
	if (rank == 0 && write(out_fd, result, sizeof result) != (ssize_t)sizeof result)
		_exit(5);
	_exit(0);
}

/* world ranks (≤ PROBE_MAX_CONCURRENT) in as many processes; bw is measured for 2 only. */
static int allreduce_probe(int world, const char *transport, int timeout_ms, double deadline_s,
                           double *latency_s, double *bw, struct yard_err *err)
{
	double result[2] = {0};
	struct rank_job job = {
	    .world = world, .timeout_ms = timeout_ms, .args = transport, .run = allreduce_rank};
	int rc = run_ranks(&job, result, sizeof result, deadline_s, err);
	if (rc != 0 && err->code != 0)
		return rc;
	if (rc != 0)
		return yard_err_set(err, rc,
		                    "probe: the %d-rank %s allreduce did not complete within the "
		                    "budget (%s)",
		                    world, transport,
		                    rc == YARD_ETIMEDOUT ? "timed out" : "a rank failed");
	if (result[0] <= 0 || (world == 2 && result[1] <= 0))
		return yard_err_set(
		    err, YARD_EIO,
		    "probe: the %d-rank %s allreduce measured no time (latency %.3g s, "
		    "bandwidth %.3g B/s)",
		    world, transport, result[0], result[1]);
	*latency_s = result[0];
	if (bw != NULL)
		*bw = result[1];
	return 0;
}

/* Work of a fixed size for the sync probe: calls of a small GEMM (the size of a few rows of
 * a narrow block, as a pipeline chunk or a tensor-parallel shard of the trainer computes
 * between two messages). */
#define SYNC_SHAPE 1
static void compute_calls(float *buf, long calls)
{
	const int *s = GEMM_SHAPES[SYNC_SHAPE];
	size_t ni = (size_t)s[0] * s[1], oi = (size_t)s[2] * s[1];
	for (long c = 0; c < calls; c++)
		model_matmul_forward(buf + ni + oi, buf, buf + ni, NULL, s[0], s[1], s[2]);
}

/* One rank of the sync probe: PROBE_SYNC_ROUNDS rounds of two phases between barriers, each
 * PROBE_SYNC_ITERS times a fixed amount of work (calls): alone (phase 0), or with an
 * exchange of one float (phase 1): a ring exchange (isend to the next rank before the work,
 * receive from the previous one after it, as a pipeline stage does) or a blocking one-float
 * allreduce after the work (as tensor-parallel ranks do), every rank at once. Phases
 * alternate so that both see the machine alike; the difference per iteration is what an
 * exchange adds in the trainer's pattern: in wall time (waits, spins, sleeps, wake-ups) and
 * in CPU time (spins, system calls, the progress thread's switches). Rank 0 writes {its
 * wall difference, the ranks' mean CPU difference} to out_fd. */
struct sync_args {
	long calls;    /* of the GEMM between two exchanges */
	int allreduce; /* 1: a one-float allreduce, 0: a ring exchange */
};

static void sync_rank(const struct rank_job *job, int rank, int out_fd)
{
	const struct sync_args *args = job->args;
	int world = job->world;
	long calls = args->calls;
	int allreduce = args->allreduce;
	const int *s = GEMM_SHAPES[SYNC_SHAPE];
	float *work =
	    calloc((size_t)s[0] * s[1] + (size_t)s[2] * s[1] + (size_t)s[0] * s[2], sizeof *work);
	yd_comm *comm = child_comm(rank, world, job->rendezvous, "shm", job->timeout_ms);
	if (work == NULL)
		_exit(3);
	/* [phase]: 0 the work alone, 1 followed by the exchange */
	double wall_s[2] = {0, 0}, cpu_s[2] = {0, 0};
	float token = 0, got = 0;
	for (int round = 0; round < PROBE_SYNC_ROUNDS; round++)
		for (int phase = 0; phase < 2; phase++) {
			if (yd_barrier(comm) != 0)
				_exit(4);
			double t0 = now_s(), c0 = process_cpu_s();
			for (int k = 0; k < PROBE_SYNC_ITERS; k++) {
				yd_request *req = NULL;
				int tag = round * PROBE_SYNC_ITERS + k;
				/* as a pipeline stage: the send leaves before the work, the
				 * receive waits after it */
				if (phase == 1 && !allreduce &&
				    yd_isend(comm, &token, 1, YD_F32, (rank + 1) % world, tag,
				             &req) != 0)
					_exit(4);
				compute_calls(work, calls);
				if (phase == 0)
					continue;
				if (allreduce
				        ? yd_allreduce(comm, &token, &got, 1, YD_F32, YD_SUM) != 0
				        : yd_recv(comm, &got, 1, YD_F32, (rank + world - 1) % world,
				                  tag) != 0 ||
				              yd_wait(req) != 0)
					_exit(4);
			}
			if (yd_barrier(comm) != 0)
				_exit(4);
			wall_s[phase] += now_s() - t0;
			cpu_s[phase] += process_cpu_s() - c0;
		}
	/* {wall, cpu} per exchange: rank 0's wall, the ranks' mean CPU */
	double n = PROBE_SYNC_ROUNDS * PROBE_SYNC_ITERS;
	double cpu = (cpu_s[1] - cpu_s[0]) / n, result[2] = {(wall_s[1] - wall_s[0]) / n, 0};
	if (yd_allreduce(comm, &cpu, &result[1], 1, YD_F64, YD_SUM) != 0)
		_exit(4);
	result[1] /= world;
	yd_comm_destroy(comm);
	free(work);
	if (rank == 0 && write(out_fd, result, sizeof result) != (ssize_t)sizeof result)
		_exit(5);
	_exit(0);
}

/* Calls of the sync probe's GEMM that take about PROBE_SYNC_WORK_S in this process. */
static long sync_calls(void)
{
	const int *s = GEMM_SHAPES[SYNC_SHAPE];
	float *work =
	    calloc((size_t)s[0] * s[1] + (size_t)s[2] * s[1] + (size_t)s[0] * s[2], sizeof *work);
	long calls = 1;
	if (work == NULL)
		return 0;
	compute_calls(work, 16); /* warm */
	for (int k = 0; k < 20; k++) {
		double t0 = now_s();
		compute_calls(work, calls);
		if (now_s() - t0 >= PROBE_SYNC_WORK_S)
			break;
		calls *= 2;
	}
	double t0 = now_s();
	compute_calls(work, calls);
	double per_call = (now_s() - t0) / calls;
	free(work);
	calls = per_call > 0 ? (long)(PROBE_SYNC_WORK_S / per_call) : calls;
	return calls > 0 ? calls : 1;
}

/* The cost of one exchange between world processes of this node in the trainer's pattern
 * (see sync_rank). */
static int sync_probe(int world, long calls, int allreduce, int timeout_ms, double deadline_s,
                      double *wall_s, double *cpu_s, struct yard_err *err)
{
	double result[2] = {0, 0};
	struct sync_args args = {.calls = calls, .allreduce = allreduce};
	struct rank_job job = {
	    .world = world, .timeout_ms = timeout_ms, .args = &args, .run = sync_rank};
	int rc = run_ranks(&job, result, sizeof result, deadline_s, err);
	if (rc != 0 && err->code != 0)
		return rc;
	if (rc != 0)
		return yard_err_set(err, rc,
		                    "probe: the %d-process %s (sync) probe did not complete "
		                    "within the budget (%s)",
		                    world, allreduce ? "allreduce" : "exchange",
		                    rc == YARD_ETIMEDOUT ? "timed out" : "a rank failed");
	/* a difference of two timings: noise can make it slightly negative on an idle node */
	*wall_s = fmax(0, result[0]);
	*cpu_s = fmax(0, result[1]);
	return 0;
}

int probe_run(int devices, int budget_ms, struct probe_result *out, struct yard_err *err)
{
	double start = now_s();
	double budget_s = budget_ms / 1000.0;
	/* budget shares: 2 allreduces (mostly connection set-up) 10% each, concurrency
	 * 3 × (2.5% + 2.5%), the GEMM curve 15%, blocks 40%, optimisers 5% each; the sync
	 * probes take a fixed 3 × (~10 + ~25) ms (2 and 4 devices: PROBE_SYNC_ROUNDS × 2 ×
	 * PROBE_SYNC_ITERS × ~100 µs of work, shared by the processes) */
	double window_s = budget_s * 0.15 / PROBE_GEMM_POINTS;
	double block_window_s = budget_s * 0.40 / PROBE_BLOCK_SHAPES;
	double block_times[PROBE_BLOCK_SHAPES], block_spent_s = 0, block_best_s = 0;
	int rc;
	memset(out, 0, sizeof *out);
	if (devices < 1 || budget_ms < 100)
		return yard_err_set(err, YARD_EINVAL,
		                    "probe: devices %d and budget %d ms must be ≥ 1 and ≥ 100",
		                    devices, budget_ms);
#ifdef HAVE_OPENBLAS
	openblas_set_num_threads(1); /* one process per device, as ranks run */
#endif
	fflush(NULL); /* forked children must not flush the parent's buffers */
	/* a loaded machine may be slow to schedule the helpers: the communicator gets at least
	 * two seconds, so the probe stays bounded (a few seconds) without failing under load */
	int comm_timeout_ms = budget_ms / 4 > 2000 ? budget_ms / 4 : 2000;
	int all = devices < PROBE_MAX_CONCURRENT ? devices : PROBE_MAX_CONCURRENT;
	if ((rc = allreduce_probe(2, "shm", comm_timeout_ms, now_s() + comm_timeout_ms / 500.0,
	                          &out->shm_latency_s, &out->shm_bw_bytes_per_s, err)) != 0 ||
	    (rc = allreduce_probe(2, "tcp", comm_timeout_ms, now_s() + comm_timeout_ms / 500.0,
	                          &out->tcp_latency_s, &out->tcp_bw_bytes_per_s, err)) != 0)
		return rc;
	out->shm_busy_latency_s = out->shm_latency_s;
	if (all > 2 &&
	    (rc = allreduce_probe(all, "shm", comm_timeout_ms, now_s() + comm_timeout_ms / 500.0,
	                          &out->shm_busy_latency_s, NULL, err)) != 0)
		return rc;
	out->gemm_points = PROBE_GEMM_POINTS;
	for (int p = 0; p < PROBE_GEMM_POINTS; p++) {
		const int *s = GEMM_SHAPES[p];
		out->gemm_call_flops[p] = 2.0 * s[0] * s[1] * s[2];
		out->gemm_flops_per_s[p] = gemm_rate(s, window_s, NULL);
		if (out->gemm_flops_per_s[p] <= 0)
			return yard_err_set(err, YARD_ENOMEM,
			                    "probe: no memory for a %dx%dx%d GEMM", s[0], s[1],
			                    s[2]);
	}
	out->flops_per_s = out->gemm_flops_per_s[PROBE_GEMM_POINTS - 1];
	for (int b = 0; b < PROBE_BLOCK_SHAPES; b++)
		if ((block_times[b] = block_time(BLOCK_SHAPES[b], block_window_s, &block_spent_s,
		                                 &block_best_s, err)) <= 0)
			return err->code ? err->code : YARD_EINTERNAL;
	int again[PROBE_BLOCK_SHAPES];
	if (probe_block_fit(block_times, out) == 0 &&
	    probe_block_misfits(block_times, out, PROBE_BLOCK_MISFIT, PROBE_BLOCK_RETIMES, again) >
	        0) {
		/* once more for the shapes farthest out of line, keeping the faster time of the two
		 * (other work only slows a window): with the agent's budget a window is 60 ms, two
		 * or three passes of the largest block, and one slow window bends every term. At
		 * most two, so that a loaded machine, where many windows are slowed, does not
		 * stretch a probe the agent stops after 5 s */
		for (int b = 0; b < PROBE_BLOCK_SHAPES; b++) {
			if (!again[b])
				continue;
			double t = block_time(BLOCK_SHAPES[b], block_window_s, &block_spent_s,
			                      &block_best_s, err);
			if (t <= 0)
				return err->code ? err->code : YARD_EINTERNAL;
			block_times[b] = fmin(block_times[b], t);
		}
	}
	if (probe_block_fit(block_times, out) != 0)
		return yard_err_set(err, YARD_EINTERNAL,
		                    "probe: block times do not fit a cost model (largest %.3g s)",
		                    block_times[PROBE_BLOCK_SHAPES - 1]);
	if ((out->adamw_s_per_param = optim_time(OPTIM_ADAMW, budget_s * 0.05, err)) <= 0 ||
	    (out->sgd_s_per_param = optim_time(OPTIM_SGD, budget_s * 0.05, err)) <= 0)
		return err->code ? err->code : YARD_EINTERNAL;
	/* what other programs leave of the cores moves from one moment to the next (a test
	 * suite starting its processes, a build): the figures that depend on it are measured
	 * in PROBE_SHARE_ROUNDS rounds spread over the probe's end, and the median is kept */
	long calls = sync_calls();
	if (calls <= 0)
		return yard_err_set(err, YARD_ENOMEM, "probe: no memory for the sync probe's GEMM");
	/* [kind][round]: kind 0 a ring exchange (isend, recv), 1 a one-float allreduce; wall
	 * and CPU with 2 processes and with every device's */
	double wall2[2][PROBE_SHARE_ROUNDS], cpu2[2][PROBE_SHARE_ROUNDS];
	double wall_all[2][PROBE_SHARE_ROUNDS], cpu_all[2][PROBE_SHARE_ROUNDS];
	double alone_share[PROBE_SHARE_ROUNDS];
	double alone_max = 0, sum_max = 0; /* the rounds' best: other work only slows a round */
	double share_window_s = fmax(budget_s * 0.05 / 2, PROBE_SHARE_WINDOW_S);
	for (int round = 0; round < PROBE_SHARE_ROUNDS; round++) {
		double alone = 0, alone_best = 0, sum = 0, best_sum = 0;
		for (int kind = 0; kind < 2; kind++) {
			if ((rc = sync_probe(2, calls, kind, comm_timeout_ms,
			                     now_s() + comm_timeout_ms / 500.0, &wall2[kind][round],
			                     &cpu2[kind][round], err)) != 0)
				return rc;
			wall_all[kind][round] = wall2[kind][round];
			cpu_all[kind][round] = cpu2[kind][round];
			if (all > 2 && (rc = sync_probe(all, calls, kind, comm_timeout_ms,
			                                now_s() + comm_timeout_ms / 500.0,
			                                &wall_all[kind][round],
			                                &cpu_all[kind][round], err)) != 0)
				return rc;
		}
		if ((rc = concurrent_rate(1, share_window_s, now_s() + budget_s + 5, &alone,
		                          &alone_best, err)) != 0)
			return rc;
		alone_share[round] = alone_best > 0 ? fmin(1, alone / alone_best) : 0;
		alone_max = fmax(alone_max, alone);
		if (all > 1) {
			if ((rc = concurrent_rate(all, share_window_s, now_s() + budget_s + 5, &sum,
			                          &best_sum, err)) != 0)
				return rc;
			sum_max = fmax(sum_max, sum);
		}
	}
	/* a round whose processes got no core within the window counts for nothing (the rounds'
	 * best is kept); with none, the machine was too busy to say what its devices get */
	if (alone_max <= 0 || (all > 1 && sum_max <= 0))
		return yard_err_set(err, YARD_ETIMEDOUT,
		                    "probe: the matmul processes got no core within any of the %d "
		                    "%.0f ms windows (%s): the machine is too busy to measure what "
		                    "its devices get",
		                    PROBE_SHARE_ROUNDS, share_window_s * 1000,
		                    alone_max <= 0 ? "one alone" : "all at once");
	out->devices = all;
	out->shm_sync_s = median_of(wall2[0], PROBE_SHARE_ROUNDS);
	out->shm_busy_sync_s = median_of(wall_all[0], PROBE_SHARE_ROUNDS);
	out->shm_sync_cpu_s = median_of(cpu2[0], PROBE_SHARE_ROUNDS);
	out->shm_busy_sync_cpu_s = median_of(cpu_all[0], PROBE_SHARE_ROUNDS);
	out->shm_allreduce_sync_s = median_of(wall2[1], PROBE_SHARE_ROUNDS);
	out->shm_allreduce_sync_cpu_s = median_of(cpu2[1], PROBE_SHARE_ROUNDS);
	out->shm_busy_allreduce_sync_cpu_s = median_of(cpu_all[1], PROBE_SHARE_ROUNDS);
	/* what all devices get at once against what one gets alone, each at its best round: a
	 * median of per-round ratios took the ratio of two short windows that other programs
	 * disturb independently (0.27 and 0.50 in two probes a minute apart on 2 cores, 4
	 * devices), and a low figure halves the node's capacity in every prediction */
	out->parallel_efficiency =
	    all > 1 ? (alone_max > 0 ? fmin(1, sum_max / (all * alone_max)) : 0) : 1;
	/* over the block windows (40% of the budget) and the lone processes' windows: the
	 * blocks' best-slice costs times this is what the trainer gets over a run */
	double alone_s = median_of(alone_share, PROBE_SHARE_ROUNDS) * share_window_s;
	out->availability = fmin(1, (block_best_s + alone_s) / (block_spent_s + share_window_s));
	out->elapsed_s = now_s() - start;
	return 0;
}

json_t *probe_to_json(const struct probe_result *r)
{
	json_t *gemm = json_array();
	for (int p = 0; p < r->gemm_points; p++)
		json_array_append_new(
		    gemm, json_pack("[f,f]", r->gemm_call_flops[p], r->gemm_flops_per_s[p]));
	json_t *block =
	    json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "mac_s", r->block_mac_s, "weight_s",
	              r->block_weight_s, "hidden_s", r->block_hidden_s, "model_s", r->block_model_s,
	              "call_s", r->block_call_s, "fit_error", r->block_fit_error);
	json_t *optim =
	    json_pack("{s:f,s:f}", "adamw", r->adamw_s_per_param, "sgd", r->sgd_s_per_param);
	json_t *o = json_pack(
	    "{s:f,s:o,s:o,s:o,s:f,s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:i}", "flops_per_s", r->flops_per_s,
	    "gemm", gemm, "block", block, "optim_s_per_param", optim, "parallel_efficiency",
	    r->parallel_efficiency, "availability", r->availability, "devices", r->devices,
	    "intra_bw_bytes_per_s", r->shm_bw_bytes_per_s, "intra_latency_s", r->shm_latency_s,
	    "intra_busy_latency_s", r->shm_busy_latency_s, "tcp_bw_bytes_per_s",
	    r->tcp_bw_bytes_per_s, "tcp_latency_s", r->tcp_latency_s, "probe_ms",
	    (int)(r->elapsed_s * 1000));
	json_object_set_new(o, "intra_sync_s", json_real(r->shm_sync_s));
	json_object_set_new(o, "intra_busy_sync_s", json_real(r->shm_busy_sync_s));
	json_object_set_new(o, "intra_sync_cpu_s", json_real(r->shm_sync_cpu_s));
	json_object_set_new(o, "intra_busy_sync_cpu_s", json_real(r->shm_busy_sync_cpu_s));
	json_object_set_new(o, "intra_allreduce_sync_s", json_real(r->shm_allreduce_sync_s));
	json_object_set_new(o, "intra_allreduce_sync_cpu_s",
	                    json_real(r->shm_allreduce_sync_cpu_s));
	json_object_set_new(o, "intra_busy_allreduce_sync_cpu_s",
	                    json_real(r->shm_busy_allreduce_sync_cpu_s));
	return o;
}
