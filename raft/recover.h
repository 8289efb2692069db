/* recover.h: the disaster procedure for a controller cluster that lost a majority of its
 * members for good (raft-probe.md §7: raft_recover, and only as the documented procedure).
 *
 * Both calls work on a stopped member's data directory (the caller holds its lock), on a
 * private loop, and return when done; neither starts raft nor talks to any peer.
 *  - recover_log_info reads the log as a start would (closing a leftover open segment, as a
 *    start does) and reports its term and last index, so that the operator can pick the
 *    survivor with the highest term and the longest log;
 *  - recover_force_configuration appends a new configuration (all voters) as the last entry
 *    of that log (raft_recover) and moves the member to the term after the one it was in.
 *    Started again, it reads that configuration and, alone in it, leads (raft 0.15 makes a
 *    lone voter leader in the term it starts in: without the new term the member, a
 *    follower when the others were lost, would lead in the lost leader's term); with
 *    several members in it, the others must start from a copy of this data directory.
 * The members of the old configuration must never start again with their old data
 * directories: together they would still make a majority of it (README, "Losing a majority
 * of the controllers"). */
#ifndef YARD_RAFT_RECOVER_H
#define YARD_RAFT_RECOVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "raft/consensus.h"

struct recover_log_info {
	uint64_t term;                          /* the current term in the metadata */
	uint64_t voted_for;                     /* 0: none */
	uint64_t snapshot_index, snapshot_term; /* 0: no snapshot */
	uint64_t first_index;                   /* of the entries on disk after the snapshot */
	uint64_t n_entries;
	uint64_t last_index, last_term; /* of the log (the snapshot's when no entry follows it) */
};

/* 0 and *out filled; YARD_EIO naming the directory and raft's message when the log cannot
 * be read (a damaged closed segment, say). A directory without raft state reports zeros. */
int recover_log_info(const char *data_dir, uint64_t id, const char *raft_address,
                     struct recover_log_info *out, struct yard_err *err);

/* Appends a configuration of the given members, every one a voter, to data_dir's log, and
 * sets the member's term to term + 1 (term: recover_log_info's, read under the same lock).
 * YARD_EINVAL when the list is empty, repeats an id or leaves out id; YARD_EIO when the log
 * cannot be read or written. */
int recover_force_configuration(const char *data_dir, uint64_t id, const char *raft_address,
                                const struct consensus_member *members, int n_members,
                                uint64_t term, struct yard_err *err);

/* A new cluster's first member from a database image (GET /v1/debug/database): data_dir,
 * without raft state, is bootstrapped with the members given (all voters) and the image
 * installed as its raft snapshot at index 1, so that the member starts with that state and,
 * alone in the configuration, leads. Errors as recover_force_configuration's; the caller
 * checks the image (fsm_restore) first. */
int recover_install_image(const char *data_dir, uint64_t id, const char *raft_address,
                          const struct consensus_member *members, int n_members, const void *image,
                          size_t len, struct yard_err *err);

#endif
