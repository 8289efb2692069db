/* output.h: yardctl's human-readable output: aligned tables and cell formatting. The
 * commands decide what goes in a table; this file only lays it out. */
#ifndef YARD_CTL_OUTPUT_H
#define YARD_CTL_OUTPUT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CTL_TABLE_COLS_MAX 16 /* more is a programming error: ctl_table_init asserts */

struct ctl_table {
	int ncols;
	const char *headers[CTL_TABLE_COLS_MAX]; /* borrowed */
	char **cells;                            /* nrows * ncols, owned copies */
	int nrows, cap_rows;
};

void ctl_table_init(struct ctl_table *t, int ncols, const char *const *headers);
/* Appends a row of t->ncols strings (copied; NULL prints as "-"). 0 or YARD_ENOMEM. */
int ctl_table_add(struct ctl_table *t, const char *const *row);
/* Columns padded to their widest cell, two spaces apart; the last column is not padded.
 * Control characters in cells print as '?', so server text cannot move the cursor. */
void ctl_table_print(const struct ctl_table *t, FILE *out);
/* The same for a table printed in parts (yardctl events -f): each column at least width[c]
 * wide (in and out: the widths used); the header line only when headers is set. */
void ctl_table_print_more(const struct ctl_table *t, FILE *out, int *width, int headers);
void ctl_table_free(struct ctl_table *t);

/* A JSON scalar as a cell: strings as-is, integers, reals with 4 significant digits,
 * true/false, null or absent as "-". Objects and arrays as compact JSON. */
void ctl_format_json(const json_t *v, char *out, size_t out_len);
/* A duration as the largest two units: "0s", "59s", "3m12s", "2h05m", "4d03h". Negative
 * durations (clock skew) print as "0s". */
void ctl_format_age(int64_t ms, char *out, size_t out_len);
/* Milliseconds since the epoch as UTC "2025-11-21T15:46:40Z". */
void ctl_format_time(int64_t epoch_ms, char *out, size_t out_len);

#endif
