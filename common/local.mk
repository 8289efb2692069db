# common/: errors, logging, time, JSON and string helpers shared by every module.
noinst_LIBRARIES += common/libcommon.a
common_libcommon_a_SOURCES = \
	common/common.h \
	common/err.c common/err.h \
	common/log.c common/log.h \
	common/clock.c common/clock.h \
	common/jsonx.c common/jsonx.h \
	common/stats.c common/stats.h \
	common/hist.c common/hist.h \
	common/base64.c common/base64.h \
	common/buildinfo.c common/buildinfo.h \
	common/grow.c common/grow.h \
	common/addr.c common/addr.h
common_libcommon_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
