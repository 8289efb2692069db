/* datadir.h: guards for a controller's data directory: one process per directory (an
 * flock'd lock file; raft-probe.md §4.10) and a free-space floor below which writes are
 * refused, because raft 0.15 crashes when the disk fills (raft-probe.md §4.4). */
#ifndef YARD_RAFT_DATADIR_H
#define YARD_RAFT_DATADIR_H

#include <stdint.h>

#include "common/err.h"

#define DATADIR_LOCK_FILE "yardd.lock"

/* Creates dir if missing and takes an exclusive lock on dir/yardd.lock, writing our pid
 * into it. YARD_EBUSY naming the holder's pid if another process has it. The lock lives
 * as long as *fd stays open. */
int datadir_lock(const char *dir, int *fd, struct yard_err *err);
/* The member a data dir belongs to: its raft votes and log are that member's, and another
 * --id started on them could vote twice in one term or stand in for a member that still
 * has its own (etcd refuses the same with "member ID mismatch"). */
#define DATADIR_MEMBER_FILE "member-id"
/* With dir's lock held: 0 when dir/member-id names id, or names nobody yet (it is then
 * written, synced); YARD_EINVAL naming both ids when it names another member; YARD_EIO
 * when it cannot be read or written, or holds something else than an id. */
int datadir_claim(const char *dir, uint64_t id, struct yard_err *err);
/* Removes dir/member-id (a directory to be copied for several members: each claims its
 * copy at its first start). 0, or YARD_EIO. */
int datadir_unclaim(const char *dir, struct yard_err *err);
/* Free space (for unprivileged users) of the filesystem holding dir, in MiB. */
int datadir_free_mb(const char *dir, uint64_t *free_mb, struct yard_err *err);
/* 0, or YARD_ENOSPACE with the API's message when free_mb (of dir) is below min_free_mb. */
int datadir_refuse_below(const char *dir, uint64_t free_mb, uint64_t min_free_mb,
                         struct yard_err *err);

#endif
