/* copybench.c: yard-copybench BYTES [ROUNDS]: what copying a state image of BYTES costs the
 * thread that does it, into memory allocated for the copy (each page faulted in during the
 * copy: what a snapshot cost the loop before raft/snapbuf.c) and into memory touched
 * beforehand (what it costs now). Prints the median of ROUNDS (default 5) in ms, as JSON.
 * The reference that scripts/bench/snapshot measures in the same run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* called through a volatile pointer, so the compiler cannot drop a copy nobody reads */
static void *(*volatile copy)(void *, const void *, size_t) = memcpy;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: yard-copybench BYTES [ROUNDS]\n");
		return 2;
	}
	char *end;
	unsigned long long n = strtoull(argv[1], &end, 10);
	int rounds = argc == 3 ? atoi(argv[2]) : 5;
	if (*end != '\0' || n == 0 || rounds < 1 || rounds > 100) {
		fprintf(stderr,
		        "yard-copybench: BYTES must be a positive integer and ROUNDS 1-100\n");
		return 2;
	}
	size_t len = (size_t)n, page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *src = malloc(len);
	double fresh[100], prepared[100];
	if (src == NULL) {
		fprintf(stderr, "yard-copybench: no memory for %zu bytes\n", len);
		return 1;
	}
	for (size_t i = 0; i < len; i++)
		src[i] = (unsigned char)(i * 131);
	for (int r = 0; r < rounds; r++) {
		double t0 = now_ms();
		unsigned char *d = malloc(len);
		if (d == NULL)
			return 1;
		copy(d, src, len);
		fresh[r] = now_ms() - t0;
		free(d);
		d = malloc(len);
		if (d == NULL)
			return 1;
		for (size_t i = 0; i < len; i += page)
			d[i] = 0;
		t0 = now_ms();
		copy(d, src, len);
		prepared[r] = now_ms() - t0;
		if (d[len / 2] != src[len / 2])
			return 1;
		free(d);
	}
	qsort(fresh, (size_t)rounds, sizeof *fresh, cmp_double);
	qsort(prepared, (size_t)rounds, sizeof *prepared, cmp_double);
	printf("{\"bytes\":%zu,\"rounds\":%d,\"fresh_ms\":%.1f,\"prepared_ms\":%.1f}\n", len,
	       rounds, fresh[rounds / 2], prepared[rounds / 2]);
	free(src);
	return 0;
}
