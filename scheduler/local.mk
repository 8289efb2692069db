# scheduler/: gang placement and the queue pass (pure), plus the leader's scheduling loop.
noinst_LIBRARIES += scheduler/libsched.a
scheduler_libsched_a_SOURCES = \
	scheduler/place.c scheduler/place.h \
	scheduler/queue.c scheduler/queue.h

check_PROGRAMS += tests/unit/test_place
tests_unit_test_place_SOURCES = tests/unit/test_place.c
tests_unit_test_place_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_place_LDADD = scheduler/libsched.a common/libcommon.a $(CMOCKA_LIBS) $(JANSSON_LIBS)
TESTS += tests/unit/test_place
