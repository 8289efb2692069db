/* grow.c: arrays grown by mremap (see grow.h). */
#include "common/grow.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* LeakSanitizer scans the heap, stacks and globals for pointers, not mappings of ours: the
 * JSON a job's record points to would look leaked. Each mapping is a root region for it. */
#if defined(__SANITIZE_ADDRESS__)
#define YARD_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define YARD_LSAN 1
#endif
#endif
#ifdef YARD_LSAN
#include <sanitizer/lsan_interface.h>
#define root_add(p, n) __lsan_register_root_region((p), (n))
#define root_del(p, n) __lsan_unregister_root_region((p), (n))
#else
#define root_add(p, n) ((void)(p), (void)(n))
#define root_del(p, n) ((void)(p), (void)(n))
#endif

/* The mapping that holds n elements of size bytes: whole pages. 0 when it overflows. */
static size_t map_len(size_t size, size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	if (size != 0 && n > (SIZE_MAX - page) / size)
		return 0;
	return (n * size + page - 1) / page * page;
}

int yard_grow(void **base, size_t size, int *cap, int want)
{
	if (want <= *cap)
		return 0;
	int n = *cap > INT_MAX / 2 ? INT_MAX : 2 * *cap;
	if (n < want)
		n = want;
	size_t len = map_len(size, (size_t)n);
	if (len == 0)
		return -1;
	/* the rest of the last page too, where that keeps map_len(size, n) == len */
	if (size != 0 && size <= (size_t)sysconf(_SC_PAGESIZE) && len / size <= INT_MAX)
		n = (int)(len / size);
	void *p;
	if (*base == NULL) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	} else {
		size_t old = map_len(size, (size_t)*cap);
#ifdef MREMAP_MAYMOVE
		p = mremap(*base, old, len, MREMAP_MAYMOVE);
#else /* no mremap: a copy, as realloc would make */
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED) {
			memcpy(p, *base, old);
			munmap(*base, old);
		}
#endif
		if (p != MAP_FAILED)
			root_del(*base, old);
	}
	if (p == MAP_FAILED)
		return -1;
	root_add(p, len);
	*base = p;
	*cap = n;
	return 0;
}

void yard_grow_free(void *base, size_t size, int cap)
{
	if (base == NULL)
		return;
	root_del(base, map_len(size, (size_t)cap));
	munmap(base, map_len(size, (size_t)cap));
}
