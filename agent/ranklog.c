/* ranklog.c: see ranklog.h. */
#include "agent/ranklog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"

#define ROTATE_COPY_ROUNDS 4

void rank_log_init(struct rank_log *l, const char *path)
{
	memset(l, 0, sizeof *l);
	snprintf(l->path, sizeof l->path, "%s", path);
	l->pending_end = -1;
}

static int64_t file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

int64_t rank_log_end(const struct rank_log *l)
{
	return l->base + file_size(l->path);
}

int rank_log_rotate(struct rank_log *l, int64_t max_bytes)
{
	char rotated[PATH_MAX + 4], buf[65536];
	struct stat st;
	int64_t copied = 0;
	ssize_t n;
	int in, out, rc = -1;

	if (l->path[0] == '\0' || stat(l->path, &st) != 0 || st.st_size <= max_bytes)
		return 0;
	snprintf(rotated, sizeof rotated, "%s.1", l->path);
	in = open(l->path, O_RDWR | O_CLOEXEC);
	out = open(rotated, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (in < 0 || out < 0)
		goto done;
	/* copy until the size stops growing (bounded: a rank printing without pause loses
	 * only what it writes in the last round's window) */
	for (int round = 0; round < ROTATE_COPY_ROUNDS; round++) {
		while ((n = pread(in, buf, sizeof buf, copied)) > 0) {
			if (write(out, buf, (size_t)n) != n)
				goto done;
			copied += n;
		}
		if (n < 0 || fstat(in, &st) != 0)
			goto done;
		if (st.st_size <= copied)
			break;
	}
	if (ftruncate(in, 0) != 0)
		goto done;
	l->rot_start = l->base;
	l->rot_len = copied;
	l->base += YARD_MAX((int64_t)st.st_size, copied);
	rc = 1;
done:
	if (rc < 0)
		log_warn("cannot rotate %s: %s", l->path, strerror(errno));
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return rc;
}

static size_t read_at(const char *path, int64_t pos, size_t max, char *buf)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;
	if (fd < 0)
		return 0;
	while (got < max) {
		ssize_t n = pread(fd, buf + got, max - got, pos + (int64_t)got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	return got;
}

size_t rank_log_next(const struct rank_log *l, size_t max, int64_t *offset, char *buf)
{
	int64_t off = l->shipped;
	size_t n;
	if (l->rot_len > 0 && off < l->rot_start + l->rot_len) {
		char rotated[PATH_MAX + 4];
		snprintf(rotated, sizeof rotated, "%s.1", l->path);
		off = YARD_MAX(off, l->rot_start);
		n = read_at(rotated, off - l->rot_start,
		            (size_t)YARD_MIN((int64_t)max, l->rot_start + l->rot_len - off), buf);
		if (n > 0) {
			*offset = off;
			return n;
		}
	}
	off = YARD_MAX(off, l->base);
	n = read_at(l->path, off - l->base, max, buf);
	*offset = off;
	return n;
}

void rank_log_rewind(struct rank_log *l, int64_t tail)
{
	int64_t from = YARD_MAX(0, rank_log_end(l) - tail);
	if (from < l->shipped)
		l->shipped = from;
	l->pending_end = -1;
}
