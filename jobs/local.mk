# jobs/local.mk: the job-spec library (jobs/spec.h: parse, validate, normalize; jobs/timeline.h:
# a job's life from its events) and its tests.
# (jobs/fsm.mk holds the replicated state machine.)
noinst_LIBRARIES += jobs/libjobspec.a
jobs_libjobspec_a_SOURCES = jobs/spec.c jobs/spec.h jobs/timeline.c jobs/timeline.h
jobs_libjobspec_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)

JOBSPEC_LIBS = jobs/libjobspec.a common/libcommon.a $(JANSSON_LIBS)

check_PROGRAMS += tests/unit/test_jobspec
TESTS += tests/unit/test_jobspec
tests_unit_test_jobspec_SOURCES = tests/unit/test_jobspec.c
tests_unit_test_jobspec_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_test_jobspec_LDADD = $(JOBSPEC_LIBS) $(CMOCKA_LIBS)

check_PROGRAMS += tests/unit/test_timeline
TESTS += tests/unit/test_timeline
tests_unit_test_timeline_SOURCES = tests/unit/test_timeline.c
tests_unit_test_timeline_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_test_timeline_LDADD = $(JOBSPEC_LIBS) $(CMOCKA_LIBS)
