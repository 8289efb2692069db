/* stats.c: medians and MAD (see stats.h). Plain sorting: the samples are small (a window's
 * steps, the ranks of one pipeline stage). */
#include "common/stats.h"

#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double yard_median(double *v, size_t n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The k-th (0-based) element of v once element skip is removed. */
static double nth_without(const double *v, size_t skip, size_t k)
{
	return v[k < skip ? k : k + 1];
}

double yard_median_sorted_without(const double *v, size_t n, size_t skip)
{
	if (skip >= n)
		return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
	size_t m = n - 1;
	if (m == 0)
		return 0;
	return m % 2 ? nth_without(v, skip, m / 2)
	             : (nth_without(v, skip, m / 2 - 1) + nth_without(v, skip, m / 2)) / 2;
}

double yard_mad(const double *v, size_t n, double center, double *scratch)
{
	for (size_t i = 0; i < n; i++)
		scratch[i] = v[i] > center ? v[i] - center : center - v[i];
	return 1.4826 * yard_median(scratch, n);
}
