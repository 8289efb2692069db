/* grow.h: arrays that grow without copying their bytes, for the leader's per-job tables that
 * reach hundreds of megabytes (2,280 bytes a job: 300 MB at 131,072 jobs).
 *
 * realloc copies a large block into fresh memory (tcmalloc always does), faulting in and
 * zeroing every new page within the one call: at 131,072 jobs the scheduler's doubling held
 * the leader's loop 0.7-1.0 s, past the election timeout, and the cluster lost its leader
 * (then the next one, rereading the jobs, at 65,536). These arrays are anonymous mappings
 * grown by mremap: the kernel moves the page tables, no byte is copied, and a new page is
 * touched only when a new element is. */
#ifndef YARD_GROW_H
#define YARD_GROW_H

#include <stddef.h>

/* Grows *base, an array of *cap elements of size bytes (NULL and 0 for none yet), to hold at
 * least want elements: to twice *cap when that is more. The elements kept keep their bytes;
 * the new ones read as zero. 0 on success (*base and *cap updated; *base may move), -1 when
 * the memory cannot be had (*base and *cap unchanged, still valid). want <= *cap: nothing
 * to do. */
int yard_grow(void **base, size_t size, int *cap, int want);

/* Unmaps an array yard_grow set up (NULL: nothing). cap and size as yard_grow last left
 * them. */
void yard_grow_free(void *base, size_t size, int cap);

#endif
