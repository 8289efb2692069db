/* output.c: aligned tables and cell formatting for yardctl (output.h). */
#include "ctl/output.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"

void ctl_table_init(struct ctl_table *t, int ncols, const char *const *headers)
{
	assert(ncols > 0 && ncols <= CTL_TABLE_COLS_MAX); /* a wider table would lose columns */
	memset(t, 0, sizeof *t);
	t->ncols = ncols;
	for (int i = 0; i < t->ncols; i++)
		t->headers[i] = headers[i];
}

int ctl_table_add(struct ctl_table *t, const char *const *row)
{
	if (t->nrows == t->cap_rows) {
		int cap = t->cap_rows ? 2 * t->cap_rows : 16;
		char **cells = realloc(t->cells, (size_t)cap * t->ncols * sizeof *cells);
		if (cells == NULL)
			return YARD_ENOMEM;
		t->cells = cells;
		t->cap_rows = cap;
	}
	char **dst = t->cells + (size_t)t->nrows * t->ncols;
	for (int i = 0; i < t->ncols; i++) {
		dst[i] = strdup(row[i] ? row[i] : "-");
		if (dst[i] == NULL) {
			while (i-- > 0)
				free(dst[i]);
			return YARD_ENOMEM;
		}
	}
	t->nrows++;
	return 0;
}

/* Terminal columns of a UTF-8 string, counting each code point as one. */
static int display_width(const char *s)
{
	int w = 0;
	for (; *s; s++)
		if (((unsigned char)*s & 0xC0) != 0x80)
			w++;
	return w;
}

static void put_cell(const char *s, int pad, FILE *out)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		fputc(ch < 0x20 || ch == 0x7f ? '?' : ch, out);
	}
	for (int i = 0; i < pad; i++)
		fputc(' ', out);
}

void ctl_table_print(const struct ctl_table *t, FILE *out)
{
	int width[CTL_TABLE_COLS_MAX] = {0};
	ctl_table_print_more(t, out, width, 1);
}

void ctl_table_print_more(const struct ctl_table *t, FILE *out, int *width, int headers)
{
	for (int c = 0; c < t->ncols; c++) {
		int w = display_width(t->headers[c]);
		if (w > width[c])
			width[c] = w;
		for (int r = 0; r < t->nrows; r++) {
			int cw = display_width(t->cells[(size_t)r * t->ncols + c]);
			if (cw > width[c])
				width[c] = cw;
		}
	}
	for (int r = headers ? -1 : 0; r < t->nrows; r++) {
		for (int c = 0; c < t->ncols; c++) {
			const char *s = r < 0 ? t->headers[c] : t->cells[(size_t)r * t->ncols + c];
			int last = c == t->ncols - 1;
			put_cell(s, last ? 0 : width[c] - display_width(s) + 2, out);
		}
		fputc('\n', out);
	}
}

void ctl_table_free(struct ctl_table *t)
{
	for (size_t i = 0; i < (size_t)t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap_rows = 0;
}

void ctl_format_json(const json_t *v, char *out, size_t out_len)
{
	if (v == NULL || json_is_null(v))
		snprintf(out, out_len, "-");
	else if (json_is_string(v))
		snprintf(out, out_len, "%s", json_string_value(v));
	else if (json_is_integer(v))
		snprintf(out, out_len, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		snprintf(out, out_len, "%.4g", json_real_value(v));
	else if (json_is_boolean(v))
		snprintf(out, out_len, "%s", json_is_true(v) ? "true" : "false");
	else {
		char *s = json_dumps(v, JSON_COMPACT);
		snprintf(out, out_len, "%s", s ? s : "?");
		free(s);
	}
}

void ctl_format_age(int64_t ms, char *out, size_t out_len)
{
	int64_t s = ms > 0 ? ms / 1000 : 0;
	if (s < 60)
		snprintf(out, out_len, "%llds", (long long)s);
	else if (s < 3600)
		snprintf(out, out_len, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
	else if (s < 86400)
		snprintf(out, out_len, "%lldh%02lldm", (long long)(s / 3600),
		         (long long)(s % 3600 / 60));
	else
		snprintf(out, out_len, "%lldd%02lldh", (long long)(s / 86400),
		         (long long)(s % 86400 / 3600));
}

void ctl_format_time(int64_t epoch_ms, char *out, size_t out_len)
{
	time_t secs = (time_t)(epoch_ms / 1000);
	struct tm tm;
	if (gmtime_r(&secs, &tm) == NULL || strftime(out, out_len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(out, out_len, "%lld", (long long)epoch_ms);
}
