# agent/: yard-agent, the node daemon (register, heartbeat, run and watch ranks).
bin_PROGRAMS += yard-agent
yard_agent_SOURCES = agent/agent.h agent/main.c agent/client.c agent/ranks.c \
	agent/heartbeat.c agent/metrics.c agent/shim.c agent/perf.c agent/linkprobe.c \
	agent/ranklog.c agent/ranklog.h agent/ckpt.c agent/upgrade.c agent/guardian.c \
	agent/selftest.c agent/workerup.c agent/watch.c agent/gc.c scheduler/desired_whole.c \
	dataplane/ckpt.c
yard_agent_CFLAGS = $(AM_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(CURL_CFLAGS) $(SQLITE_CFLAGS)
# libyd for the self-test; jobs/libjobsfsm.a for sha256 and the checkpoint store's names;
# dataplane/ckpt.c to read a downloaded shard's layout
yard_agent_LDADD = $(YD_LIBS) jobs/libjobsfsm.a common/libcommon.a $(UV_LIBS) $(JANSSON_LIBS) \
	$(CURL_LIBS) $(SQLITE_LIBS)

# yard-report: a command job's way to report steps to its agent (agent/report.c).
bin_PROGRAMS += yard-report
yard_report_SOURCES = agent/report.c

# the agent's per-step metrics and window summaries, with a real rank table
check_PROGRAMS += tests/unit/test_agent_metrics
tests_unit_test_agent_metrics_SOURCES = tests/unit/test_agent_metrics.c agent/metrics.c \
	agent/ranklog.c agent/ranklog.h \
	agent/ranks.c agent/shim.c agent/ckpt.c agent/client.c dataplane/ckpt.c
tests_unit_test_agent_metrics_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) \
	$(CURL_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_agent_metrics_LDADD = jobs/libjobsfsm.a common/libcommon.a $(CMOCKA_LIBS) \
	$(UV_LIBS) $(JANSSON_LIBS) $(CURL_LIBS) $(SQLITE_LIBS)
TESTS += tests/unit/test_agent_metrics
check_PROGRAMS += tests/unit/test_ranklog
tests_unit_test_ranklog_SOURCES = tests/unit/test_ranklog.c agent/ranklog.c agent/ranklog.h \
	agent/shim.c
tests_unit_test_ranklog_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) \
	$(CURL_CFLAGS)
tests_unit_test_ranklog_LDADD = common/libcommon.a $(CMOCKA_LIBS) $(JANSSON_LIBS)
TESTS += tests/unit/test_ranklog
