/* err.h: the project-wide error codes. Functions return 0 or a negative YARD_E* value;
 * a caller that can report more writes a message naming the object into a yard_err. */
#ifndef YARD_ERR_H
#define YARD_ERR_H

#include <stddef.h>

enum yard_errcode {
	YARD_OK = 0,
	YARD_EINVAL = -1,     /* bad argument or input */
	YARD_ENOMEM = -2,     /* allocation failed */
	YARD_EIO = -3,        /* I/O error (file, socket) */
	YARD_ETIMEDOUT = -4,  /* a deadline passed */
	YARD_ENOTFOUND = -5,  /* no such object */
	YARD_EEXIST = -6,     /* object already exists */
	YARD_ENOTLEADER = -7, /* this controller is not the raft leader */
	YARD_EUNKNOWN = -8,   /* outcome unknown (leadership lost mid-request) */
	YARD_ENOSPACE = -9,   /* disk or quota exhausted */
	YARD_EPEER = -10,     /* a remote peer failed or disconnected */
	YARD_EABORTED = -11,  /* operation aborted */
	YARD_EMISMATCH = -12, /* participants disagree (collective args, layouts) */
	YARD_EPERM = -13,     /* not allowed */
	YARD_EBUSY = -14,     /* resource in use (locked data dir, change in progress) */
	YARD_ECORRUPT = -15,  /* checksum or format check failed */
	YARD_EUNSUPPORTED = -16, /* not available on this build or machine */
	YARD_EINTERNAL = -17, /* a bug: an invariant did not hold */
};

/* Human name of an error code, e.g. "timed out". Never NULL. */
const char *yard_strerror(int code);

/* An error with a message that names what failed. */
struct yard_err {
	int code;
	char msg[512];
};

/* Sets err (may be NULL) and returns code, so callers can write
 * `return yard_err_set(err, YARD_EINVAL, "field %s: ...", name);` */
int yard_err_set(struct yard_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The candidate (NULL-terminated list) that word is a near miss of: the closest other than
 * word itself, one edit away for a word under 6 characters, two for a longer one (a typo,
 * not another word); NULL when none is. For "did you mean" in errors. */
const char *yard_near_miss(const char *word, const char *const *candidates);

#endif
