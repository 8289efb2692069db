/* ckpt.c: the checkpoint shard format of ckpt.h: serialisation into one buffer, CRC32C
 * (table-driven, reflected Castagnoli polynomial 0x82F63B78), atomic write and verified read.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataplane/ckpt.h"

#define TABLE_ENTRY_BYTES 128
#define HEADER_BYTES 256

static uint32_t crc_table[256];
static int crc_table_ready;

static void crc_table_init(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[n] = c;
	}
	__atomic_store_n(&crc_table_ready, 1, __ATOMIC_RELEASE);
}

uint32_t ckpt_crc32c(uint32_t crc, const void *buf, size_t len)
{
	if (!__atomic_load_n(&crc_table_ready, __ATOMIC_ACQUIRE))
		crc_table_init(); /* idempotent: racing initialisers write the same table */
	const unsigned char *p = buf;
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* ---- little-endian byte writer / reader ---- */

struct wbuf {
	unsigned char *p;
	size_t len;
};

static void put(struct wbuf *w, const void *src, size_t n)
{
	memcpy(w->p + w->len, src, n);
	w->len += n;
}
static void put_u32(struct wbuf *w, uint32_t v)
{
	put(w, &v, 4);
}
static void put_u64(struct wbuf *w, uint64_t v)
{
	put(w, &v, 8);
}

struct rbuf {
	const unsigned char *p;
	size_t len, at;
};

static void get(struct rbuf *r, void *dst, size_t n)
{
	memcpy(dst, r->p + r->at, n);
	r->at += n;
}
static uint32_t get_u32(struct rbuf *r)
{
	uint32_t v;
	get(r, &v, 4);
	return v;
}
static uint64_t get_u64(struct rbuf *r)
{
	uint64_t v;
	get(r, &v, 8);
	return v;
}

static void meta_put(struct wbuf *w, const struct ckpt_meta *m)
{
	put(w, m->job, sizeof m->job);
	put_u64(w, (uint64_t)m->step);
	int32_t ints[] = {m->rank, m->world,   m->dp,   m->tp,     m->pp,      m->v,        m->m,
	                  m->d_in, m->d_model, m->d_ff, m->layers, m->classes, m->optimizer};
	for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
		put_u32(w, (uint32_t)ints[k]);
	put_u64(w, m->model_seed);
	put_u64(w, (uint64_t)m->optim_t);
	put_u64(w, m->data_seed);
	put_u64(w, m->data_position);
}

static void meta_get(struct rbuf *r, struct ckpt_meta *m)
{
	get(r, m->job, sizeof m->job);
	m->job[sizeof m->job - 1] = '\0';
	m->step = (int64_t)get_u64(r);
	int32_t *ints[] = {&m->rank,   &m->world,   &m->dp,       &m->tp,      &m->pp,
	                   &m->v,      &m->m,       &m->d_in,     &m->d_model, &m->d_ff,
	                   &m->layers, &m->classes, &m->optimizer};
	for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
		*ints[k] = (int32_t)get_u32(r);
	m->model_seed = get_u64(r);
	m->optim_t = (int64_t)get_u64(r);
	m->data_seed = get_u64(r);
	m->data_position = get_u64(r);
}

static int fsync_dir_of(const char *path)
{
	char copy[4096];
	snprintf(copy, sizeof copy, "%s", path);
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

int ckpt_write_file_atomic(const char *path, const void *buf, size_t len, struct yard_err *err)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return yard_err_set(err, YARD_EIO, "%s: cannot create: %s", tmp, strerror(errno));
	const unsigned char *p = buf;
	size_t left = len;
	while (left > 0) {
		ssize_t n = write(fd, p, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			return yard_err_set(err, e == ENOSPC ? YARD_ENOSPACE : YARD_EIO,
			                    "%s: write failed: %s", tmp, strerror(e));
		}
		p += n;
		left -= (size_t)n;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		int e = errno;
		unlink(tmp);
		return yard_err_set(err, YARD_EIO, "%s: fsync failed: %s", tmp, strerror(e));
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return yard_err_set(err, YARD_EIO, "%s: rename failed: %s", path, strerror(e));
	}
	if (fsync_dir_of(path) != 0)
		return yard_err_set(err, YARD_EIO, "%s: fsync of its directory failed: %s", path,
		                    strerror(errno));
	return 0;
}

int ckpt_write(const char *path, const struct ckpt_meta *meta, const struct ckpt_tensor *t,
               int ntensors, struct yard_err *err)
{
	size_t data_bytes = 0;
	for (int k = 0; k < ntensors; k++)
		data_bytes += (size_t)t[k].rows * t[k].cols * sizeof(float);
	size_t total = HEADER_BYTES + (size_t)ntensors * TABLE_ENTRY_BYTES + data_bytes + 4;
	struct wbuf w = {.p = calloc(1, total)};
	if (!w.p)
		return yard_err_set(err, YARD_ENOMEM, "%s: out of memory for %zu bytes", path,
		                    total);
	put(&w, CKPT_MAGIC, 8);
	put_u32(&w, CKPT_VERSION);
	put_u32(&w, HEADER_BYTES);
	meta_put(&w, meta);
	put_u32(&w, (uint32_t)ntensors);
	w.len = HEADER_BYTES;
	uint64_t offset = 0;
	for (int k = 0; k < ntensors; k++) {
		size_t entry = w.len;
		put(&w, t[k].name, sizeof t[k].name);
		int32_t ints[] = {(int32_t)t[k].kind, (int32_t)t[k].tensor_id,
		                  t[k].rows,          t[k].cols,
		                  t[k].row0,          t[k].col0,
		                  t[k].full_rows,     t[k].full_cols};
		for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
			put_u32(&w, (uint32_t)ints[i]);
		put_u64(&w, offset);
		put_u64(&w, (uint64_t)t[k].rows * t[k].cols);
		offset += (uint64_t)t[k].rows * t[k].cols * sizeof(float);
		w.len = entry + TABLE_ENTRY_BYTES;
	}
	for (int k = 0; k < ntensors; k++)
		put(&w, t[k].data, (size_t)t[k].rows * t[k].cols * sizeof(float));
	put_u32(&w, ckpt_crc32c(0, w.p, w.len));
	int rc = ckpt_write_file_atomic(path, w.p, w.len, err);
	free(w.p);
	return rc;
}

static int read_all(const char *path, unsigned char **out, size_t *len, struct yard_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return yard_err_set(err, errno == ENOENT ? YARD_ENOTFOUND : YARD_EIO,
		                    "%s: cannot open checkpoint shard: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fileno(f), &st) != 0) {
		fclose(f);
		return yard_err_set(err, YARD_EIO, "%s: stat failed", path);
	}
	unsigned char *buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		fclose(f);
		return yard_err_set(err, YARD_ENOMEM, "%s: out of memory", path);
	}
	size_t n = fread(buf, 1, (size_t)st.st_size, f);
	fclose(f);
	if (n != (size_t)st.st_size) {
		free(buf);
		return yard_err_set(err, YARD_EIO, "%s: short read", path);
	}
	*out = buf;
	*len = n;
	return 0;
}

/* A shard read whole and verified: magic, checksum, format version, header and table bounds.
 * Nothing in it is trusted before the checksum holds. */
struct shard {
	const char *path;
	unsigned char *buf;
	size_t len, data_start;
	uint32_t count;
	struct ckpt_meta meta;
};

/* One row of the tensor table, as the file says (unchecked). */
struct entry {
	char name[48];
	uint32_t kind;
	int32_t rows, cols, row0, col0, full_rows, full_cols;
	uint64_t offset, numel;
};

static int shard_load(const char *path, struct shard *s, struct yard_err *err)
{
	memset(s, 0, sizeof *s);
	s->path = path;
	int rc = read_all(path, &s->buf, &s->len, err);
	if (rc)
		return rc;
	if (s->len < HEADER_BYTES + 4 || memcmp(s->buf, CKPT_MAGIC, 8) != 0)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "%s: not a checkpoint shard (bad magic or %zu bytes)", path,
		                    s->len);
	uint32_t stored, computed = ckpt_crc32c(0, s->buf, s->len - 4);
	memcpy(&stored, s->buf + s->len - 4, 4);
	if (stored != computed)
		return yard_err_set(
		    err, YARD_ECORRUPT,
		    "%s: checksum mismatch (CRC32C stored %08x, computed %08x): the "
		    "shard is corrupt",
		    path, stored, computed);
	struct rbuf r = {.p = s->buf, .len = s->len, .at = 8};
	uint32_t version = get_u32(&r), header_bytes = get_u32(&r);
	if (version != CKPT_VERSION || header_bytes != HEADER_BYTES)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "%s: format version %u, this build reads %u", path, version,
		                    CKPT_VERSION);
	meta_get(&r, &s->meta);
	s->count = get_u32(&r);
	s->data_start = HEADER_BYTES + (size_t)s->count * TABLE_ENTRY_BYTES;
	if (s->data_start > s->len - 4)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "%s: tensor table of %u entries overruns the file", path,
		                    s->count);
	return 0;
}

static void entry_get(const struct shard *s, uint32_t e, struct entry *x)
{
	struct rbuf r = {
	    .p = s->buf, .len = s->len, .at = HEADER_BYTES + (size_t)e * TABLE_ENTRY_BYTES};
	get(&r, x->name, sizeof x->name);
	x->name[sizeof x->name - 1] = '\0';
	int32_t f[8];
	for (int i = 0; i < 8; i++)
		f[i] = (int32_t)get_u32(&r);
	x->kind = (uint32_t)f[0];
	x->rows = f[2], x->cols = f[3], x->row0 = f[4], x->col0 = f[5];
	x->full_rows = f[6], x->full_cols = f[7];
	x->offset = get_u64(&r);
	x->numel = get_u64(&r);
}

/* The entry's data, or NULL when the table puts it (partly) outside the data section. offset
 * is the file's word: compared with the room left, never added to a position (a sum near 2^64
 * wraps and points before the buffer). */
static const unsigned char *entry_data(const struct shard *s, const struct entry *x)
{
	size_t room = s->len - 4 - s->data_start;
	if (x->rows < 0 || x->cols < 0 || x->numel != (uint64_t)x->rows * (uint64_t)x->cols ||
	    x->offset > room || x->numel * sizeof(float) > room - x->offset)
		return NULL;
	return s->buf + s->data_start + x->offset;
}

#define MISMATCH(field, fmt, a, b)                                                                 \
	do {                                                                                       \
		if ((a) != (b))                                                                    \
			return yard_err_set(                                                       \
			    err, YARD_EMISMATCH,                                                   \
			    "%s: shard is for " field " " fmt ", this run has " fmt, path, a, b);  \
	} while (0)

/* The model, optimiser and data order must be this run's whatever the layout. */
static int model_check(const char *path, const struct ckpt_meta *got,
                       const struct ckpt_meta *expect, struct yard_err *err)
{
	MISMATCH("model.d_in", "%d", got->d_in, expect->d_in);
	MISMATCH("model.d_model", "%d", got->d_model, expect->d_model);
	MISMATCH("model.d_ff", "%d", got->d_ff, expect->d_ff);
	MISMATCH("model.layers", "%d", got->layers, expect->layers);
	MISMATCH("model.classes", "%d", got->classes, expect->classes);
	MISMATCH("optimizer", "%d", got->optimizer, expect->optimizer);
	MISMATCH("train.data_seed", "%llu", (unsigned long long)got->data_seed,
	         (unsigned long long)expect->data_seed);
	return 0;
}

static int job_check(const char *path, const struct ckpt_meta *got, const struct ckpt_meta *expect,
                     struct yard_err *err)
{
	if (strncmp(got->job, expect->job, sizeof got->job) != 0)
		return yard_err_set(err, YARD_EMISMATCH,
		                    "%s: shard is for job '%s', this run is '%s'", path, got->job,
		                    expect->job);
	return 0;
}

/* world = dp x tp x pp, read from a file: any int32 values, so without overflow */
static int world_matches_grid(const struct ckpt_meta *m)
{
	int32_t grid;
	return !__builtin_mul_overflow(m->dp, m->tp, &grid) &&
	       !__builtin_mul_overflow(grid, m->pp, &grid) && grid == m->world;
}

/* The checks of ckpt_read on the shard's meta, in the order its messages are documented. */
static int layout_check(const char *path, const struct ckpt_meta *got,
                        const struct ckpt_meta *expect, struct yard_err *err)
{
	int rc = job_check(path, got, expect, err);
	if (rc)
		return rc;
	MISMATCH("rank", "%d", got->rank, expect->rank);
	if ((got->dp != expect->dp || got->world != expect->world) &&
	    !(got->tp == expect->tp && got->pp == expect->pp && world_matches_grid(got)))
		/* data-parallel replicas hold the same parameters and optimiser state, so any dp
		 * over the same tp x pp grid restores (the caller picks the replica's shard) */
		return yard_err_set(
		    err, YARD_EMISMATCH,
		    "%s: shard is for layout dp %d x tp %d x pp %d (world size %d), "
		    "this run has dp %d x tp %d x pp %d (world size %d); only a layout "
		    "with the same tp and pp (any dp) can restore it",
		    path, got->dp, got->tp, got->pp, got->world, expect->dp, expect->tp, expect->pp,
		    expect->world);
	MISMATCH("tp", "%d", got->tp, expect->tp);
	MISMATCH("pp", "%d", got->pp, expect->pp);
	MISMATCH("virtual stages", "%d", got->v, expect->v);
	MISMATCH("micro-batches", "%d", got->m, expect->m);
	return model_check(path, got, expect, err);
}

int ckpt_peek(const char *path, struct ckpt_meta *got, struct yard_err *err)
{
	struct shard s;
	int rc = shard_load(path, &s, err);
	if (rc == 0)
		*got = s.meta;
	free(s.buf);
	return rc;
}

int ckpt_read(const char *path, const struct ckpt_meta *expect, struct ckpt_meta *got,
              struct ckpt_tensor *t, int ntensors, struct yard_err *err)
{
	struct shard s;
	int rc = shard_load(path, &s, err);
	if (rc == 0) {
		*got = s.meta;
		rc = layout_check(path, got, expect, err);
	}
	for (int k = 0; rc == 0 && k < ntensors; k++) {
		int found = 0;
		for (uint32_t e = 0; e < s.count && !found; e++) {
			struct entry x;
			entry_get(&s, e, &x);
			if (strcmp(x.name, t[k].name) != 0 || x.kind != t[k].kind)
				continue;
			found = 1;
			if (x.rows != t[k].rows || x.cols != t[k].cols || x.row0 != t[k].row0 ||
			    x.col0 != t[k].col0 || x.full_rows != t[k].full_rows ||
			    x.full_cols != t[k].full_cols) {
				rc = yard_err_set(
				    err, YARD_EMISMATCH,
				    "%s: tensor %s is a (%d x %d) slice at (%d, %d) of (%d "
				    "x %d); this run needs (%d x %d) at (%d, %d) of (%d x "
				    "%d)",
				    path, x.name, x.rows, x.cols, x.row0, x.col0, x.full_rows,
				    x.full_cols, t[k].rows, t[k].cols, t[k].row0, t[k].col0,
				    t[k].full_rows, t[k].full_cols);
				break;
			}
			const unsigned char *data = entry_data(&s, &x);
			if (data == NULL) {
				rc = yard_err_set(err, YARD_ECORRUPT,
				                  "%s: tensor %s data lies outside the file", path,
				                  x.name);
				break;
			}
			memcpy(t[k].data, data, x.numel * sizeof(float));
		}
		if (rc == 0 && !found)
			rc = yard_err_set(err, YARD_EMISMATCH, "%s: has no tensor %s (kind %u)",
			                  path, t[k].name, t[k].kind);
	}
	free(s.buf);
	return rc;
}

/* Is the entry a well-formed slice of its full shape? The file's numbers, so in 64 bits. */
static int entry_geometry_ok(const struct entry *x)
{
	return x->row0 >= 0 && x->col0 >= 0 && x->rows >= 0 && x->cols >= 0 &&
	       (int64_t)x->row0 + x->rows <= x->full_rows &&
	       (int64_t)x->col0 + x->cols <= x->full_cols;
}

/* Copies the part of entry x (data src) that overlaps tensor t, marking each element of t it
 * fills for the first time in bits (one per element of t, row-major); returns how many. */
static uint64_t overlap_copy(struct ckpt_tensor *t, uint64_t *bits, const struct entry *x,
                             const unsigned char *src)
{
	int64_t r_lo = x->row0 > t->row0 ? x->row0 : t->row0;
	int64_t r_hi = (int64_t)x->row0 + x->rows < (int64_t)t->row0 + t->rows
	                   ? (int64_t)x->row0 + x->rows
	                   : (int64_t)t->row0 + t->rows;
	int64_t c_lo = x->col0 > t->col0 ? x->col0 : t->col0;
	int64_t c_hi = (int64_t)x->col0 + x->cols < (int64_t)t->col0 + t->cols
	                   ? (int64_t)x->col0 + x->cols
	                   : (int64_t)t->col0 + t->cols;
	uint64_t fresh = 0;
	for (int64_t r = r_lo; r < r_hi && c_lo < c_hi; r++) {
		size_t from = (size_t)((r - x->row0) * x->cols + (c_lo - x->col0));
		size_t to = (size_t)((r - t->row0) * t->cols + (c_lo - t->col0));
		size_t n = (size_t)(c_hi - c_lo);
		memcpy(t->data + to, src + from * sizeof(float), n * sizeof(float));
		for (size_t i = to; i < to + n; i++)
			if (!(bits[i / 64] >> (i % 64) & 1)) {
				bits[i / 64] |= 1ull << (i % 64);
				fresh++;
			}
	}
	return fresh;
}

int ckpt_read_resharded(const char *const *paths, int npaths, const struct ckpt_meta *expect,
                        struct ckpt_meta *got, struct ckpt_tensor *t, int ntensors,
                        struct yard_err *err)
{
	if (npaths < 1)
		return yard_err_set(err, YARD_EINVAL, "resharded restore: no shard to read");
	/* one bit per element of every tensor of t: which are filled */
	size_t *base = calloc((size_t)ntensors + 1, sizeof *base);
	uint64_t *filled = calloc((size_t)ntensors + 1, sizeof *filled);
	if (!base || !filled) {
		free(base);
		free(filled);
		return yard_err_set(err, YARD_ENOMEM, "resharded restore: out of memory");
	}
	for (int k = 0; k < ntensors; k++)
		base[k + 1] = base[k] + ((size_t)t[k].rows * t[k].cols + 63) / 64;
	uint64_t *bits = calloc(base[ntensors] + 1, sizeof *bits);
	int rc = bits ? 0 : yard_err_set(err, YARD_ENOMEM, "resharded restore: out of memory");
	for (int f = 0; rc == 0 && f < npaths; f++) {
		const char *path = paths[f];
		struct shard s;
		rc = shard_load(path, &s, err);
		if (rc == 0 && f == 0)
			*got = s.meta;
		if (rc == 0)
			rc = job_check(path, &s.meta, expect, err);
		if (rc == 0)
			rc = model_check(path, &s.meta, expect, err);
		/* every shard must be of the same checkpoint: step, layout and optimiser step */
		if (rc == 0 &&
		    (s.meta.step != got->step || s.meta.optim_t != got->optim_t ||
		     s.meta.data_position != got->data_position || s.meta.tp != got->tp ||
		     s.meta.pp != got->pp || s.meta.world != got->world))
			rc = yard_err_set(
			    err, YARD_EMISMATCH,
			    "%s: shard is of step %lld, layout tp %d x pp %d (world %d); "
			    "%s is of step %lld, tp %d x pp %d (world %d)",
			    path, (long long)s.meta.step, s.meta.tp, s.meta.pp, s.meta.world,
			    paths[0], (long long)got->step, got->tp, got->pp, got->world);
		for (uint32_t e = 0; rc == 0 && e < s.count; e++) {
			struct entry x;
			entry_get(&s, e, &x);
			for (int k = 0; rc == 0 && k < ntensors; k++) {
				if (strcmp(x.name, t[k].name) != 0 || x.kind != t[k].kind)
					continue;
				const unsigned char *data = entry_data(&s, &x);
				if (data == NULL || !entry_geometry_ok(&x))
					rc = yard_err_set(
					    err, YARD_ECORRUPT,
					    "%s: tensor %s: its slice or data lies outside "
					    "the tensor or the file",
					    path, x.name);
				else if (x.full_rows != t[k].full_rows ||
				         x.full_cols != t[k].full_cols)
					rc = yard_err_set(
					    err, YARD_EMISMATCH,
					    "%s: tensor %s is (%d x %d), this run's is "
					    "(%d x %d)",
					    path, x.name, x.full_rows, x.full_cols, t[k].full_rows,
					    t[k].full_cols);
				else
					filled[k] += overlap_copy(&t[k], bits + base[k], &x, data);
			}
		}
		free(s.buf);
	}
	for (int k = 0; rc == 0 && k < ntensors; k++) {
		uint64_t want = (uint64_t)t[k].rows * t[k].cols;
		if (filled[k] != want)
			rc = yard_err_set(
			    err, YARD_EMISMATCH,
			    "tensor %s (kind %u): %llu of its %llu elements (rows "
			    "%d-%d, columns %d-%d of %d x %d) are in none of the %d "
			    "shards read (%s ...)",
			    t[k].name, t[k].kind, (unsigned long long)(want - filled[k]),
			    (unsigned long long)want, t[k].row0, t[k].row0 + t[k].rows - 1,
			    t[k].col0, t[k].col0 + t[k].cols - 1, t[k].full_rows, t[k].full_cols,
			    npaths, paths[0]);
	}
	free(bits);
	free(base);
	free(filled);
	return rc;
}
