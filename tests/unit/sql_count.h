/* sql_count.h: for the state machine's unit tests (after cmocka.h): the one integer a
 * query of the database answers, e.g. a count of rows. */
#ifndef YARD_TESTS_SQL_COUNT_H
#define YARD_TESTS_SQL_COUNT_H

#include <sqlite3.h>
#include <stdint.h>

static inline int64_t sql_count(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	int64_t n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

#endif
