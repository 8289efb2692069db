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

#define MISMATCH(field, fmt, a, b)                                                                 \
	do {                                                                                       \
		if ((a) != (b)) {                                                                  \
			rc = yard_err_set(err, YARD_EMISMATCH,                                     \
			                  "%s: shard is for " field " " fmt ", this run has " fmt, \
			                  path, a, b);                                             \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* world = dp x tp x pp, read from a file: any int32 values, so without overflow */
static int world_matches_grid(const struct ckpt_meta *m)
{
	int32_t grid;
	return !__builtin_mul_overflow(m->dp, m->tp, &grid) &&
	       !__builtin_mul_overflow(grid, m->pp, &grid) && grid == m->world;
}

int ckpt_read(const char *path, const struct ckpt_meta *expect, struct ckpt_meta *got,
              struct ckpt_tensor *t, int ntensors, struct yard_err *err)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	int rc = read_all(path, &buf, &len, err);
	if (rc)
		return rc;
	struct rbuf r = {.p = buf, .len = len};
	if (len < HEADER_BYTES + 4 || memcmp(buf, CKPT_MAGIC, 8) != 0) {
		rc = yard_err_set(err, YARD_ECORRUPT,
		                  "%s: not a checkpoint shard (bad magic or %zu "
		                  "bytes)",
		                  path, len);
		goto out;
	}
	uint32_t stored, computed = ckpt_crc32c(0, buf, len - 4);
	memcpy(&stored, buf + len - 4, 4);
	if (stored != computed) {
		rc = yard_err_set(err, YARD_ECORRUPT,
		                  "%s: checksum mismatch (CRC32C stored %08x, computed %08x): the "
		                  "shard is corrupt",
		                  path, stored, computed);
		goto out;
	}
	r.at = 8;
	uint32_t version = get_u32(&r), header_bytes = get_u32(&r);
	if (version != CKPT_VERSION || header_bytes != HEADER_BYTES) {
		rc = yard_err_set(err, YARD_ECORRUPT, "%s: format version %u, this build reads %u",
		                  path, version, CKPT_VERSION);
		goto out;
	}
	meta_get(&r, got);
	uint32_t count = get_u32(&r);
	if (strncmp(got->job, expect->job, sizeof got->job) != 0) {
		rc =
		    yard_err_set(err, YARD_EMISMATCH, "%s: shard is for job '%s', this run is '%s'",
		                 path, got->job, expect->job);
		goto out;
	}
	MISMATCH("rank", "%d", got->rank, expect->rank);
	if ((got->dp != expect->dp || got->world != expect->world) &&
	    !(got->tp == expect->tp && got->pp == expect->pp && world_matches_grid(got))) {
		/* data-parallel replicas hold the same parameters and optimiser state, so any dp
		 * over the same tp x pp grid restores (the caller picks the replica's shard) */
		rc = yard_err_set(
		    err, YARD_EMISMATCH,
		    "%s: shard is for layout dp %d x tp %d x pp %d (world size %d), "
		    "this run has dp %d x tp %d x pp %d (world size %d); only a layout "
		    "with the same tp and pp (any dp) can restore it",
		    path, got->dp, got->tp, got->pp, got->world, expect->dp, expect->tp, expect->pp,
		    expect->world);
		goto out;
	}
	MISMATCH("tp", "%d", got->tp, expect->tp);
	MISMATCH("pp", "%d", got->pp, expect->pp);
	MISMATCH("virtual stages", "%d", got->v, expect->v);
	MISMATCH("micro-batches", "%d", got->m, expect->m);
	MISMATCH("model.d_in", "%d", got->d_in, expect->d_in);
	MISMATCH("model.d_model", "%d", got->d_model, expect->d_model);
	MISMATCH("model.d_ff", "%d", got->d_ff, expect->d_ff);
	MISMATCH("model.layers", "%d", got->layers, expect->layers);
	MISMATCH("model.classes", "%d", got->classes, expect->classes);
	MISMATCH("optimizer", "%d", got->optimizer, expect->optimizer);
	MISMATCH("train.data_seed", "%llu", (unsigned long long)got->data_seed,
	         (unsigned long long)expect->data_seed);
	size_t data_start = HEADER_BYTES + (size_t)count * TABLE_ENTRY_BYTES;
	if (data_start > len - 4) {
		rc = yard_err_set(err, YARD_ECORRUPT,
		                  "%s: tensor table of %u entries overruns the "
		                  "file",
		                  path, count);
		goto out;
	}
	for (int k = 0; k < ntensors; k++) {
		int found = 0;
		for (uint32_t e = 0; e < count && !found; e++) {
			r.at = HEADER_BYTES + (size_t)e * TABLE_ENTRY_BYTES;
			char name[48];
			get(&r, name, sizeof name);
			name[sizeof name - 1] = '\0';
			int32_t f[8];
			for (int i = 0; i < 8; i++)
				f[i] = (int32_t)get_u32(&r);
			uint64_t offset = get_u64(&r), numel = get_u64(&r);
			if (strcmp(name, t[k].name) != 0 || (uint32_t)f[0] != t[k].kind)
				continue;
			found = 1;
			if (f[2] != t[k].rows || f[3] != t[k].cols || f[4] != t[k].row0 ||
			    f[5] != t[k].col0 || f[6] != t[k].full_rows || f[7] != t[k].full_cols) {
				rc = yard_err_set(
				    err, YARD_EMISMATCH,
				    "%s: tensor %s is a (%d x %d) slice at (%d, %d) of (%d "
				    "x %d); this run needs (%d x %d) at (%d, %d) of (%d x "
				    "%d)",
				    path, name, f[2], f[3], f[4], f[5], f[6], f[7], t[k].rows,
				    t[k].cols, t[k].row0, t[k].col0, t[k].full_rows,
				    t[k].full_cols);
				goto out;
			}
			/* offset is the file's word: compared with the room left, never added to
			 * a position (a sum near 2^64 wraps and points before the buffer) */
			size_t room = len - 4 - data_start;
			if (numel != (uint64_t)t[k].rows * t[k].cols || offset > room ||
			    numel * sizeof(float) > room - offset) {
				rc = yard_err_set(err, YARD_ECORRUPT,
				                  "%s: tensor %s data lies outside the file", path,
				                  name);
				goto out;
			}
			memcpy(t[k].data, buf + data_start + offset, numel * sizeof(float));
		}
		if (!found) {
			rc = yard_err_set(err, YARD_EMISMATCH, "%s: has no tensor %s (kind %u)",
			                  path, t[k].name, t[k].kind);
			goto out;
		}
	}
out:
	free(buf);
	return rc;
}
