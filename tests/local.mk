# tests/: cmocka unit tests (tests/unit) and real-process integration tests (tests/integration).
check_PROGRAMS += tests/unit/test_common
tests_unit_test_common_SOURCES = tests/unit/test_common.c
tests_unit_test_common_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_test_common_LDADD = common/libcommon.a $(CMOCKA_LIBS) $(JANSSON_LIBS)
TESTS += tests/unit/test_common

# tests/tools: programs the benchmarks and integration tests drive (not installed).
noinst_PROGRAMS = tests/tools/yard-loadgen tests/tools/yard-simnodes tests/tools/yard-fetch \
	tests/tools/yard-copybench tests/tools/yard-applybench
tests_tools_yard_copybench_SOURCES = tests/tools/copybench.c
tests_tools_yard_applybench_SOURCES = tests/tools/applybench.c
tests_tools_yard_applybench_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
tests_tools_yard_applybench_LDADD = $(FSM_LIBS)
if HAVE_TCMALLOC
# the allocator yardd is linked with (raft/local.mk)
tests_tools_yard_applybench_CFLAGS += $(TCMALLOC_CFLAGS)
tests_tools_yard_applybench_LDADD += $(TCMALLOC_LIBS)
endif
tests_tools_yard_fetch_SOURCES = tests/tools/fetch.c agent/client.c
tests_tools_yard_fetch_CFLAGS = $(AM_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(CURL_CFLAGS)
tests_tools_yard_fetch_LDADD = jobs/libjobsfsm.a common/libcommon.a $(JANSSON_LIBS) $(CURL_LIBS) \
	$(UV_LIBS)
tests_tools_yard_loadgen_SOURCES = tests/tools/loadgen.c
tests_tools_yard_loadgen_CFLAGS = $(AM_CFLAGS) $(CURL_CFLAGS)
tests_tools_yard_loadgen_LDADD = $(CURL_LIBS)
tests_tools_yard_simnodes_SOURCES = tests/tools/simnodes.c tests/tools/hconn.c tests/tools/hconn.h \
	scheduler/desired_whole.c
tests_tools_yard_simnodes_CFLAGS = $(AM_CFLAGS) $(CURL_CFLAGS) $(JANSSON_CFLAGS)
tests_tools_yard_simnodes_LDADD = common/libcommon.a $(CURL_LIBS) $(JANSSON_LIBS)

# Scheduling and failover integration tests: yardd, yard-agent and command jobs on 127.0.0.1.
dist_check_SCRIPTS += tests/integration/test_jobs.sh tests/integration/test_failover.sh \
	tests/integration/test_ha.sh tests/integration/test_dev.sh \
	tests/integration/test_logs.sh tests/integration/test_drain.sh \
	tests/integration/test_stragglers.sh tests/integration/test_plan.sh \
	tests/integration/test_linkprobe.sh tests/integration/test_exit_report.sh \
	tests/integration/test_dup_name.sh tests/integration/test_watch.sh \
	tests/integration/test_agent_compat.sh tests/integration/test_bad_reports.sh \
	tests/integration/test_report_tool.sh \
	tests/integration/test_api_fuzz.sh tests/integration/test_probe_retry.sh \
	tests/integration/test_probe_refused.sh tests/integration/test_probe_resume.sh \
	tests/integration/test_job_gc.sh tests/integration/test_job_retention.sh \
	tests/integration/test_events_prune.sh \
	tests/integration/test_device_handover.sh tests/integration/test_disconnect.sh \
	tests/integration/test_reprobe.sh tests/integration/test_reprobe_refused.sh \
	tests/integration/test_perf_inflight.sh \
	tests/integration/test_heartbeat_burst.sh \
	tests/integration/test_heartbeat_pace.sh tests/integration/test_yardd_args.sh \
	tests/integration/test_topology.sh tests/integration/test_tls.sh
TESTS += tests/integration/test_jobs.sh tests/integration/test_failover.sh \
	tests/integration/test_ha.sh tests/integration/test_dev.sh \
	tests/integration/test_logs.sh tests/integration/test_drain.sh \
	tests/integration/test_stragglers.sh tests/integration/test_plan.sh \
	tests/integration/test_linkprobe.sh tests/integration/test_exit_report.sh \
	tests/integration/test_dup_name.sh tests/integration/test_watch.sh \
	tests/integration/test_agent_compat.sh tests/integration/test_bad_reports.sh \
	tests/integration/test_report_tool.sh \
	tests/integration/test_api_fuzz.sh tests/integration/test_probe_retry.sh \
	tests/integration/test_probe_refused.sh tests/integration/test_probe_resume.sh \
	tests/integration/test_job_gc.sh tests/integration/test_job_retention.sh \
	tests/integration/test_events_prune.sh \
	tests/integration/test_device_handover.sh tests/integration/test_disconnect.sh \
	tests/integration/test_reprobe.sh tests/integration/test_reprobe_refused.sh \
	tests/integration/test_perf_inflight.sh \
	tests/integration/test_heartbeat_burst.sh \
	tests/integration/test_heartbeat_pace.sh tests/integration/test_yardd_args.sh \
	tests/integration/test_topology.sh tests/integration/test_tls.sh
EXTRA_DIST += tests/integration/api_fuzz.py

# Rollouts of agent and worker builds over real agents and running jobs.
dist_check_SCRIPTS += tests/integration/test_rollout.sh tests/integration/test_rollout_control.sh \
	tests/integration/train_rollout.sh tests/integration/train_worker_rollout.sh \
	tests/integration/test_upgrade_grace.sh tests/integration/test_nudge.sh
TESTS += tests/integration/test_rollout.sh tests/integration/test_rollout_control.sh \
	tests/integration/train_rollout.sh tests/integration/train_worker_rollout.sh \
	tests/integration/test_upgrade_grace.sh tests/integration/test_nudge.sh

check_PROGRAMS += tests/unit/test_desired
TESTS += tests/unit/test_desired
tests_unit_test_desired_SOURCES = tests/unit/test_desired.c
tests_unit_test_desired_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_test_desired_LDADD = scheduler/libsched.a jobs/libjobspec.a $(FSM_LIBS) $(UV_LIBS) $(CMOCKA_LIBS)

check_PROGRAMS += tests/unit/test_leader
TESTS += tests/unit/test_leader
tests_unit_test_leader_SOURCES = tests/unit/test_leader.c tests/unit/sched_world.c \
	tests/unit/sched_world.h
tests_unit_test_leader_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_leader_LDADD = scheduler/libsched.a jobs/libjobspec.a $(FSM_LIBS) $(UV_LIBS) $(CMOCKA_LIBS)

check_PROGRAMS += tests/unit/test_gangs
TESTS += tests/unit/test_gangs
tests_unit_test_gangs_SOURCES = tests/unit/test_gangs.c tests/unit/sched_world.c \
	tests/unit/sched_world.h
tests_unit_test_gangs_CFLAGS = $(tests_unit_test_leader_CFLAGS)
tests_unit_test_gangs_LDADD = $(tests_unit_test_leader_LDADD)

# failure.allow_shrink_dp: a node dies under a dp 2 x tp 2 x pp 2 trainer job and it continues
# with dp 1 (needs yard-run and yard-worker; skipped without them)
dist_check_SCRIPTS += tests/integration/train_shrink.sh tests/integration/train_shrink_controller.sh \
	tests/integration/train_replan.sh
TESTS += tests/integration/train_shrink.sh tests/integration/train_shrink_controller.sh \
	tests/integration/train_replan.sh

# a drain (and any planned restart) asks the ranks for a checkpoint first: a trainer job that
# never checkpoints on its own resumes from the step it was drained at
dist_check_SCRIPTS += tests/integration/train_drain.sh tests/integration/train_drain_controller.sh
TESTS += tests/integration/train_drain.sh tests/integration/train_drain_controller.sh

# a parallel "auto" job planned on the one node there was grows when three more join
dist_check_SCRIPTS += tests/integration/train_grow.sh
TESTS += tests/integration/train_grow.sh

# yardd --preempt-after-s: a job of higher priority preempts a trainer job, which saves a
# checkpoint first and goes on from it once the other has ended
dist_check_SCRIPTS += tests/integration/train_preempt.sh
TESTS += tests/integration/train_preempt.sh
dist_check_SCRIPTS += tests/integration/train_ckpt_request.sh
TESTS += tests/integration/train_ckpt_request.sh
dist_check_SCRIPTS += tests/integration/train_worker_env.sh
TESTS += tests/integration/train_worker_env.sh

# yard-simnodes' keep-alive HTTP client (a benchmark tool's, tested as its numbers rest on it)
check_PROGRAMS += tests/unit/test_hconn
TESTS += tests/unit/test_hconn
tests_unit_test_hconn_SOURCES = tests/unit/test_hconn.c tests/tools/hconn.c tests/tools/hconn.h
tests_unit_test_hconn_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_hconn_LDADD = common/libcommon.a $(CMOCKA_LIBS)
