/* mpi_allreduce.c: the Open MPI side of scripts/bench/collectives (compiled there with mpicc
 * into a temp dir; not part of the autotools build). Measures exactly what yard-bench
 * allreduce measures: f32 sum, out of place; per size, `warmup` untimed calls, a barrier,
 * then `iters` timed calls; time = elapsed / iters on each rank, the slowest rank's
 * (MPI_MAX) is reported; the result of one extra call is checked against the reference.
 * Inputs are the same small integers as yard-bench's (exact in f32).
 *
 * usage: mpirun -np N mpi_allreduce SIZE:WARMUP:ITERS[,SIZE:WARMUP:ITERS...]
 * prints, on rank 0, one line per size: "size time_us algbw busbw wrong"
 * (algbw = size / time in GB/s, busbw = algbw * 2(n-1)/n, nccl-tests definitions). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double val(int rank, size_t i)
{
	return (double)((rank * 7 + (int)(i % 11)) % 13) - 6;
}

int main(int argc, char **argv)
{
	int n, me;
	MPI_Init(&argc, &argv);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	if (argc != 2) {
		if (me == 0)
			fprintf(stderr, "usage: %s SIZE:WARMUP:ITERS[,...]\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	char *spec = strdup(argv[1]), *save = NULL;
	for (char *tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t size;
		int warmup, iters;
		if (sscanf(tok, "%zu:%d:%d", &size, &warmup, &iters) != 3 || iters < 1 ||
		    warmup < 0 || size < 4) {
			if (me == 0)
				fprintf(stderr, "bad size spec '%s'\n", tok);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		size_t count = size / sizeof(float);
		float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
		if (!in || !out) {
			fprintf(stderr, "rank %d: out of memory at %zu bytes\n", me, size);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		for (size_t i = 0; i < count; i++)
			in[i] = (float)val(me, i);
		memset(out, 0, count * sizeof(float));
		double t0 = 0, t_us = 0;
		for (int it = 0; it < warmup + iters; it++) {
			if (it == warmup) {
				MPI_Barrier(MPI_COMM_WORLD);
				t0 = MPI_Wtime();
			}
			MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		}
		t_us = (MPI_Wtime() - t0) * 1e6 / iters;
		/* check one more call (as yard-bench does) */
		memset(out, 0, count * sizeof(float));
		MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		long long wrong = 0, wsum = 0;
		for (size_t i = 0; i < count; i++) {
			double want = 0;
			for (int r = 0; r < n; r++)
				want += val(r, i);
			wrong += out[i] != (float)want;
		}
		double t_max;
		MPI_Reduce(&t_us, &t_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(&wrong, &wsum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (me == 0) {
			double algbw = (double)size / t_max / 1e3;
			printf("%zu %.2f %.3f %.3f %lld\n", size, t_max, algbw,
			       algbw * 2.0 * (n - 1) / n, wsum);
			fflush(stdout);
		}
		free(in);
		free(out);
	}
	free(spec);
	MPI_Finalize();
	return 0;
}
