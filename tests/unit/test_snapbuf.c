/* test_snapbuf.c: memory for snapshot copies, prepared by a worker thread (raft/snapbuf.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "raft/snapbuf.h"

/* Pages of [p, p + len) the kernel has mapped (mincore), and how many there are. */
static size_t resident_pages(const void *p, size_t len, size_t *pages)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)p / page * page;
	size_t span = (uintptr_t)p + len - start;
	size_t n = (span + page - 1) / page;
	unsigned char *vec = malloc(n);
	assert_non_null(vec);
	assert_int_equal(mincore((void *)start, span, vec), 0);
	size_t in = 0;
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	free(vec);
	*pages = n;
	return in;
}

/* A prepared buffer comes back with the size asked for and every page already mapped, so
 * the copy on the loop thread takes no page fault (64 MiB: glibc maps it on its own,
 * untouched). */
static void test_prepared_buffer_is_mapped_before_it_is_taken(void **state)
{
	struct snapbuf b;
	size_t cap = 0, pages = 0;
	size_t want = (size_t)64 << 20;
	snapbuf_init(&b);
	snapbuf_prepare(&b, want);
	unsigned char *p = snapbuf_take(&b, &cap);
	assert_non_null(p);
	assert_int_equal(cap, want);
	size_t in = resident_pages(p, cap, &pages);
	assert_true(pages >= want / 4096);
	assert_int_equal(in, pages);
	assert_int_equal(b.prepared, 1);
	/* taken: nothing more until asked again */
	size_t cap2 = 0;
	assert_null(snapbuf_take(&b, &cap2));
	assert_int_equal(cap2, 0);
	memset(p, 0xab, cap); /* the caller owns all of it */
	snapbuf_release(&b, p);
	snapbuf_destroy(&b);
}

/* A buffer never asked for is not there; a second request no bigger than what is ready
 * prepares nothing new; a bigger one replaces it. */
static void test_requests_are_merged_and_replaced(void **state)
{
	struct snapbuf b;
	size_t cap = 0;
	snapbuf_init(&b);
	assert_null(snapbuf_take(&b, &cap));
	assert_int_equal(b.started, 0); /* no thread for nothing */
	snapbuf_prepare(&b, 1 << 20);
	void *p = snapbuf_take(&b, &cap); /* waits for it */
	assert_int_equal(cap, 1 << 20);
	snapbuf_release(&b, p);
	snapbuf_prepare(&b, 1 << 20);
	snapbuf_prepare(&b, 1 << 19); /* smaller: the first one will do */
	p = snapbuf_take(&b, &cap);
	assert_int_equal(cap, 1 << 20);
	assert_int_equal(b.prepared, 2);
	snapbuf_release(&b, p);
	snapbuf_prepare(&b, 1 << 20);
	snapbuf_prepare(&b, 3 << 20); /* bigger: replaces it */
	p = snapbuf_take(&b, &cap);
	assert_int_equal(cap, 3 << 20);
	snapbuf_release(&b, p);
	snapbuf_destroy(&b);
}

/* Destroying with a request pending, a buffer ready and frees queued loses nothing
 * (the sanitizer build checks for leaks) and does not hang. */
static void test_destroy_with_work_pending(void **state)
{
	struct snapbuf b;
	snapbuf_init(&b);
	for (int i = 0; i < 8; i++) {
		snapbuf_release(&b, malloc(4096));
		snapbuf_prepare(&b, (size_t)(i + 1) << 20);
	}
	snapbuf_destroy(&b);
	/* and a release after destroy frees on the spot */
	snapbuf_release(&b, malloc(16));
	snapbuf_destroy(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_prepared_buffer_is_mapped_before_it_is_taken),
	    cmocka_unit_test(test_requests_are_merged_and_replaced),
	    cmocka_unit_test(test_destroy_with_work_pending),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
