/* stats.h: robust summaries of small samples (medians and the median absolute deviation), as
 * the agent's per-window step summaries and the leader's straggler detector use them. */
#ifndef YARD_STATS_H
#define YARD_STATS_H

#include <stddef.h>

/* Median of v[0..n) (the mean of the two middle values for even n); sorts v in place.
 * 0 for n == 0. */
double yard_median(double *v, size_t n);

/* Median of v[0..n) already sorted ascending, without element skip (skip >= n: none).
 * Used for "the median of the others" without re-sorting. 0 when nothing is left. */
double yard_median_sorted_without(const double *v, size_t n, size_t skip);

/* Median absolute deviation around center, scaled by 1.4826 so that it estimates the
 * standard deviation of normal data. scratch holds n doubles. */
double yard_mad(const double *v, size_t n, double center, double *scratch);

#endif
