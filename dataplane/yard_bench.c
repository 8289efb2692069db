/* yard_bench.c: yard-bench, collective benchmarks in the style of nccl-tests. Forks N local
 * ranks (rendezvous through a temp file; host labels emulate several hosts), runs each size
 * warmup + iters times, and prints per size: bytes, count, type, algo, time (us, slowest
 * rank), algbw and busbw (GB/s, nccl-tests definitions) and #wrong, from checking the
 * result of every size against a reference. -o json prints one JSON object instead.
 * --device cuda puts the buffers in GPU memory (rank r on GPU r mod count): the times then
 * include libyd's staging copies or NCCL (YARD_NCCL), as an application would see them.
 *
 * --algo A,B,... (allreduce) compares algorithms in one launch: per size, each warms up
 * (`auto` tunes then), then --rounds rounds run every algorithm's --iters calls in turn (the
 * order rotating from round to round), so that the machine's load, the page state and the
 * processes are the same for all of them; each line's time is the median of its rounds
 * (per round the slowest rank's mean call). Separate launches of one algorithm each differ by
 * 30-90 % from launch to launch on a shared 2-core machine, more than the algorithms differ. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "dataplane/yd.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

struct opts {
	const char *coll, *transport, *algo, *hosts, *dtype_name, *out;
	int ranks, iters, warmup, dtype;
	int rounds; /* --rounds: rounds of a comparison (--algo A,B,...) */
	int nalgo;  /* algorithms compared; 0: one, o->algo */
	enum yd_algo algos[YD_ALGO_COUNT];
	int cuda;     /* --device cuda */
	int in_place; /* --in-place: an allreduce's result over its input */
	size_t min, max, factor;
};

/* --OPT N: a whole number in [lo, hi]; anything else exits 2 naming the option */
static int opt_int(const char *opt, const char *arg, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < lo || v > hi) {
		fprintf(stderr, "yard-bench: --%s %s: want a whole number from %ld to %ld\n", opt,
		        arg, lo, hi);
		exit(2);
	}
	return (int)v;
}

/* --OPT SIZE: bytes, with an optional K, M or G (powers of 1024), from 1 to 16G */
static size_t opt_size(const char *opt, const char *arg)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	switch (*end) {
	case 'K':
	case 'k':
		v *= 1024;
		end++;
		break;
	case 'M':
	case 'm':
		v *= 1024 * 1024;
		end++;
		break;
	case 'G':
	case 'g':
		v *= 1024.0 * 1024 * 1024;
		end++;
		break;
	default:
		break;
	}
	if (errno || end == arg || *end || !(v >= 1 && v <= 16.0 * 1024 * 1024 * 1024)) {
		fprintf(stderr, "yard-bench: --%s %s: want a size from 1 to 16G (K, M, G: 1024s)\n",
		        opt, arg);
		exit(2);
	}
	return (size_t)v;
}

static double val(int rank, size_t i)
{
	return (double)((rank * 7 + (int)(i % 11)) % 13) - 6;
}

static void set(void *b, int dt, size_t i, double v)
{
	switch (dt) {
	case YD_F32:
		((float *)b)[i] = (float)v;
		break;
	case YD_F64:
		((double *)b)[i] = v;
		break;
	case YD_I32:
		((int32_t *)b)[i] = (int32_t)v;
		break;
	case YD_I64:
		((int64_t *)b)[i] = (int64_t)v;
		break;
	case YD_F16: {
		_Float16 h = (_Float16)(float)v;
		memcpy((char *)b + 2 * i, &h, 2);
		break;
	}
	default: { /* bf16: small integers are exact, truncation is exact */
		float f = (float)v;
		uint32_t u;
		memcpy(&u, &f, 4);
		((uint16_t *)b)[i] = (uint16_t)(u >> 16);
	}
	}
}

static int same(const void *b, int dt, size_t i, double v)
{
	char tmp[8];
	size_t esz = yd_dtype_size(dt);
	set(tmp, dt, 0, v);
	return memcmp((const char *)b + i * esz, tmp, esz) == 0;
}

/* Copies for --device cuda (never called otherwise). */
static int to_device(void *dev, const void *host, size_t bytes)
{
#ifdef HAVE_CUDA
	cudaError_t e = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
	if (e != cudaSuccess)
		fprintf(stderr, "copy to GPU: %s\n", cudaGetErrorString(e));
	return e != cudaSuccess;
#else
	(void)dev;
	(void)host;
	(void)bytes;
	return 1;
#endif
}

static int to_host(void *host, const void *dev, size_t bytes)
{
#ifdef HAVE_CUDA
	cudaError_t e = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
	if (e != cudaSuccess)
		fprintf(stderr, "copy from GPU: %s\n", cudaGetErrorString(e));
	return e != cudaSuccess;
#else
	(void)host;
	(void)dev;
	(void)bytes;
	return 1;
#endif
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* --algo A,B,...: one size of an allreduce comparison (the head of the file says how). Every
 * algorithm's result is checked once more at the end, into an output filled with a value no
 * sum of the inputs can take. */
static int compare_size(yd_comm *c, const struct opts *o, size_t size, char *in, char *out,
                        char *din, char *dout, int json, int *first)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c), dt = o->dtype, na = o->nalgo;
	size_t esz = yd_dtype_size(dt), count = size / esz, bytes = count * esz;
	size_t nt = (size_t)o->rounds * (size_t)na;
	double *t = calloc(nt, sizeof *t), *tmax = calloc(nt, sizeof *tmax);
	int64_t wrong[YD_ALGO_COUNT] = {0}, wsum[YD_ALGO_COUNT] = {0};
	char chosen[32] = "";
	int rc = !t || !tmax;
	for (size_t i = 0; i < count && rc == 0; i++)
		set(in, dt, i, val(me, i));
	if (rc == 0 && din != in)
		rc = to_device(din, in, bytes);
	for (int j = 0; j < na && rc == 0; j++) {
		yd_comm_set_algo(c, o->algos[j]);
		for (int w = 0; w < o->warmup && rc == 0; w++)
			rc = yd_allreduce(c, din, dout, count, dt, YD_SUM);
	}
	for (int r = 0; r < o->rounds && rc == 0; r++)
		for (int k = 0; k < na && rc == 0; k++) {
			int j = (k + r) % na;
			yd_comm_set_algo(c, o->algos[j]);
			rc = yd_barrier(c);
			uint64_t t0 = yard_now_mono_ns();
			for (int it = 0; it < o->iters && rc == 0; it++)
				rc = yd_allreduce(c, din, dout, count, dt, YD_SUM);
			t[(size_t)r * na + j] = (double)(yard_now_mono_ns() - t0) / 1e3 / o->iters;
		}
	for (int j = 0; j < na && rc == 0; j++) {
		for (size_t i = 0; i < count; i++)
			set(out, dt, i, 1000);
		if (dout != out)
			rc = to_device(dout, out, bytes);
		yd_comm_set_algo(c, o->algos[j]);
		if (rc == 0)
			rc = yd_allreduce(c, din, dout, count, dt, YD_SUM);
		if (o->algos[j] == YD_ALGO_AUTO)
			snprintf(chosen, sizeof chosen, "auto:%s",
			         yd_algo_name(yd_allreduce_algo(c, count, dt)));
		if (rc == 0 && dout != out)
			rc = to_host(out, dout, bytes);
		for (size_t i = 0; i < count && rc == 0; i++) {
			double want = 0;
			for (int r = 0; r < n; r++)
				want += val(r, i);
			wrong[j] += !same(out, dt, i, want);
		}
	}
	if (rc == 0)
		rc = yd_allreduce(c, t, tmax, nt, YD_F64, YD_MAX);
	if (rc == 0)
		rc = yd_allreduce(c, wrong, wsum, (size_t)na, YD_I64, YD_SUM);
	if (rc) {
		fprintf(stderr, "rank %d: %s\n", me, yd_comm_last_error(c));
		free(t);
		free(tmax);
		return 1;
	}
	for (int j = 0; j < na && me == 0; j++) {
		double *v = t; /* this algorithm's rounds, sorted */
		for (int r = 0; r < o->rounds; r++)
			v[r] = tmax[(size_t)r * na + j];
		qsort(v, (size_t)o->rounds, sizeof *v, cmp_double);
		int m = o->rounds / 2;
		double us = o->rounds % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
		double algbw = us > 0 ? (double)bytes / us / 1e3 : 0, busf = 2.0 * (n - 1) / n;
		const char *an = o->algos[j] == YD_ALGO_AUTO ? chosen : yd_algo_name(o->algos[j]);
		if (json)
			printf("%s{\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"algo\":\"%s\","
			       "\"time_us\":%.2f,\"min_us\":%.2f,\"max_us\":%.2f,\"rounds\":%d,"
			       "\"algbw\":%.3f,\"busbw\":%.3f,\"wrong\":%lld}",
			       *first ? "" : ",", bytes, count, yd_dtype_name(dt), an, us, v[0],
			       v[o->rounds - 1], o->rounds, algbw, algbw * busf,
			       (long long)wsum[j]);
		else
			printf(" %12zu %12zu %6s %9s %10.2f %8.3f %8.3f %7lld\n", bytes, count,
			       yd_dtype_name(dt), an, us, algbw, algbw * busf, (long long)wsum[j]);
		*first = 0;
	}
	fflush(stdout);
	yd_comm_set_algo(c, YD_ALGO_AUTO);
	free(t);
	free(tmax);
	return 0;
}

static int run_rank(yd_comm *c, const struct opts *o)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c), dt = o->dtype;
	size_t esz = yd_dtype_size(dt);
	int json = o->out && strcmp(o->out, "json") == 0, first = 1;
	if (o->algo && !o->nalgo)
		yd_comm_set_algo(c, (enum yd_algo)yd_algo_parse(o->algo));
	size_t maxb = o->max + (size_t)n * esz * 2;
	char *in = malloc(maxb), *out = malloc(maxb);
	if (!in || !out)
		return 1;
	char *din = in, *dout = out; /* what the collectives see */
#ifdef HAVE_CUDA
	if (o->cuda) {
		int ngpu = yd_cuda_device_count();
		if (yd_comm_use_cuda(c) != 0 || ngpu < 1) {
			fprintf(stderr, "rank %d: --device cuda: %s\n", me, yd_comm_last_error(c));
			return 1;
		}
		cudaError_t e = cudaSetDevice(me % ngpu);
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&din, maxb);
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&dout, maxb);
		if (e != cudaSuccess) {
			fprintf(stderr, "rank %d: --device cuda: GPU %d: %s\n", me, me % ngpu,
			        cudaGetErrorString(e));
			return 1;
		}
	}
#endif
	if (me == 0) {
		if (json)
			printf("{\"collective\":\"%s\",\"ranks\":%d,\"transport\":\"%s\",\"dtype\":"
			       "\"%s\",\"device\":\"%s\","
			       "\"results\":[",
			       o->coll, n, o->transport ? o->transport : "auto", yd_dtype_name(dt),
			       o->cuda ? "cuda" : "cpu");
		else
			printf("# yard-bench %s: %d ranks, transport %s%s%s, algo %s%s\n"
			       "#%12s %12s %6s %9s %10s %8s %8s %7s\n",
			       o->coll, n, o->transport ? o->transport : "auto",
			       o->hosts ? ", hosts " : "", o->hosts ? o->hosts : "",
			       o->algo ? o->algo : "auto", o->cuda ? ", buffers on GPU" : "",
			       "size", "count", "type", "algo", "time(us)", "algbw", "busbw",
			       "#wrong");
	}
	for (size_t size = o->min; size <= o->max; size *= o->factor) {
		if (o->nalgo) {
			if (compare_size(c, o, size, in, out, din, dout, json, &first) != 0)
				return 1;
			if (o->factor < 2)
				break;
			continue;
		}
		size_t count = size / esz, per = count;
		if (!strcmp(o->coll, "reduce_scatter") || !strcmp(o->coll, "allgather"))
			per = count / (size_t)n;
		size_t total = !strcmp(o->coll, "reduce_scatter") || !strcmp(o->coll, "allgather")
		                   ? per * (size_t)n
		                   : count;
		int rc = 0;
		double busf = 1;
		uint64_t t0 = 0;
		for (int it = 0; it < o->warmup + o->iters + 1 && rc == 0; it++) {
			int check = it == o->warmup + o->iters;
			if (it == o->warmup) {
				yd_barrier(c);
				t0 = yard_now_mono_ns();
			}
			if (check || it == 0) {
				for (size_t i = 0; i < total; i++)
					set(in, dt, i, val(me, i));
				if (din != in && to_device(din, in, total * esz) != 0)
					return 1;
			}
			if (!strcmp(o->coll, "allreduce")) {
				busf = 2.0 * (n - 1) / n;
				rc = yd_allreduce(c, din, o->in_place ? din : dout, count, dt,
				                  YD_SUM);
			} else if (!strcmp(o->coll, "reduce_scatter")) {
				busf = (double)(n - 1) / n;
				rc = yd_reduce_scatter(c, din, dout, per, dt, YD_SUM);
			} else if (!strcmp(o->coll, "allgather")) {
				busf = (double)(n - 1) / n;
				rc = yd_allgather(c, din + (size_t)me * per * esz, dout, per, dt);
			} else if (!strcmp(o->coll, "broadcast")) {
				rc = yd_broadcast(c, check ? din : dout, count, dt, 0);
			} else {
				yd_request *r;
				rc = yd_isend(c, in, count, dt, (me + 1) % n, 0, &r);
				if (rc == 0)
					rc = yd_recv(c, out, count, dt, (me - 1 + n) % n, 0);
				if (rc == 0)
					rc = yd_wait(r);
			}
			if (it == o->warmup + o->iters - 1) {
				double us = (double)(yard_now_mono_ns() - t0) / 1e3 / o->iters;
				t0 = (uint64_t)(us * 1000);
			}
		}
		if (rc) {
			fprintf(stderr, "rank %d: %s\n", me, yd_comm_last_error(c));
			return 1;
		}
		/* check the last run */
		if (din != in && (to_host(in, din, total * esz) || to_host(out, dout, total * esz)))
			return 1;
		if (o->in_place)
			memcpy(out, in, total * esz);
		int64_t wrong = 0;
		for (size_t i = 0; i < total; i++) {
			double want = 0;
			if (!strcmp(o->coll, "allreduce")) {
				for (int r = 0; r < n; r++)
					want += val(r, i);
				wrong += !same(out, dt, i, want);
			} else if (!strcmp(o->coll, "reduce_scatter")) {
				if (i >= per)
					break;
				for (int r = 0; r < n; r++)
					want += val(r, (size_t)me * per + i);
				wrong += !same(out, dt, i, want);
			} else if (!strcmp(o->coll, "allgather")) {
				wrong += !same(out, dt, i, val((int)(i / (per ? per : 1)), i));
			} else if (!strcmp(o->coll, "broadcast")) {
				wrong += !same(in, dt, i, val(0, i));
			} else {
				wrong += !same(out, dt, i, val((me - 1 + n) % n, i));
			}
		}
		double t_us = (double)t0 / 1000, t_max;
		yd_allreduce(c, &t_us, &t_max, 1, YD_F64, YD_MAX);
		int64_t wsum;
		yd_allreduce(c, &wrong, &wsum, 1, YD_I64, YD_SUM);
		if (me == 0) {
			size_t bytes = total * esz;
			double algbw = t_max > 0 ? (double)bytes / t_max / 1e3 : 0;
			/* what auto chose, for an allreduce (the other collectives choose by size
			 * alone) */
			char an[32];
			if (o->algo && strcmp(o->algo, "auto") != 0)
				snprintf(an, sizeof an, "%s", o->algo);
			else if (!strcmp(o->coll, "allreduce"))
				snprintf(an, sizeof an, "auto:%s",
				         yd_algo_name(yd_allreduce_algo(c, total, dt)));
			else
				snprintf(an, sizeof an, "auto");
			if (json)
				printf(
				    "%s{\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"algo\":\"%s\","
				    "\"time_us\":%.2f,\"algbw\":%.3f,\"busbw\":%.3f,\"wrong\":%"
				    "lld}",
				    first ? "" : ",", bytes, total, yd_dtype_name(dt), an, t_max,
				    algbw, algbw * busf, (long long)wsum);
			else
				printf(" %12zu %12zu %6s %9s %10.2f %8.3f %8.3f %7lld\n", bytes,
				       total, yd_dtype_name(dt), an, t_max, algbw, algbw * busf,
				       (long long)wsum);
			fflush(stdout);
			first = 0;
		}
		if (o->factor < 2)
			break;
	}
	if (me == 0 && json) {
		printf("]}\n");
		fflush(stdout); /* the rank ends with _exit */
	}
#ifdef HAVE_CUDA
	if (din != in) {
		cudaFree(din);
		cudaFree(dout);
	}
#endif
	free(in);
	free(out);
	return 0;
}

/* --algo A,B,...: the algorithms of a comparison, each once */
static int parse_algos(struct opts *o, const char *list)
{
	char buf[256], *save = NULL;
	if (strlen(list) >= sizeof buf) {
		fprintf(stderr, "yard-bench: --algo: a list of %zu characters, at most %zu\n",
		        strlen(list), sizeof buf - 1);
		return -1;
	}
	snprintf(buf, sizeof buf, "%s", list);
	o->nalgo = 0;
	for (char *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
		int a = yd_algo_parse(name);
		if (a < 0) {
			fprintf(stderr, "yard-bench: --algo %s: unknown algorithm '%s'\n", list,
			        name);
			return -1;
		}
		for (int j = 0; j < o->nalgo; j++)
			if (o->algos[j] == (enum yd_algo)a) {
				fprintf(stderr, "yard-bench: --algo %s: '%s' named twice\n", list,
				        name);
				return -1;
			}
		o->algos[o->nalgo++] = (enum yd_algo)a;
	}
	if (o->nalgo < 2) {
		fprintf(stderr, "yard-bench: --algo %s: a comparison needs two algorithms\n", list);
		return -1;
	}
	return 0;
}

static void usage(void)
{
	fprintf(
	    stderr,
	    "usage: yard-bench allreduce|reduce_scatter|allgather|broadcast|sendrecv --ranks N\n"
	    "       [--transport auto|shm|tcp|rdma] [--algo "
	    "auto|ring|rd|hd|tree|naive|ps|hier|shared]\n"
	    "       [--hosts H|a,a,b,b] [--min 8] [--max 256M] [--factor 4] [--iters K]\n"
	    "       [--warmup W] [--dtype f32|f64|f16|bf16|i32|i64] [--device cpu|cuda]\n"
	    "       [--in-place] [-o json]\n"
	    "       allreduce --algo A,B,... [--rounds R]: compare algorithms in one launch\n");
	exit(2);
}

int main(int argc, char **argv)
{
	yard_log_init("yard-bench"); /* YARD_LOG=debug: what the calibration measured */
	struct opts o = {.ranks = 2,
	                 .iters = 20,
	                 .warmup = 5,
	                 .dtype = YD_F32,
	                 .min = 8,
	                 .max = 256u << 20,
	                 .factor = 4,
	                 .rounds = 5};
	static const struct option lo[] = {
	    {"ranks", 1, 0, 'n'},    {"transport", 1, 0, 't'}, {"algo", 1, 0, 'a'},
	    {"hosts", 1, 0, 'H'},    {"min", 1, 0, 'b'},       {"max", 1, 0, 'e'},
	    {"factor", 1, 0, 'f'},   {"iters", 1, 0, 'i'},     {"warmup", 1, 0, 'w'},
	    {"dtype", 1, 0, 'd'},    {"help", 0, 0, 'h'},      {"device", 1, 0, 'D'},
	    {"in-place", 0, 0, 'I'}, {"rounds", 1, 0, 'R'},    {0, 0, 0, 0}};
	int ch;
	if (argc < 2 || argv[1][0] == '-')
		usage();
	o.coll = argv[1];
	if (strcmp(o.coll, "allreduce") && strcmp(o.coll, "reduce_scatter") &&
	    strcmp(o.coll, "allgather") && strcmp(o.coll, "broadcast") &&
	    strcmp(o.coll, "sendrecv"))
		usage();
	optind = 2;
	while ((ch = getopt_long(argc, argv, "o:", lo, NULL)) != -1) {
		switch (ch) {
		case 'n':
			o.ranks = opt_int("ranks", optarg, 1, 64);
			break;
		case 't':
			o.transport = optarg;
			if (yd_transport_parse(optarg) < 0) {
				fprintf(stderr,
				        "yard-bench: --transport %s: unknown (auto|shm|tcp|rdma)\n",
				        optarg);
				return 2;
			}
			break;
		case 'a':
			o.algo = optarg;
			if (strchr(optarg, ',')) {
				if (parse_algos(&o, optarg) != 0)
					return 2;
			} else if (yd_algo_parse(optarg) < 0) {
				usage();
			}
			break;
		case 'R': {
			char *end;
			long r = strtol(optarg, &end, 10);
			o.rounds = *optarg && *end == '\0' && r >= 1 && r <= 1000 ? (int)r : 0;
			if (o.rounds == 0) {
				fprintf(stderr, "yard-bench: --rounds %s: want 1 to 1000\n",
				        optarg);
				return 2;
			}
			break;
		}
		case 'H':
			o.hosts = optarg;
			break;
		case 'b':
			o.min = opt_size("min", optarg);
			break;
		case 'e':
			o.max = opt_size("max", optarg);
			break;
		case 'f':
			o.factor = opt_size("factor", optarg);
			break;
		case 'i':
			o.iters = opt_int("iters", optarg, 1, 1000000);
			break;
		case 'w':
			o.warmup = opt_int("warmup", optarg, 0, 1000000);
			break;
		case 'd':
			o.dtype = -1;
			for (int d = 0; d < YD_DTYPE_COUNT; d++)
				if (!strcmp(optarg, yd_dtype_name(d)))
					o.dtype = d;
			if (o.dtype < 0)
				usage();
			break;
		case 'o':
			o.out = optarg;
			break;
		case 'I':
			o.in_place = 1;
			break;
		case 'D':
			if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0)
				usage();
			o.cuda = optarg[1] == 'u';
			break;
		default:
			usage();
		}
	}
	if (o.max < o.min) {
		fprintf(stderr, "yard-bench: --max %zu is below --min %zu\n", o.max, o.min);
		return 2;
	}
	if (o.nalgo && (strcmp(o.coll, "allreduce") != 0 || o.in_place)) {
		fprintf(stderr,
		        "yard-bench: --algo %s: a comparison runs an out-of-place "
		        "allreduce only\n",
		        o.algo);
		return 2;
	}
	if (o.in_place && strcmp(o.coll, "allreduce") != 0) {
		fprintf(stderr, "yard-bench: --in-place applies to allreduce only, not %s\n",
		        o.coll);
		return 2;
	}
	/* --hosts H: H emulated hosts, ranks in contiguous blocks (h0,h0,h1,h1 for 4 ranks on
	 * 2); otherwise one label per rank */
	char labels[64 * 8];
	if (o.hosts && o.hosts[strspn(o.hosts, "0123456789")] == '\0') {
		int h = atoi(o.hosts);
		if (h < 1 || h > o.ranks) {
			fprintf(stderr, "yard-bench: --hosts %s: want 1 to %d hosts (--ranks)\n",
			        o.hosts, o.ranks);
			return 2;
		}
		size_t at = 0;
		for (int r = 0; r < o.ranks; r++)
			at += (size_t)snprintf(labels + at, sizeof labels - at, "%sh%d",
			                       r ? "," : "", (int)((long)r * h / o.ranks));
		o.hosts = labels;
	} else if (o.hosts) {
		int n = 1;
		for (const char *p = o.hosts; *p; p++)
			n += *p == ',';
		if (n != o.ranks) {
			fprintf(stderr, "yard-bench: --hosts %s: %d labels for %d ranks\n", o.hosts,
			        n, o.ranks);
			return 2;
		}
	}
#ifndef HAVE_CUDA
	if (o.cuda) {
		fprintf(stderr, "yard-bench: --device cuda: built without the CUDA toolkit\n");
		return 2;
	}
#endif
	if (o.cuda && !strcmp(o.coll, "sendrecv")) {
		fprintf(stderr,
		        "yard-bench: sendrecv --device cuda: not supported (it uses yd_isend, "
		        "which refuses device buffers)\n");
		return 2;
	}
	char dir[] = "/tmp/yard-bench-XXXXXX", file[64], buf[32];
	if (!mkdtemp(dir))
		return 1;
	snprintf(file, sizeof file, "%s/rdv", dir);
	pid_t pids[64];
	fflush(stdout);
	for (int r = 0; r < o.ranks; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			char err[512];
			yd_comm *c;
			snprintf(buf, sizeof buf, "%d", r);
			setenv("YARD_RANK", buf, 1);
			snprintf(buf, sizeof buf, "%d", o.ranks);
			setenv("YARD_WORLD_SIZE", buf, 1);
			setenv("YARD_RENDEZVOUS_FILE", file, 1);
			if (o.transport)
				setenv("YARD_TRANSPORT", o.transport, 1);
			if (o.hosts)
				setenv("YARD_HOSTS", o.hosts, 1);
			if (yd_comm_init_env(&c, err, sizeof err)) {
				fprintf(stderr, "rank %d: %s\n", r, err);
				_exit(1);
			}
			int rc = run_rank(c, &o);
			yd_comm_destroy(c);
			_exit(rc);
		}
	}
	int bad = 0;
	for (int r = 0; r < o.ranks; r++) {
		int st;
		waitpid(pids[r], &st, 0);
		bad += !WIFEXITED(st) || WEXITSTATUS(st);
		if (WIFSIGNALED(st)) /* the others name their own errors */
			fprintf(stderr, "rank %d was killed by signal %d (%s)\n", r, WTERMSIG(st),
			        strsignal(WTERMSIG(st)));
	}
	unlink(file);
	rmdir(dir);
	return bad ? 1 : 0;
}
