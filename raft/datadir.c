/* datadir.c: data directory lock and free-space check (see datadir.h). */
#include "raft/datadir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

int datadir_lock(const char *dir, int *fd, struct yard_err *err)
{
	char path[4096], holder[32] = "";
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return yard_err_set(err, YARD_EIO, "cannot create data dir %s: %s", dir,
		                    strerror(errno));
	snprintf(path, sizeof path, "%s/%s", dir, DATADIR_LOCK_FILE);
	int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (f < 0)
		return yard_err_set(err, YARD_EIO, "cannot open lock file %s: %s", path,
		                    strerror(errno));
	if (flock(f, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		ssize_t n = pread(f, holder, sizeof holder - 1, 0);
		holder[n > 0 ? n : 0] = '\0';
		holder[strcspn(holder, "\n")] = '\0';
		close(f);
		if (e == EWOULDBLOCK)
			return yard_err_set(
			    err, YARD_EBUSY,
			    "data dir %s is in use by another yardd (pid %s, lock file %s)", dir,
			    holder[0] ? holder : "unknown", path);
		return yard_err_set(err, YARD_EIO, "cannot lock %s: %s", path, strerror(e));
	}
	char pid[32];
	int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
	if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n) {
		close(f);
		return yard_err_set(err, YARD_EIO, "cannot write lock file %s: %s", path,
		                    strerror(errno));
	}
	*fd = f;
	return 0;
}

int datadir_claim(const char *dir, uint64_t id, struct yard_err *err)
{
	char path[4096], tmp[4200], buf[64];
	snprintf(path, sizeof path, "%s/%s", dir, DATADIR_MEMBER_FILE);
	FILE *f = fopen(path, "r");
	if (f != NULL) {
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = '\0';
		char *end = NULL;
		errno = 0;
		unsigned long long owner = strtoull(buf, &end, 10);
		if (buf[0] < '0' || buf[0] > '9' || errno != 0 || owner == 0 ||
		    strcmp(end, "\n") != 0)
			return yard_err_set(
			    err, YARD_EIO,
			    "%s does not hold a member id (%zu bytes): remove it only if "
			    "this data dir is known to be --id %llu's",
			    path, n, (unsigned long long)id);
		if (owner != id)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "data dir %s belongs to member %llu, not --id %llu (its raft "
			    "votes and log are member %llu's: start it with --id %llu, "
			    "or give member %llu a data dir of its own)",
			    dir, owner, (unsigned long long)id, owner, owner,
			    (unsigned long long)id);
		return 0;
	}
	if (errno != ENOENT)
		return yard_err_set(err, YARD_EIO, "cannot read %s: %s", path, strerror(errno));
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	int n = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)id);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int ok = fd >= 0 && write(fd, buf, (size_t)n) == n && fsync(fd) == 0;
	if (fd >= 0 && close(fd) != 0)
		ok = 0;
	if (ok && rename(tmp, path) == 0) {
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		ok = dfd >= 0 && fsync(dfd) == 0;
		if (dfd >= 0)
			close(dfd);
		if (ok)
			return 0;
	}
	int e = errno;
	unlink(tmp);
	return yard_err_set(err, YARD_EIO, "cannot write %s: %s", path, strerror(e));
}

int datadir_unclaim(const char *dir, struct yard_err *err)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, DATADIR_MEMBER_FILE);
	if (unlink(path) != 0 && errno != ENOENT)
		return yard_err_set(err, YARD_EIO, "cannot remove %s: %s", path, strerror(errno));
	return 0;
}

int datadir_free_mb(const char *dir, uint64_t *free_mb, struct yard_err *err)
{
	struct statvfs st;
	if (statvfs(dir, &st) != 0)
		return yard_err_set(err, YARD_EIO, "statvfs %s: %s", dir, strerror(errno));
	*free_mb = (uint64_t)st.f_bavail * st.f_frsize / (1024 * 1024);
	return 0;
}

int datadir_refuse_below(const char *dir, uint64_t free_mb, uint64_t min_free_mb,
                         struct yard_err *err)
{
	if (free_mb < min_free_mb)
		return yard_err_set(
		    err, YARD_ENOSPACE,
		    "data dir %s has %llu MiB free, below the %llu MiB threshold: writes refused",
		    dir, (unsigned long long)free_mb, (unsigned long long)min_free_mb);
	return 0;
}
