/* idindex.c: id -> entry index maps over tables whose entries start with their id (see
 * idindex.h). */
#include "scheduler/idindex.h"

#include <stdlib.h>
#include <string.h>

static uint32_t id_hash(const char *id)
{
	uint32_t h = 2166136261u;
	for (const unsigned char *p = (const unsigned char *)id; *p != '\0'; p++)
		h = (h ^ *p) * 16777619u;
	return h;
}

/* The id of entry i of a table whose entries are elem_size bytes and start with the id. */
static const char *entry_id(const void *table, size_t elem_size, int i)
{
	return (const char *)table + (size_t)i * elem_size;
}

int id_index_find(const struct id_index *x, const void *table, size_t elem_size, const char *id)
{
	if (x->cap == 0)
		return -1;
	for (uint32_t h = id_hash(id), probe = 0; probe < (uint32_t)x->cap; probe++) {
		int v = x->slots[(h + probe) & (uint32_t)(x->cap - 1)];
		if (v == 0)
			return -1;
		if (strcmp(entry_id(table, elem_size, v - 1), id) == 0)
			return v - 1;
	}
	return -1;
}

void id_index_put(struct id_index *x, const char *id, int i)
{
	uint32_t h = id_hash(id);
	while (x->slots[h & (uint32_t)(x->cap - 1)] != 0)
		h++;
	x->slots[h & (uint32_t)(x->cap - 1)] = i + 1;
}

/* Rebuilds the index over entries [0, n), sized for at least min_cap / 2 entries. */
int id_index_rebuild(struct id_index *x, const void *table, size_t elem_size, int n, int min_cap)
{
	int cap = 64;
	while (cap < 2 * n || cap < 2 * min_cap)
		cap *= 2;
	if (cap != x->cap) {
		int *slots = malloc((size_t)cap * sizeof *slots);
		if (slots == NULL)
			return -1;
		free(x->slots);
		x->slots = slots;
		x->cap = cap;
	}
	memset(x->slots, 0, (size_t)x->cap * sizeof *x->slots);
	for (int i = 0; i < n; i++)
		id_index_put(x, entry_id(table, elem_size, i), i);
	return 0;
}
