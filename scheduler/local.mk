# scheduler/: gang placement and the queue pass (pure), plus the leader's scheduling loop.
noinst_LIBRARIES += scheduler/libsched.a
scheduler_libsched_a_SOURCES = \
	scheduler/place.c scheduler/place.h \
	scheduler/queue.c scheduler/queue.h \
	scheduler/eta.c scheduler/eta.h \
	scheduler/desired.c scheduler/desired_whole.c scheduler/desired.h \
	scheduler/idindex.c scheduler/idindex.h \
	scheduler/straggler.c scheduler/straggler.h \
	scheduler/autoplan.c scheduler/autoplan.h \
	scheduler/planner.c scheduler/planner.h \
	scheduler/history.c scheduler/history.h \
	scheduler/logstore.c scheduler/logstore.h \
	scheduler/leader.c scheduler/leader.h \
	scheduler/rollout.c scheduler/rollout.h
scheduler_libsched_a_CFLAGS = $(AM_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)

check_PROGRAMS += tests/unit/test_place
tests_unit_test_place_SOURCES = tests/unit/test_place.c
tests_unit_test_place_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_place_LDADD = scheduler/libsched.a common/libcommon.a $(CMOCKA_LIBS) $(JANSSON_LIBS)
TESTS += tests/unit/test_place

check_PROGRAMS += tests/unit/test_eta
tests_unit_test_eta_SOURCES = tests/unit/test_eta.c
tests_unit_test_eta_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_eta_LDADD = scheduler/libsched.a common/libcommon.a $(CMOCKA_LIBS) $(JANSSON_LIBS)
TESTS += tests/unit/test_eta

check_PROGRAMS += tests/unit/test_idindex
tests_unit_test_idindex_SOURCES = tests/unit/test_idindex.c
tests_unit_test_idindex_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_idindex_LDADD = scheduler/libsched.a $(CMOCKA_LIBS)
TESTS += tests/unit/test_idindex

# the parallelism planner (pure cost model)
noinst_LIBRARIES += scheduler/libplanner.a
scheduler_libplanner_a_SOURCES = scheduler/planner.c scheduler/planner.h
check_PROGRAMS += tests/unit/test_planner
tests_unit_test_planner_SOURCES = tests/unit/test_planner.c
tests_unit_test_planner_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_planner_LDADD = scheduler/libplanner.a common/libcommon.a $(CMOCKA_LIBS) -lm
TESTS += tests/unit/test_planner

check_PROGRAMS += tests/unit/test_straggler
tests_unit_test_straggler_SOURCES = tests/unit/test_straggler.c
tests_unit_test_straggler_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_straggler_LDADD = scheduler/libsched.a common/libcommon.a $(CMOCKA_LIBS) $(JANSSON_LIBS) -lm
TESTS += tests/unit/test_straggler
check_PROGRAMS += tests/unit/test_history
tests_unit_test_history_SOURCES = tests/unit/test_history.c
tests_unit_test_history_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_test_history_LDADD = scheduler/libsched.a $(CMOCKA_LIBS) $(JANSSON_LIBS)
TESTS += tests/unit/test_history
check_PROGRAMS += tests/unit/test_logstore
tests_unit_test_logstore_SOURCES = tests/unit/test_logstore.c
tests_unit_test_logstore_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_test_logstore_LDADD = scheduler/libsched.a common/libcommon.a $(CMOCKA_LIBS) $(JANSSON_LIBS)
TESTS += tests/unit/test_logstore
