/* hist.c: latency histograms (see hist.h). */
#include "common/hist.h"

const double yard_hist_bounds_ms[YARD_HIST_BUCKETS] = {
    0.5, 1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 250, 500, 1000, 2500, 5000, 10000};

void yard_hist_note(struct yard_hist *h, double ms)
{
	if (!(ms > 0)) /* also NaN */
		ms = 0;
	int b = 0;
	while (b < YARD_HIST_BUCKETS && ms > yard_hist_bounds_ms[b])
		b++;
	h->n[b]++;
	h->sum_ms += ms;
}

uint64_t yard_hist_count(const struct yard_hist *h)
{
	uint64_t total = 0;
	for (int b = 0; b <= YARD_HIST_BUCKETS; b++)
		total += h->n[b];
	return total;
}

double yard_hist_quantile(const struct yard_hist *h, double q)
{
	uint64_t total = yard_hist_count(h);
	if (total == 0)
		return 0;
	if (q < 0)
		q = 0;
	if (q > 1)
		q = 1;
	double rank = q * (double)total;
	uint64_t cum = 0;
	for (int b = 0; b < YARD_HIST_BUCKETS; b++) {
		if (h->n[b] > 0 && (double)(cum + h->n[b]) >= rank) {
			double lo = b == 0 ? 0 : yard_hist_bounds_ms[b - 1];
			double hi = yard_hist_bounds_ms[b];
			return lo + (hi - lo) * (rank - (double)cum) / (double)h->n[b];
		}
		cum += h->n[b];
	}
	return yard_hist_bounds_ms[YARD_HIST_BUCKETS - 1];
}

void yard_hist_render(FILE *f, const char *name, const char *help, int type_line,
                      const char *labels, const struct yard_hist *h)
{
	const char *sep = labels[0] != '\0' ? "," : "";
	if (help != NULL)
		fprintf(f, "# HELP %s %s\n", name, help);
	if (type_line)
		fprintf(f, "# TYPE %s histogram\n", name);
	uint64_t cum = 0;
	for (int b = 0; b < YARD_HIST_BUCKETS; b++) {
		cum += h->n[b];
		fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
		        yard_hist_bounds_ms[b], (unsigned long long)cum);
	}
	cum += h->n[YARD_HIST_BUCKETS];
	fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)cum);
	if (labels[0] != '\0') {
		fprintf(f, "%s_sum{%s} %.3f\n%s_count{%s} %llu\n", name, labels, h->sum_ms, name,
		        labels, (unsigned long long)cum);
	} else {
		fprintf(f, "%s_sum %.3f\n%s_count %llu\n", name, h->sum_ms, name,
		        (unsigned long long)cum);
	}
}
