/* ranklog.c: see ranklog.h. */
#include "agent/ranklog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

#define ROTATE_LOCK_TRIES 20
#define ROTATE_LOCK_PAUSE_NS 50000 /* 50 us: at most 1 ms of the agent's loop */

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

int rank_log_write(int fd, const void *data, size_t len)
{
	const char *p = data;
	size_t done = 0;
	while (flock(fd, LOCK_SH) != 0 && errno == EINTR)
		;
	while (done < len) {
		ssize_t n = write(fd, p + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	flock(fd, LOCK_UN);
	return done == len ? 0 : -1;
}

/* Appends what in holds from *copied on to out. */
static int copy_rest(int in, int out, int64_t *copied)
{
	char buf[65536];
	ssize_t n;
	while ((n = pread(in, buf, sizeof buf, *copied)) > 0) {
		if (write(out, buf, (size_t)n) != n)
			return -1;
		*copied += n;
	}
	return n < 0 ? -1 : 0;
}

/* The exclusive lock, tried a few times without blocking: a writer holds its shared lock
 * for one write, but one stopped by SIGSTOP in between would hold it for as long as it is
 * stopped, and the agent's loop must not wait on that. */
static int lock_exclusive(int fd)
{
	for (int i = 0; i < ROTATE_LOCK_TRIES; i++) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		struct timespec pause = {0, ROTATE_LOCK_PAUSE_NS};
		nanosleep(&pause, NULL);
	}
	errno = EWOULDBLOCK;
	return -1;
}

int rank_log_rotate(struct rank_log *l, int64_t max_bytes)
{
	char rotated[PATH_MAX + 4], tmp[PATH_MAX + 8];
	struct stat st;
	int64_t copied = 0;
	int in, out, locked = 0, rc = -1;

	if (l->path[0] == '\0' || stat(l->path, &st) != 0 || st.st_size <= max_bytes)
		return 0;
	snprintf(rotated, sizeof rotated, "%s.1", l->path);
	snprintf(tmp, sizeof tmp, "%s.1.tmp", l->path);
	in = open(l->path, O_RDWR | O_CLOEXEC);
	out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (in < 0 || out < 0 || copy_rest(in, out, &copied) != 0)
		goto done;
	/* what was written during that copy, and the truncation, under the lock: a writer
	 * that locks (the rank's shim) has no write in between to lose */
	if (lock_exclusive(in) != 0) {
		if (errno == EWOULDBLOCK)
			rc = 0; /* busy now: the next look rotates */
		goto done;
	}
	locked = 1;
	if (copy_rest(in, out, &copied) != 0 || fstat(in, &st) != 0 || ftruncate(in, 0) != 0)
		goto done;
	flock(in, LOCK_UN);
	locked = 0;
	l->rot_start = l->base;
	/* FILE.1 not in place would give wrong bytes at those offsets: say they are gone */
	l->rot_len = rename(tmp, rotated) == 0 ? copied : 0;
	/* a writer that does not lock may have written between the stat and the truncation:
	 * those bytes are lost, the offsets of later ones stay right */
	l->base += YARD_MAX((int64_t)st.st_size, copied);
	rc = 1;
done:
	if (rc < 0)
		log_warn("cannot rotate %s: %s", l->path, strerror(errno));
	if (locked)
		flock(in, LOCK_UN);
	if (rc != 1 || l->rot_len == 0)
		unlink(tmp);
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
