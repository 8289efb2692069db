# agent/: yard-agent, the node daemon (register, heartbeat, run and watch ranks).
bin_PROGRAMS += yard-agent
yard_agent_SOURCES = agent/agent.h agent/main.c agent/client.c agent/ranks.c \
	agent/heartbeat.c agent/metrics.c agent/shim.c agent/perf.c \
	agent/ranklog.c agent/ranklog.h
yard_agent_CFLAGS = $(AM_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(CURL_CFLAGS)
yard_agent_LDADD = common/libcommon.a $(UV_LIBS) $(JANSSON_LIBS) $(CURL_LIBS)

# yard-report: a command job's way to report steps to its agent (agent/report.c).
bin_PROGRAMS += yard-report
yard_report_SOURCES = agent/report.c

check_PROGRAMS += tests/unit/test_ranklog
tests_unit_test_ranklog_SOURCES = tests/unit/test_ranklog.c agent/ranklog.c agent/ranklog.h
tests_unit_test_ranklog_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_ranklog_LDADD = common/libcommon.a $(CMOCKA_LIBS) $(JANSSON_LIBS)
TESTS += tests/unit/test_ranklog
