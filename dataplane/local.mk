# dataplane/local.mk: the data plane library libyd.a (yd.h), its tests and yard-bench.
# The trainer's rules are in dataplane/trainer.mk.
lib_LIBRARIES += dataplane/libyd.a
include_HEADERS += dataplane/yd.h
dataplane_libyd_a_SOURCES = \
	dataplane/yd.h dataplane/yd_impl.h \
	dataplane/names.c \
	dataplane/reduce.c dataplane/reduce.h \
	dataplane/net.c dataplane/net_connect.c \
	dataplane/comm.c dataplane/comm_env.c \
	dataplane/p2p.c \
	dataplane/coll.c dataplane/coll_ring.c dataplane/coll_naive.c dataplane/coll_tree.c \
	dataplane/algo_select.c
dataplane_libyd_a_CFLAGS = $(AM_CFLAGS) -O2 -ftree-vectorize

# What a program linking the data plane needs (used by trainer.mk for yard-worker).
YD_LIBS = dataplane/libyd.a common/libcommon.a -lpthread -lm

YD_TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
YD_TEST_LIBS = $(YD_LIBS) $(CMOCKA_LIBS)

check_PROGRAMS += tests/unit/test_yd_coll
TESTS += tests/unit/test_yd_coll
tests_unit_test_yd_coll_SOURCES = tests/unit/test_yd_coll.c tests/unit/yd_harness.c \
	tests/unit/yd_harness.h tests/unit/yd_check.h
tests_unit_test_yd_coll_CFLAGS = $(YD_TEST_CFLAGS)
tests_unit_test_yd_coll_LDADD = $(YD_TEST_LIBS)

check_PROGRAMS += tests/unit/test_yd_reduce
TESTS += tests/unit/test_yd_reduce
tests_unit_test_yd_reduce_SOURCES = tests/unit/test_yd_reduce.c tests/unit/yd_check.h
tests_unit_test_yd_reduce_CFLAGS = $(YD_TEST_CFLAGS)
tests_unit_test_yd_reduce_LDADD = $(YD_TEST_LIBS)

check_PROGRAMS += tests/unit/test_yd_fault
TESTS += tests/unit/test_yd_fault
tests_unit_test_yd_fault_SOURCES = tests/unit/test_yd_fault.c tests/unit/yd_harness.c \
	tests/unit/yd_harness.h tests/unit/yd_check.h
tests_unit_test_yd_fault_CFLAGS = $(YD_TEST_CFLAGS)
tests_unit_test_yd_fault_LDADD = $(YD_TEST_LIBS)
