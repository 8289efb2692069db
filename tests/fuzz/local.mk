# tests/fuzz/: one fuzz target per parser of untrusted input (tests/fuzz/fuzz.h). Built with
# replay.c, each is a test: it runs the inputs under tests/fuzz/corpus/TARGET (seeds and the
# crashes found so far). With `configure --enable-fuzzing` (CC=clang) they are libFuzzer
# binaries instead, built by `make fuzz` and run by scripts/fuzz, and no test.
FUZZ_TARGETS = tests/fuzz/fuzz_jobspec tests/fuzz/fuzz_codec tests/fuzz/fuzz_fsm \
	tests/fuzz/fuzz_ckpt tests/fuzz/fuzz_heartbeat tests/fuzz/fuzz_desired tests/fuzz/fuzz_report \
	tests/fuzz/fuzz_timeline
check_PROGRAMS += $(FUZZ_TARGETS)
if FUZZING
FUZZ_MAIN =
FUZZ_LINK = -fsanitize=fuzzer
fuzz: $(FUZZ_TARGETS)
else
FUZZ_MAIN = tests/fuzz/replay.c
FUZZ_LINK =
TESTS += $(FUZZ_TARGETS)
endif
.PHONY: fuzz
EXTRA_DIST += tests/fuzz/corpus
FUZZ_SOURCES = tests/fuzz/fuzz.h tests/fuzz/fuzz_common.c $(FUZZ_MAIN)
FUZZ_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
corpus_of = -DFUZZ_CORPUS='"$(abs_top_srcdir)/tests/fuzz/corpus/$(1)"'

tests_fuzz_fuzz_jobspec_SOURCES = tests/fuzz/fuzz_jobspec.c $(FUZZ_SOURCES)
tests_fuzz_fuzz_jobspec_CPPFLAGS = $(AM_CPPFLAGS) $(call corpus_of,jobspec)
tests_fuzz_fuzz_jobspec_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_jobspec_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LINK)
tests_fuzz_fuzz_jobspec_LDADD = $(JOBSPEC_LIBS)

tests_fuzz_fuzz_codec_SOURCES = tests/fuzz/fuzz_codec.c $(FUZZ_SOURCES)
tests_fuzz_fuzz_codec_CPPFLAGS = $(AM_CPPFLAGS) $(call corpus_of,codec)
tests_fuzz_fuzz_codec_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_codec_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LINK)
tests_fuzz_fuzz_codec_LDADD = $(FSM_LIBS)

tests_fuzz_fuzz_fsm_SOURCES = tests/fuzz/fuzz_fsm.c $(FUZZ_SOURCES)
tests_fuzz_fuzz_fsm_CPPFLAGS = $(AM_CPPFLAGS) $(call corpus_of,fsm)
tests_fuzz_fuzz_fsm_CFLAGS = $(FUZZ_CFLAGS) $(SQLITE_CFLAGS)
tests_fuzz_fuzz_fsm_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LINK)
tests_fuzz_fuzz_fsm_LDADD = $(FSM_LIBS)

tests_fuzz_fuzz_ckpt_SOURCES = tests/fuzz/fuzz_ckpt.c $(FUZZ_SOURCES)
tests_fuzz_fuzz_ckpt_CPPFLAGS = $(AM_CPPFLAGS) $(call corpus_of,ckpt)
tests_fuzz_fuzz_ckpt_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_ckpt_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LINK)
tests_fuzz_fuzz_ckpt_LDADD = $(TRAINER_LIBS)

tests_fuzz_fuzz_heartbeat_SOURCES = tests/fuzz/fuzz_heartbeat.c tests/unit/sched_world.c \
	tests/unit/sched_world.h $(FUZZ_SOURCES)
tests_fuzz_fuzz_heartbeat_CPPFLAGS = $(AM_CPPFLAGS) $(call corpus_of,heartbeat)
tests_fuzz_fuzz_heartbeat_CFLAGS = $(FUZZ_CFLAGS) $(UV_CFLAGS) $(SQLITE_CFLAGS)
tests_fuzz_fuzz_heartbeat_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LINK)
tests_fuzz_fuzz_heartbeat_LDADD = scheduler/libsched.a jobs/libjobspec.a $(FSM_LIBS) $(UV_LIBS) -lm

tests_fuzz_fuzz_desired_SOURCES = tests/fuzz/fuzz_desired.c $(FUZZ_SOURCES)
tests_fuzz_fuzz_desired_CPPFLAGS = $(AM_CPPFLAGS) $(call corpus_of,desired)
tests_fuzz_fuzz_desired_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_desired_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LINK)
tests_fuzz_fuzz_desired_LDADD = scheduler/libsched.a $(JOBSPEC_LIBS)

tests_fuzz_fuzz_report_SOURCES = tests/fuzz/fuzz_report.c tests/unit/sched_world.c \
	tests/unit/sched_world.h agent/metrics.c agent/ranklog.c agent/ranklog.h agent/ranks.c \
	agent/shim.c agent/ckpt.c agent/client.c dataplane/ckpt.c $(FUZZ_SOURCES)
tests_fuzz_fuzz_report_CPPFLAGS = $(AM_CPPFLAGS) $(call corpus_of,report)
tests_fuzz_fuzz_report_CFLAGS = $(FUZZ_CFLAGS) $(UV_CFLAGS) $(CURL_CFLAGS) $(SQLITE_CFLAGS)
tests_fuzz_fuzz_report_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LINK)
tests_fuzz_fuzz_report_LDADD = scheduler/libsched.a jobs/libjobspec.a $(FSM_LIBS) $(UV_LIBS) \
	$(CURL_LIBS) -lm

tests_fuzz_fuzz_timeline_SOURCES = tests/fuzz/fuzz_timeline.c $(FUZZ_SOURCES)
tests_fuzz_fuzz_timeline_CPPFLAGS = $(AM_CPPFLAGS) $(call corpus_of,timeline)
tests_fuzz_fuzz_timeline_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_timeline_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LINK)
tests_fuzz_fuzz_timeline_LDADD = $(JOBSPEC_LIBS)
