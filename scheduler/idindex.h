/* idindex.h: a map from an id to the index of its entry in a table (an array of structs
 * whose first member is the id as a NUL-terminated string): open addressing with linear
 * probing, FNV-1a hashes. The map stores indices, not pointers, so the table may be
 * reallocated; it must be rebuilt when entries move (a removal) and before it is more than
 * half full (id_index_rebuild with the new count). The scheduler's soft tables (nodes, jobs,
 * the placement view) and the rollout driver's node table use it, so a heartbeat or a pass
 * finds a node in O(1) instead of scanning every node. */
#ifndef YARD_SCHED_IDINDEX_H
#define YARD_SCHED_IDINDEX_H

#include <stddef.h>
#include <stdint.h>

struct id_index {
	int *slots; /* index + 1 per slot (0: empty) */
	int cap;    /* power of two, at least twice the entries; 0 before the first rebuild */
};

/* The index of the entry with this id among the table's entries of elem_size bytes, or -1. */
int id_index_find(const struct id_index *x, const void *table, size_t elem_size, const char *id);
/* Adds entry i with this id; the index must have room (see above). */
void id_index_put(struct id_index *x, const char *id, int i);
/* Rebuilds the index over entries [0, n), sized for at least min_cap entries; 0 or -1 without
 * memory (the index is then unchanged). */
int id_index_rebuild(struct id_index *x, const void *table, size_t elem_size, int n, int min_cap);

#endif
