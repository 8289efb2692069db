/* hist.h: latency histograms in milliseconds with fixed bucket bounds, rendered in the
 * Prometheus text format (cumulative `le` buckets, `_sum`, `_count`) and read back as
 * quantiles by the benchmarks. One set of bounds for every histogram, so that figures from
 * different metrics line up. */
#ifndef YARD_HIST_H
#define YARD_HIST_H

#include <stdint.h>
#include <stdio.h>

#define YARD_HIST_BUCKETS 17
/* upper bounds (ms) of the finite buckets, ascending; the last bucket is +Inf */
extern const double yard_hist_bounds_ms[YARD_HIST_BUCKETS];

struct yard_hist {
	uint64_t n[YARD_HIST_BUCKETS + 1];
	double sum_ms;
};

/* Counts one observation of ms (negative counts as 0). */
void yard_hist_note(struct yard_hist *h, double ms);
uint64_t yard_hist_count(const struct yard_hist *h);

/* The q-quantile (0 <= q <= 1), interpolated linearly within its bucket as Prometheus's
 * histogram_quantile does; an observation over the last bound reads as that bound. 0 when
 * empty. */
double yard_hist_quantile(const struct yard_hist *h, double q);

/* Writes the metric: "# HELP" (help, when not NULL), "# TYPE" when type_line, then the
 * buckets, sum and count of name{labels} (labels: "" or `key="value",...`, no braces).
 * Several label sets of one metric: type_line only on the first. */
void yard_hist_render(FILE *f, const char *name, const char *help, int type_line,
                      const char *labels, const struct yard_hist *h);

#endif
