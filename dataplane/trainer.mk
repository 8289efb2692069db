# dataplane/trainer.mk: the built-in trainer (model, schedules, optimiser, data, checkpoints)
# as libtrainer.a, its unit tests, yard-worker and yard-run. The data plane's own rules are in
# dataplane/local.mk.
noinst_LIBRARIES += dataplane/libtrainer.a
dataplane_libtrainer_a_SOURCES = \
	dataplane/model.c dataplane/model.h dataplane/model_layers.c \
	dataplane/data.c dataplane/data.h \
	dataplane/schedule.c dataplane/schedule.h \
	dataplane/optim.c dataplane/optim.h \
	dataplane/ckpt.c dataplane/ckpt.h \
	dataplane/trainer.c dataplane/trainer.h dataplane/trainer_ckpt.c \
	dataplane/trainer_net.h dataplane/trainer_net_local.c dataplane/trainer_net_yd.c \
	dataplane/probe.c dataplane/probe.h
dataplane_libtrainer_a_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(JANSSON_CFLAGS)
TRAINER_LIBS = dataplane/libtrainer.a common/libcommon.a $(BLAS_LIBS) $(JANSSON_LIBS) -lm

TRAINER_TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(BLAS_CFLAGS) $(JANSSON_CFLAGS)
TRAINER_TEST_LIBS = $(TRAINER_LIBS) $(CMOCKA_LIBS)

check_PROGRAMS += tests/unit/test_model
TESTS += tests/unit/test_model
tests_unit_test_model_SOURCES = tests/unit/test_model.c
tests_unit_test_model_CFLAGS = $(TRAINER_TEST_CFLAGS)
tests_unit_test_model_LDADD = $(TRAINER_TEST_LIBS)
check_PROGRAMS += tests/unit/test_schedule
TESTS += tests/unit/test_schedule
tests_unit_test_schedule_SOURCES = tests/unit/test_schedule.c
tests_unit_test_schedule_CFLAGS = $(TRAINER_TEST_CFLAGS)
tests_unit_test_schedule_LDADD = $(TRAINER_TEST_LIBS)
check_PROGRAMS += tests/unit/test_ckpt
TESTS += tests/unit/test_ckpt
tests_unit_test_ckpt_SOURCES = tests/unit/test_ckpt.c
tests_unit_test_ckpt_CFLAGS = $(TRAINER_TEST_CFLAGS)
tests_unit_test_ckpt_LDADD = $(TRAINER_TEST_LIBS)
check_PROGRAMS += tests/unit/test_probe
TESTS += tests/unit/test_probe
tests_unit_test_probe_SOURCES = tests/unit/test_probe.c
tests_unit_test_probe_CFLAGS = $(TRAINER_TEST_CFLAGS)
tests_unit_test_probe_LDADD = $(TRAINER_LIBS) $(YD_LIBS) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_trainer
TESTS += tests/unit/test_trainer
tests_unit_test_trainer_SOURCES = tests/unit/test_trainer.c
tests_unit_test_trainer_CFLAGS = $(TRAINER_TEST_CFLAGS)
tests_unit_test_trainer_LDADD = jobs/libjobspec.a $(TRAINER_TEST_LIBS)

# trainer-bench: pipeline bubble and activation memory measurement for scripts/bench/training
# (built by `make check`, never run as a test: timings are not asserted).
check_PROGRAMS += dataplane/trainer-bench
dataplane_trainer_bench_SOURCES = dataplane/trainer_bench.c
dataplane_trainer_bench_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(JANSSON_CFLAGS)
dataplane_trainer_bench_LDADD = $(TRAINER_LIBS)

# CUDA layers: compiled whenever the toolkit exists; tested against the CPU layers where a GPU
# exists (the test skips otherwise).
EXTRA_DIST += dataplane/model_cuda.cu
if HAVE_CUDA
noinst_LIBRARIES += dataplane/libtrainer_cuda.a
dataplane_libtrainer_cuda_a_SOURCES = dataplane/model_cuda.h
dataplane_libtrainer_cuda_a_LIBADD = dataplane/model_cuda.$(OBJEXT)
CLEANFILES += dataplane/model_cuda.$(OBJEXT)
dataplane/model_cuda.$(OBJEXT): dataplane/model_cuda.cu dataplane/model_cuda.h
	$(AM_V_GEN)$(NVCC) -O2 -std=c++17 -Xcompiler -fPIC,-Wall -I$(top_srcdir) -I$(top_builddir) \
		$(CUDA_CFLAGS) -c $(srcdir)/dataplane/model_cuda.cu -o $@
check_PROGRAMS += tests/unit/test_model_cuda
TESTS += tests/unit/test_model_cuda
tests_unit_test_model_cuda_SOURCES = tests/unit/test_model_cuda.c
tests_unit_test_model_cuda_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(CUDA_CFLAGS)
tests_unit_test_model_cuda_LDADD = dataplane/libtrainer_cuda.a $(TRAINER_LIBS) $(CUDA_LIBS) \
	-lstdc++
endif

# Real-process tests through yard-run (they skip while yard-run is not built).
dist_check_SCRIPTS += tests/integration/train_layouts.sh tests/integration/train_ckpt.sh
EXTRA_DIST += tests/integration/train_lib.sh
TESTS += tests/integration/train_layouts.sh tests/integration/train_ckpt.sh

# yard-worker: one rank of the built-in trainer, on the data plane (libyd).
bin_PROGRAMS += yard-worker
yard_worker_SOURCES = dataplane/worker.c
yard_worker_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(JANSSON_CFLAGS)
yard_worker_LDADD = dataplane/libtrainer.a jobs/libjobspec.a $(YD_LIBS) $(TRAINER_LIBS)

# yard-run (needs only the job-spec parser).
bin_PROGRAMS += yard-run
yard_run_SOURCES = dataplane/yard_run.c
yard_run_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
yard_run_LDADD = jobs/libjobspec.a common/libcommon.a $(JANSSON_LIBS)
dist_check_SCRIPTS += tests/integration/train_yardrun.sh
TESTS += tests/integration/train_yardrun.sh
# A rank runs without OpenBLAS's thread pool (yard-worker sets OPENBLAS_NUM_THREADS=1).
dist_check_SCRIPTS += tests/integration/train_blas_threads.sh
TESTS += tests/integration/train_blas_threads.sh
# The built-in trainer under yardd + yard-agent: a node death does not change the result.
dist_check_SCRIPTS += tests/integration/train_failover.sh
TESTS += tests/integration/train_failover.sh
# ... and with the controller checkpoint store: shards travel through the leader, no shared dir.
dist_check_SCRIPTS += tests/integration/train_ckpt_controller.sh tests/integration/train_ckpt_final.sh \
	tests/integration/train_ckpt_rejoin.sh
TESTS += tests/integration/train_ckpt_controller.sh tests/integration/train_ckpt_final.sh \
	tests/integration/train_ckpt_rejoin.sh
# ... and a controller failover while shards are uploaded.
dist_check_SCRIPTS += tests/integration/train_ckpt_ha.sh
TESTS += tests/integration/train_ckpt_ha.sh
