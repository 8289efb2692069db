# jobs/: the replicated state machine (schema, command codec, apply, reads) and SHA-256.
# (jobs/local.mk holds the job-spec library; this fragment holds the FSM.)
noinst_LIBRARIES += jobs/libjobsfsm.a
jobs_libjobsfsm_a_SOURCES = \
	jobs/sha256.c jobs/sha256.h \
	jobs/codec.c jobs/codec.h \
	jobs/fsm.c jobs/fsm.h jobs/fsm_internal.h \
	jobs/fsm_query.c jobs/fsm_cluster.c \
	jobs/fsm_store.c jobs/fsm_advisory.c jobs/fsm_ckpt.c jobs/fsm_rollout.c
jobs_libjobsfsm_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)

FSM_LIBS = jobs/libjobsfsm.a jobs/libjobspec.a common/libcommon.a $(SQLITE_LIBS) $(JANSSON_LIBS)

check_PROGRAMS += tests/unit/test_sha256 tests/unit/test_codec tests/unit/test_fsm
TESTS += tests/unit/test_sha256 tests/unit/test_codec tests/unit/test_fsm
tests_unit_test_sha256_SOURCES = tests/unit/test_sha256.c
tests_unit_test_sha256_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_sha256_LDADD = jobs/libjobsfsm.a $(CMOCKA_LIBS)
tests_unit_test_codec_SOURCES = tests/unit/test_codec.c
tests_unit_test_codec_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_codec_LDADD = $(FSM_LIBS) $(CMOCKA_LIBS)
tests_unit_test_fsm_SOURCES = tests/unit/test_fsm.c tests/unit/sql_count.h
tests_unit_test_fsm_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_fsm_LDADD = $(FSM_LIBS) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_fsm_store
TESTS += tests/unit/test_fsm_store
tests_unit_test_fsm_store_SOURCES = tests/unit/test_fsm_store.c
tests_unit_test_fsm_store_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_fsm_store_LDADD = $(FSM_LIBS) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_fsm_ckpt
TESTS += tests/unit/test_fsm_ckpt
tests_unit_test_fsm_ckpt_SOURCES = tests/unit/test_fsm_ckpt.c tests/unit/sql_count.h
tests_unit_test_fsm_ckpt_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_fsm_ckpt_LDADD = $(FSM_LIBS) $(CMOCKA_LIBS)

check_PROGRAMS += tests/unit/test_rollout
TESTS += tests/unit/test_rollout
tests_unit_test_rollout_SOURCES = tests/unit/test_rollout.c
tests_unit_test_rollout_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_rollout_LDADD = $(FSM_LIBS) $(CMOCKA_LIBS)
