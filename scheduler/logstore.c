/* logstore.c: see logstore.h. A stream is a singly linked list of chunks sorted by offset,
 * none overlapping; a piece that continues the chunk before it grows that chunk (up to
 * CHUNK_MAX), so a rank that prints a line per heartbeat costs one chunk per 64 KiB, not one
 * per line. Eviction trims the front of a stream and raises its floor. */
#include "scheduler/logstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

#define CHUNK_MAX (64 * 1024)

struct chunk {
	int64_t start;
	size_t len, cap;
	char *data;
	struct chunk *next;
};

struct stream {
	char job[LOGSTORE_JOB_MAX + 1];
	int rank;
	int64_t generation;
	char node[LOGSTORE_NODE_MAX + 1];
	struct chunk *head;
	int64_t floor; /* bytes below this were dropped (or never kept): not taken again */
	size_t bytes;
	uint64_t touched; /* store clock of the last add that stored something */
};

struct logstore {
	struct logstore_limits limits;
	struct stream *streams;
	int n_streams, cap_streams;
	size_t bytes;
	uint64_t clock;
};

struct logstore *logstore_create(const struct logstore_limits *limits)
{
	struct logstore *ls = calloc(1, sizeof *ls);
	if (ls == NULL)
		return NULL;
	ls->limits = *limits;
	if (ls->limits.rank_max_bytes == 0)
		ls->limits.rank_max_bytes = 1 << 20;
	if (ls->limits.total_max_bytes == 0)
		ls->limits.total_max_bytes = 64 << 20;
	return ls;
}

static void stream_free_chunks(struct stream *s)
{
	struct chunk *c = s->head, *next;
	for (; c != NULL; c = next) {
		next = c->next;
		free(c->data);
		free(c);
	}
	s->head = NULL;
	s->bytes = 0;
}

void logstore_clear(struct logstore *ls)
{
	for (int i = 0; i < ls->n_streams; i++)
		stream_free_chunks(&ls->streams[i]);
	ls->n_streams = 0;
	ls->bytes = 0;
}

void logstore_destroy(struct logstore *ls)
{
	if (ls == NULL)
		return;
	logstore_clear(ls);
	free(ls->streams);
	free(ls);
}

size_t logstore_bytes(const struct logstore *ls)
{
	return ls->bytes;
}

static struct stream *stream_find(const struct logstore *ls, const char *job, int rank,
                                  int64_t generation)
{
	for (int i = 0; i < ls->n_streams; i++) {
		struct stream *s = &ls->streams[i];
		if (s->rank == rank && s->generation == generation && strcmp(s->job, job) == 0)
			return s;
	}
	return NULL;
}

static void stream_remove(struct logstore *ls, int i)
{
	ls->bytes -= ls->streams[i].bytes;
	stream_free_chunks(&ls->streams[i]);
	ls->streams[i] = ls->streams[--ls->n_streams];
}

static struct stream *stream_get(struct logstore *ls, const char *job, int rank, int64_t generation)
{
	struct stream *s = stream_find(ls, job, rank, generation);
	if (s != NULL)
		return s;
	if (ls->n_streams == LOGSTORE_MAX_STREAMS) {
		int oldest = 0;
		for (int i = 1; i < ls->n_streams; i++)
			if (ls->streams[i].touched < ls->streams[oldest].touched)
				oldest = i;
		stream_remove(ls, oldest);
	}
	if (ls->n_streams == ls->cap_streams) {
		int cap = ls->cap_streams ? ls->cap_streams * 2 : 16;
		struct stream *grown = realloc(ls->streams, (size_t)cap * sizeof *grown);
		if (grown == NULL)
			return NULL;
		ls->streams = grown;
		ls->cap_streams = cap;
	}
	s = &ls->streams[ls->n_streams++];
	memset(s, 0, sizeof *s);
	snprintf(s->job, sizeof s->job, "%s", job);
	s->rank = rank;
	s->generation = generation;
	return s;
}

/* Drops up to n bytes from the front of s; raises its floor past them. */
static void stream_trim(struct logstore *ls, struct stream *s, size_t n)
{
	while (n > 0 && s->head != NULL) {
		struct chunk *c = s->head;
		if (c->len <= n) {
			n -= c->len;
			s->bytes -= c->len;
			ls->bytes -= c->len;
			s->floor = c->start + (int64_t)c->len;
			s->head = c->next;
			free(c->data);
			free(c);
			continue;
		}
		memmove(c->data, c->data + n, c->len - n);
		c->start += (int64_t)n;
		c->len -= n;
		s->bytes -= n;
		ls->bytes -= n;
		s->floor = c->start;
		n = 0;
	}
}

static size_t rank_bytes(const struct logstore *ls, const char *job, int rank)
{
	size_t total = 0;
	for (int i = 0; i < ls->n_streams; i++)
		if (ls->streams[i].rank == rank && strcmp(ls->streams[i].job, job) == 0)
			total += ls->streams[i].bytes;
	return total;
}

static void enforce_limits(struct logstore *ls, const char *job, int rank)
{
	size_t held = rank_bytes(ls, job, rank);
	while (held > ls->limits.rank_max_bytes) {
		struct stream *oldest = NULL;
		for (int i = 0; i < ls->n_streams; i++) {
			struct stream *s = &ls->streams[i];
			if (s->rank == rank && s->bytes > 0 && strcmp(s->job, job) == 0 &&
			    (oldest == NULL || s->generation < oldest->generation))
				oldest = s;
		}
		size_t before = oldest->bytes;
		stream_trim(ls, oldest, YARD_MIN(held - ls->limits.rank_max_bytes, oldest->bytes));
		held -= before - oldest->bytes;
	}
	while (ls->bytes > ls->limits.total_max_bytes) {
		struct stream *lru = NULL;
		for (int i = 0; i < ls->n_streams; i++) {
			struct stream *s = &ls->streams[i];
			if (s->bytes > 0 && (lru == NULL || s->touched < lru->touched))
				lru = s;
		}
		stream_trim(ls, lru, YARD_MIN(ls->bytes - ls->limits.total_max_bytes, lru->bytes));
	}
}

static int chunk_grow(struct chunk *c, size_t extra)
{
	if (c->len + extra <= c->cap)
		return 0;
	size_t cap = c->cap ? c->cap : 256;
	while (cap < c->len + extra)
		cap *= 2;
	if (cap > CHUNK_MAX)
		cap = CHUNK_MAX;
	char *grown = realloc(c->data, cap);
	if (grown == NULL)
		return -1;
	c->data = grown;
	c->cap = cap;
	return 0;
}

long logstore_add(struct logstore *ls, const char *job, int rank, int64_t generation,
                  const char *node, int64_t offset, const void *data, size_t len)
{
	const char *bytes = data;
	if (offset < 0 || strlen(job) > LOGSTORE_JOB_MAX)
		return YARD_EINVAL;
	struct stream *s = stream_get(ls, job, rank, generation);
	if (s == NULL)
		return YARD_ENOMEM;
	if (node != NULL)
		snprintf(s->node, sizeof s->node, "%s", node);
	if (offset < s->floor) {
		int64_t below = s->floor - offset;
		if ((int64_t)len <= below)
			return 0;
		bytes += below;
		len -= (size_t)below;
		offset = s->floor;
	}
	int64_t cur = offset, end = offset + (int64_t)len;
	struct chunk **pp = &s->head, *prev = NULL;
	long added = 0;
	while (cur < end) {
		struct chunk *c = *pp;
		if (c != NULL && c->start <= cur) { /* c holds cur, or ends before it */
			if (c->start + (int64_t)c->len > cur)
				cur = c->start + (int64_t)c->len;
			prev = c;
			pp = &c->next;
			continue;
		}
		int64_t gap_end = c != NULL ? YARD_MIN(end, c->start) : end;
		size_t n = (size_t)(gap_end - cur);
		if (prev != NULL && prev->start + (int64_t)prev->len == cur &&
		    prev->len < CHUNK_MAX) {
			n = YARD_MIN(n, (size_t)CHUNK_MAX - prev->len);
			if (chunk_grow(prev, n) != 0)
				return YARD_ENOMEM;
			memcpy(prev->data + prev->len, bytes + (cur - offset), n);
			prev->len += n;
		} else {
			struct chunk *fresh = calloc(1, sizeof *fresh);
			n = YARD_MIN(n, (size_t)CHUNK_MAX);
			if (fresh == NULL || chunk_grow(fresh, n) != 0) {
				free(fresh);
				return YARD_ENOMEM;
			}
			fresh->start = cur;
			memcpy(fresh->data, bytes + (cur - offset), n);
			fresh->len = n;
			fresh->next = c;
			*pp = fresh;
			prev = fresh;
			pp = &fresh->next;
		}
		cur += (int64_t)n;
		added += (long)n;
	}
	if (added > 0) {
		s->bytes += (size_t)added;
		ls->bytes += (size_t)added;
		s->touched = ++ls->clock;
		enforce_limits(ls, job, rank);
	}
	return added;
}

static int64_t stream_end(const struct stream *s)
{
	int64_t end = s->floor;
	for (const struct chunk *c = s->head; c != NULL; c = c->next)
		end = c->start + (int64_t)c->len;
	return end;
}

int logstore_read(struct logstore *ls, const char *job, int rank, int64_t generation,
                  int64_t offset, size_t max, struct logstore_read *out)
{
	const struct stream *s = stream_find(ls, job, rank, generation);
	memset(out, 0, sizeof *out);
	if (s == NULL)
		return YARD_ENOTFOUND;
	snprintf(out->node, sizeof out->node, "%s", s->node);
	out->first_offset = s->head != NULL ? s->head->start : s->floor;
	out->end_offset = stream_end(s);
	out->offset = out->next_offset = offset;
	const struct chunk *c = s->head;
	while (c != NULL && c->start + (int64_t)c->len <= offset)
		c = c->next;
	if (c == NULL || max == 0)
		return 0;
	int64_t start = YARD_MAX(offset, c->start);
	out->skipped = start - offset;
	out->offset = start;
	size_t want = max;
	out->data = malloc(want);
	if (out->data == NULL)
		return YARD_ENOMEM;
	int64_t cur = start;
	while (c != NULL && c->start <= cur && out->len < want) {
		size_t from = (size_t)(cur - c->start);
		size_t n = YARD_MIN(c->len - from, want - out->len);
		memcpy(out->data + out->len, c->data + from, n);
		out->len += n;
		cur += (int64_t)n;
		c = c->next;
	}
	out->next_offset = cur;
	return 0;
}

static int stream_order(const void *a, const void *b)
{
	const struct stream *x = *(const struct stream *const *)a;
	const struct stream *y = *(const struct stream *const *)b;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->generation < y->generation ? -1 : x->generation > y->generation;
}

json_t *logstore_streams(const struct logstore *ls, const char *job)
{
	json_t *list = json_array();
	const struct stream **mine = calloc((size_t)ls->n_streams + 1, sizeof *mine);
	int n = 0;
	if (mine == NULL)
		return list;
	for (int i = 0; i < ls->n_streams; i++)
		if (strcmp(ls->streams[i].job, job) == 0)
			mine[n++] = &ls->streams[i];
	qsort(mine, (size_t)n, sizeof *mine, stream_order);
	for (int i = 0; i < n; i++) {
		const struct stream *s = mine[i];
		json_array_append_new(
		    list, json_pack("{s:i,s:I,s:s,s:I,s:I,s:I}", "rank", s->rank, "generation",
		                    (json_int_t)s->generation, "node", s->node, "first_offset",
		                    (json_int_t)(s->head != NULL ? s->head->start : s->floor),
		                    "end_offset", (json_int_t)stream_end(s), "bytes",
		                    (json_int_t)s->bytes));
	}
	free(mine);
	return list;
}

int64_t logstore_latest_generation(const struct logstore *ls, const char *job, int rank)
{
	int64_t latest = -1;
	for (int i = 0; i < ls->n_streams; i++)
		if (ls->streams[i].rank == rank && strcmp(ls->streams[i].job, job) == 0 &&
		    ls->streams[i].generation > latest)
			latest = ls->streams[i].generation;
	return latest;
}

/* Length of the valid UTF-8 sequence at p (n bytes available): 1..4; 0 when the bytes are
 * a valid but incomplete start of one; -1 when invalid. */
static int utf8_seq(const unsigned char *p, size_t n)
{
	int want;
	unsigned lo = 0x80, hi = 0xBF;
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xC2 && p[0] <= 0xDF)
		want = 2;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF) {
		want = 3;
		if (p[0] == 0xE0)
			lo = 0xA0;
		if (p[0] == 0xED)
			hi = 0x9F; /* no surrogates */
	} else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
		want = 4;
		if (p[0] == 0xF0)
			lo = 0x90;
		if (p[0] == 0xF4)
			hi = 0x8F;
	} else
		return -1;
	for (int i = 1; i < want; i++) {
		if ((size_t)i >= n)
			return 0;
		unsigned b = p[i];
		if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
			return -1;
	}
	return want;
}

json_t *logstore_text(const char *data, size_t len, size_t *used)
{
	const unsigned char *p = (const unsigned char *)data;
	char *out = malloc(len * 3 + 1); /* an invalid byte (1) becomes U+FFFD (3) */
	size_t o = 0, i = 0;
	if (out == NULL) {
		*used = 0;
		return json_string("");
	}
	while (i < len) {
		int n = utf8_seq(p + i, len - i);
		if (n == 0 && i > 0)
			break; /* a character cut at the end: the next read starts with it */
		if (n <= 0) {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += 1;
			continue;
		}
		memcpy(out + o, p + i, (size_t)n);
		o += (size_t)n;
		i += (size_t)n;
	}
	*used = i;
	json_t *s = json_stringn(out, o);
	free(out);
	return s != NULL ? s : json_string("");
}
