/* applybench.c: yard-applybench [--jobs N] [--rounds R] [--reserve on|off]
 * [--sqlite-stats on|off]: what the state machine's apply costs a member, without raft or
 * HTTP around it. Each round starts a fresh state machine and applies N job submissions,
 * each followed by its job.set_state to running, 8 commands to a transaction as a raft entry
 * holds them (fsm_apply_batch_begin/_end), with specs of the size examples/ submits.
 * --reserve off: the database grows in SQLite's own buffer (YARD_FSM_RESERVE=0), as before
 * it lived in reserved memory; --sqlite-stats on: SQLite keeps its memory statistics, as it
 * did before the state machine turned them off. Linked with the allocator yardd is linked
 * with. Prints one JSON object: the median µs per job over the rounds, each round's, each
 * round's slowest entry (ms: where a copy of the whole database would land), and the
 * database's size at the end. The figures scripts/bench/apply compares in one run. */
#include "config.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs/fsm.h"

#define ROUNDS_MAX 50
#define BATCH 8

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Applies one command; 0 when the state machine answered with a 2xx status. */
static int apply(struct fsm *f, const char *op, const char *args, int64_t ts)
{
	size_t len = 0;
	json_t *a = json_loads(args, 0, NULL);
	if (a == NULL)
		return -1;
	char *cmd = fsm_command_encode(op, a, NULL, ts, "bench", "user", &len);
	if (cmd == NULL)
		return -1;
	const json_t *r = fsm_apply(f, cmd, len);
	free(cmd);
	json_int_t status = json_integer_value(json_object_get(r, "status"));
	return status >= 200 && status < 300 ? 0 : -1;
}

/* One round: µs per job in *us, the slowest entry (8 jobs' commands) in *slowest_ms, the
 * database's size in *bytes; -1 when a command failed. */
static int round_once(int jobs, double *us, double *slowest_ms, size_t *bytes)
{
	struct fsm f;
	struct yard_err err = {0};
	if (fsm_init(&f, &err) != 0) {
		fprintf(stderr, "yard-applybench: %s\n", err.msg);
		return -1;
	}
	char args[1024];
	int failed = 0;
	double t0 = now_s(), entry0 = t0;
	*slowest_ms = 0;
	for (int i = 0; i < jobs && !failed; i++) {
		int64_t ts = 1763740000000LL + i;
		if (i % BATCH == 0) {
			entry0 = now_s();
			fsm_apply_batch_begin(&f);
		}
		snprintf(args, sizeof args,
		         "{\"name\":\"bench-%d\",\"priority\":%d,\"spec\":{\"ranks\":%d,\"command\":"
		         "[\"python3\",\"train.py\",\"--layers\",\"48\",\"--hidden\",\"8192\"],"
		         "\"env\":{\"DATA\":\"/datasets/tokens/shard-%05d\",\"SEED\":\"%d\"}}}",
		         i, i % 7, i % 57 + 8, i % 1000, i);
		failed |= apply(&f, "job.submit", args, ts) != 0;
		snprintf(args, sizeof args, "{\"id\":\"j-%06d\",\"state\":\"running\",\"step\":1}",
		         i + 1);
		failed |= apply(&f, "job.set_state", args, ts) != 0;
		if (i % BATCH == BATCH - 1 || i == jobs - 1) {
			failed |= fsm_apply_batch_end(&f) != 0;
			double ms = (now_s() - entry0) * 1e3;
			*slowest_ms = ms > *slowest_ms ? ms : *slowest_ms;
		}
	}
	*us = (now_s() - t0) / jobs * 1e6;
	const unsigned char *img = NULL;
	*bytes = 0;
	fsm_image(&f, &img, bytes);
	fsm_close(&f);
	if (failed)
		fprintf(stderr, "yard-applybench: a command failed\n");
	return failed ? -1 : 0;
}

/* A whole decimal number in [lo, hi] into *out; -1 for anything else. */
static int number(const char *v, long lo, long hi, int *out)
{
	char *end = NULL;
	long n = v != NULL ? strtol(v, &end, 10) : 0;
	if (v == NULL || end == v || *end != '\0' || n < lo || n > hi)
		return -1;
	*out = (int)n;
	return 0;
}

static int on_off(const char *v, int *out)
{
	if (v != NULL && strcmp(v, "on") == 0)
		*out = 1;
	else if (v != NULL && strcmp(v, "off") == 0)
		*out = 0;
	else
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	int jobs = 20000, rounds = 3, reserve = 1, stats = 0, bad = 0;
	for (int i = 1; i < argc && !bad; i += 2) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(argv[i], "--jobs") == 0)
			bad = number(v, 1, 10000000, &jobs) != 0;
		else if (strcmp(argv[i], "--rounds") == 0)
			bad = number(v, 1, ROUNDS_MAX, &rounds) != 0;
		else if (strcmp(argv[i], "--reserve") == 0)
			bad = on_off(v, &reserve) != 0;
		else if (strcmp(argv[i], "--sqlite-stats") == 0)
			bad = on_off(v, &stats) != 0;
		else
			bad = 1;
	}
	if (bad) {
		fprintf(stderr, "usage: yard-applybench [--jobs 1-10000000] [--rounds 1-%d] "
		                "[--reserve on|off] [--sqlite-stats on|off]\n",
		        ROUNDS_MAX);
		return 2;
	}
	if (!reserve)
		setenv("YARD_FSM_RESERVE", "0", 1);
	/* initialized here with the statistics on, SQLite keeps them: the state machine's
	 * attempt to turn them off comes too late */
	if (stats && (sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 1) != SQLITE_OK ||
	              sqlite3_initialize() != SQLITE_OK)) {
		fprintf(stderr, "yard-applybench: cannot set up SQLite with statistics on\n");
		return 1;
	}
	double us[ROUNDS_MAX], slowest[ROUNDS_MAX], sorted[ROUNDS_MAX];
	size_t bytes = 0;
	for (int r = 0; r < rounds; r++)
		if (round_once(jobs, &us[r], &slowest[r], &bytes) != 0)
			return 1;
	memcpy(sorted, us, sizeof us[0] * (size_t)rounds);
	qsort(sorted, (size_t)rounds, sizeof sorted[0], cmp_double);
	printf("{\"jobs\":%d,\"reserve\":%s,\"sqlite_stats\":%s,\"us_per_job\":%.2f,\"rounds\":[",
	       jobs, reserve ? "true" : "false", stats ? "true" : "false", sorted[rounds / 2]);
	for (int r = 0; r < rounds; r++)
		printf("%s%.2f", r ? "," : "", us[r]);
	printf("],\"slowest_entry_ms\":[");
	for (int r = 0; r < rounds; r++)
		printf("%s%.2f", r ? "," : "", slowest[r]);
	printf("],\"db_mib\":%.1f}\n", (double)bytes / 1048576.0);
	return 0;
}
