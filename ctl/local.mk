# ctl/: yardctl, the CLI (libcurl client with leader following and retries, tables, commands).
# libctl.a holds the parts the unit tests drive; yardctl.c is the command layer and main.
noinst_LIBRARIES += ctl/libctl.a
ctl_libctl_a_SOURCES = \
	ctl/args.c ctl/args.h \
	ctl/http.c ctl/http.h \
	ctl/output.c ctl/output.h
ctl_libctl_a_CFLAGS = $(AM_CFLAGS) $(CURL_CFLAGS) $(JANSSON_CFLAGS)
CTL_LIBS = ctl/libctl.a jobs/libjobspec.a common/libcommon.a $(CURL_LIBS) $(JANSSON_LIBS)

bin_PROGRAMS += yardctl
yardctl_SOURCES = ctl/yardctl.c
yardctl_CFLAGS = $(AM_CFLAGS) $(CURL_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
yardctl_LDADD = $(CTL_LIBS) $(FSM_LIBS)

check_PROGRAMS += tests/unit/test_yardctl
TESTS += tests/unit/test_yardctl
tests_unit_test_yardctl_SOURCES = tests/unit/test_yardctl.c
tests_unit_test_yardctl_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(CURL_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_test_yardctl_LDADD = $(CTL_LIBS) $(FSM_LIBS) $(CMOCKA_LIBS)

dist_check_SCRIPTS += tests/integration/yardctl_offline.sh
TESTS += tests/integration/yardctl_offline.sh
dist_check_SCRIPTS += tests/integration/yardctl_cluster.sh
TESTS += tests/integration/yardctl_cluster.sh
