/* err.c: names for the project-wide error codes and the yard_err message helper. */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>

const char *yard_strerror(int code)
{
	switch (code) {
	case YARD_OK: return "ok";
	case YARD_EINVAL: return "invalid argument";
	case YARD_ENOMEM: return "out of memory";
	case YARD_EIO: return "I/O error";
	case YARD_ETIMEDOUT: return "timed out";
	case YARD_ENOTFOUND: return "not found";
	case YARD_EEXIST: return "already exists";
	case YARD_ENOTLEADER: return "not the leader";
	case YARD_EUNKNOWN: return "outcome unknown";
	case YARD_ENOSPACE: return "no space left";
	case YARD_EPEER: return "peer failed";
	case YARD_EABORTED: return "aborted";
	case YARD_EMISMATCH: return "mismatch between participants";
	case YARD_EPERM: return "permission denied";
	case YARD_EBUSY: return "busy";
	case YARD_ECORRUPT: return "corrupt data";
	case YARD_EUNSUPPORTED: return "unsupported";
	case YARD_EINTERNAL: return "internal error";
	}
	return "unknown error";
}

int yard_err_set(struct yard_err *err, int code, const char *fmt, ...)
{
	if (err != NULL) {
		va_list ap;
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
	}
	return code;
}
