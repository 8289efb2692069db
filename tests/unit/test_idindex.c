/* test_idindex.c: the id -> entry map of the scheduler's tables (scheduler/idindex.h) agrees
 * with a scan of the table after random additions and removals, as the leader and the rollout
 * driver use it (grow and rebuild before half full, swap-remove then rebuild). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/idindex.h"

struct entry {
	char id[24];
	int payload;
};

static int scan(const struct entry *t, int n, const char *id)
{
	for (int i = 0; i < n; i++)
		if (strcmp(t[i].id, id) == 0)
			return i;
	return -1;
}

static void test_index_agrees_with_a_scan(void **state)
{
	struct id_index x = {0};
	struct entry *t = NULL;
	int n = 0, cap = 0;
	unsigned seed = 11;
	char id[24];
	assert_int_equal(id_index_find(&x, t, sizeof *t, "none"), -1); /* never built */
	for (int step = 0; step < 20000; step++) {
		snprintf(id, sizeof id, "node-%u", rand_r(&seed) % 3000);
		int op = (int)(rand_r(&seed) % 4);
		int at = id_index_find(&x, t, sizeof *t, id);
		assert_int_equal(at, scan(t, n, id));
		if (op < 3 && at < 0) { /* add */
			if (n == cap) {
				cap = cap ? 2 * cap : 4;
				t = realloc(t, (size_t)cap * sizeof *t);
				assert_non_null(t);
			}
			if (2 * (n + 1) > x.cap)
				assert_int_equal(id_index_rebuild(&x, t, sizeof *t, n, n + 1), 0);
			snprintf(t[n].id, sizeof t[n].id, "%s", id);
			t[n].payload = step;
			id_index_put(&x, t[n].id, n);
			n++;
		} else if (op == 3 && at >= 0) { /* remove: the last entry takes its place */
			t[at] = t[--n];
			assert_int_equal(id_index_rebuild(&x, t, sizeof *t, n, 0), 0);
		}
		if (step % 997 == 0) /* every entry, present or not, agrees */
			for (int k = 0; k < 3000; k += 7) {
				snprintf(id, sizeof id, "node-%d", k);
				assert_int_equal(id_index_find(&x, t, sizeof *t, id),
				                 scan(t, n, id));
			}
	}
	assert_true(n > 100);
	assert_true(x.cap >= 2 * n);
	free(t);
	free(x.slots);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_index_agrees_with_a_scan),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
