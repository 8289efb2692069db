# tests/: cmocka unit tests (tests/unit) and real-process integration tests (tests/integration).
check_PROGRAMS += tests/unit/test_common
tests_unit_test_common_SOURCES = tests/unit/test_common.c
tests_unit_test_common_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_test_common_LDADD = common/libcommon.a $(CMOCKA_LIBS) $(JANSSON_LIBS)
TESTS += tests/unit/test_common
