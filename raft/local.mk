# raft/: consensus (canonical raft 0.15 wrapped: raft/consensus.h), its TCP_NODELAY transport,
# data-dir guards, and the yardd main.
noinst_LIBRARIES += raft/libconsensus.a
raft_libconsensus_a_SOURCES = \
	raft/consensus.c raft/consensus.h \
	raft/transport.c raft/transport.h \
	raft/datadir.c raft/datadir.h \
	raft/fsm_ops.c raft/fsm_ops.h \
	raft/recover.c raft/recover.h \
	raft/snapbuf.c raft/snapbuf.h
raft_libconsensus_a_CFLAGS = $(AM_CFLAGS) $(RAFT_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)

CONSENSUS_LIBS = raft/libconsensus.a jobs/libjobsfsm.a jobs/libjobspec.a common/libcommon.a $(RAFT_LIBS) $(UV_LIBS)

check_PROGRAMS += tests/unit/test_consensus tests/unit/test_transport tests/unit/test_snapbuf \
	tests/unit/test_datadir
TESTS += tests/unit/test_consensus tests/unit/test_transport tests/unit/test_snapbuf \
	tests/unit/test_datadir
tests_unit_test_consensus_SOURCES = tests/unit/test_consensus.c
tests_unit_test_consensus_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(RAFT_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_consensus_LDADD = $(CONSENSUS_LIBS) $(FSM_LIBS) $(CMOCKA_LIBS)
tests_unit_test_snapbuf_SOURCES = tests/unit/test_snapbuf.c
tests_unit_test_snapbuf_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_snapbuf_LDADD = raft/libconsensus.a common/libcommon.a $(CMOCKA_LIBS)
tests_unit_test_datadir_SOURCES = tests/unit/test_datadir.c
tests_unit_test_datadir_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_datadir_LDADD = raft/libconsensus.a common/libcommon.a $(CMOCKA_LIBS)
tests_unit_test_transport_SOURCES = tests/unit/test_transport.c
tests_unit_test_transport_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(RAFT_CFLAGS) $(UV_CFLAGS)
tests_unit_test_transport_LDADD = $(CONSENSUS_LIBS) $(CMOCKA_LIBS)

bin_PROGRAMS += yardd
yardd_SOURCES = raft/yardd.c raft/dev.c raft/dev.h
yardd_CFLAGS = $(AM_CFLAGS) $(RAFT_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS) $(H2O_CFLAGS)
yardd_LDADD = web/libweb.a scheduler/libsched.a jobs/libjobspec.a $(CONSENSUS_LIBS) $(FSM_LIBS) $(H2O_LIBS) $(OPENSSL_LIBS) $(UV_LIBS)
if HAVE_TCMALLOC
# before the C library on the link line, so that its malloc and free are the process's
yardd_CFLAGS += $(TCMALLOC_CFLAGS)
yardd_LDADD += $(TCMALLOC_LIBS)
endif

# Controller integration tests: real yardd processes on 127.0.0.1 (tests/integration/lib.sh).
dist_check_SCRIPTS += tests/integration/test_api.sh tests/integration/test_cluster.sh \
	tests/integration/test_embargo.sh tests/integration/test_allocator.sh \
	tests/integration/test_recover.sh
TESTS += tests/integration/test_api.sh tests/integration/test_cluster.sh \
	tests/integration/test_embargo.sh tests/integration/test_allocator.sh \
	tests/integration/test_recover.sh
EXTRA_DIST += tests/integration/lib.sh
