# dataplane/: libyd (communicators, transports, collectives), its tests and yard-bench.
# The trainer's rules live in dataplane/trainer.mk (another module owner).
lib_LIBRARIES += dataplane/libyd.a
include_HEADERS += dataplane/yd.h
dataplane_libyd_a_SOURCES = \
	dataplane/yd.h dataplane/dp.h \
	dataplane/comm.c dataplane/progress.c dataplane/coll.c dataplane/xfer.c \
	dataplane/transport_tcp.c dataplane/transport_shm.c dataplane/transport_rdma.c \
	dataplane/reduce.c dataplane/algo_select.c dataplane/calibrate.c dataplane/tune.c \
	dataplane/coll_ring.c dataplane/coll_rd.c dataplane/coll_hd.c dataplane/coll_tree.c \
	dataplane/coll_naive.c dataplane/coll_ps.c dataplane/coll_hier.c dataplane/coll_shared.c \
	dataplane/cuda.c dataplane/dp_cuda.h
dataplane_libyd_a_CFLAGS = $(AM_CFLAGS) $(IBVERBS_CFLAGS) $(CUDA_CFLAGS)
# What a program linking libyd.a needs after it.
YD_LIBS = dataplane/libyd.a common/libcommon.a $(IBVERBS_LIBS) $(YD_CUDA_LIBS) -lrt -lm -lpthread
YD_CUDA_LIBS =

# CUDA kernels (nvcc) join libyd whenever the toolkit exists; the GPU is chosen at run time.
EXTRA_DIST += dataplane/dp_cuda_kernels.cu
if HAVE_CUDA
dataplane_libyd_a_LIBADD = dataplane/dp_cuda_kernels.$(OBJEXT)
CLEANFILES += dataplane/dp_cuda_kernels.$(OBJEXT)
dataplane/dp_cuda_kernels.$(OBJEXT): dataplane/dp_cuda_kernels.cu dataplane/dp_cuda.h
	$(AM_V_GEN)$(NVCC) -O2 -std=c++17 -Xcompiler -fPIC,-Wall,-Wextra -I$(top_srcdir) \
		-I$(top_builddir) $(CUDA_CFLAGS) -c $(srcdir)/dataplane/dp_cuda_kernels.cu -o $@
YD_CUDA_LIBS += $(CUDA_LIBS) -lstdc++
# Both skip (exit 77) where no GPU exists.
check_PROGRAMS += tests/unit/test_cuda_kernels
TESTS += tests/unit/test_cuda_kernels
tests_unit_test_cuda_kernels_SOURCES = tests/unit/test_cuda_kernels.c
tests_unit_test_cuda_kernels_CFLAGS = $(DP_TEST_CFLAGS) $(CUDA_CFLAGS)
tests_unit_test_cuda_kernels_LDADD = $(DP_TEST_LIBS)
check_PROGRAMS += tests/integration/test_coll_cuda
TESTS += tests/integration/test_coll_cuda
tests_integration_test_coll_cuda_SOURCES = tests/integration/test_coll_cuda.c $(DP_HARNESS)
tests_integration_test_coll_cuda_CFLAGS = $(DP_TEST_CFLAGS) $(CUDA_CFLAGS)
tests_integration_test_coll_cuda_LDADD = $(DP_TEST_LIBS)
# The same test on an emulated CUDA runtime (host memory, one ordered worker thread per
# stream, delayed copies), so the staging path runs everywhere the toolkit's headers exist.
check_PROGRAMS += tests/integration/test_coll_cuda_emul
TESTS += tests/integration/test_coll_cuda_emul
tests_integration_test_coll_cuda_emul_SOURCES = tests/integration/test_coll_cuda.c \
	tests/integration/cuda_emul.c dataplane/cuda.c $(DP_HARNESS)
tests_integration_test_coll_cuda_emul_CFLAGS = $(DP_TEST_CFLAGS) $(CUDA_CFLAGS) \
	-DYD_CUDA_NO_NCCL -DYD_CUDA_EMULATED
tests_integration_test_coll_cuda_emul_LDADD = dataplane/libyd.a common/libcommon.a \
	$(IBVERBS_LIBS) $(CMOCKA_LIBS) -lrt -lm -lpthread
endif

# Tests: reductions (cmocka), then real multi-process runs on 127.0.0.1.
DP_TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
DP_TEST_LIBS = $(YD_LIBS) $(CMOCKA_LIBS)
DP_HARNESS = tests/integration/dp_harness.c tests/integration/dp_harness.h \
	tests/integration/dp_values.h

check_PROGRAMS += tests/integration/test_coll_matrix
TESTS += tests/integration/test_coll_matrix
tests_integration_test_coll_matrix_SOURCES = tests/integration/test_coll_matrix.c $(DP_HARNESS)
tests_integration_test_coll_matrix_CFLAGS = $(DP_TEST_CFLAGS)
tests_integration_test_coll_matrix_LDADD = $(DP_TEST_LIBS)

check_PROGRAMS += tests/integration/test_comm_fault
TESTS += tests/integration/test_comm_fault
tests_integration_test_comm_fault_SOURCES = tests/integration/test_comm_fault.c $(DP_HARNESS)
tests_integration_test_comm_fault_CFLAGS = $(DP_TEST_CFLAGS)
tests_integration_test_comm_fault_LDADD = $(DP_TEST_LIBS)

check_PROGRAMS += tests/integration/test_comm_calibrate
TESTS += tests/integration/test_comm_calibrate
tests_integration_test_comm_calibrate_SOURCES = tests/integration/test_comm_calibrate.c $(DP_HARNESS)
tests_integration_test_comm_calibrate_CFLAGS = $(DP_TEST_CFLAGS)
tests_integration_test_comm_calibrate_LDADD = $(DP_TEST_LIBS)
check_PROGRAMS += tests/integration/test_comm_tune
TESTS += tests/integration/test_comm_tune
tests_integration_test_comm_tune_SOURCES = tests/integration/test_comm_tune.c $(DP_HARNESS)
tests_integration_test_comm_tune_CFLAGS = $(DP_TEST_CFLAGS)
tests_integration_test_comm_tune_LDADD = $(DP_TEST_LIBS)
check_PROGRAMS += tests/integration/test_comm_stray
TESTS += tests/integration/test_comm_stray
tests_integration_test_comm_stray_SOURCES = tests/integration/test_comm_stray.c
tests_integration_test_comm_stray_CFLAGS = $(DP_TEST_CFLAGS)
tests_integration_test_comm_stray_LDADD = $(DP_TEST_LIBS)
check_PROGRAMS += tests/integration/test_comm_split
TESTS += tests/integration/test_comm_split
tests_integration_test_comm_split_SOURCES = tests/integration/test_comm_split.c $(DP_HARNESS)
tests_integration_test_comm_split_CFLAGS = $(DP_TEST_CFLAGS)
tests_integration_test_comm_split_LDADD = $(DP_TEST_LIBS)

# RDMA: the fallback checks run everywhere; the data path where a device exists (else 77).
check_PROGRAMS += tests/integration/test_coll_rdma
TESTS += tests/integration/test_coll_rdma
tests_integration_test_coll_rdma_SOURCES = tests/integration/test_coll_rdma.c $(DP_HARNESS)
tests_integration_test_coll_rdma_CFLAGS = $(DP_TEST_CFLAGS)
tests_integration_test_coll_rdma_LDADD = $(DP_TEST_LIBS)
if HAVE_IBVERBS
# The same test on an emulated verbs layer (tests/integration/verbs_emul.c: queue pairs as
# datagram sockets between the rank processes), so the RDMA data path runs here.
check_PROGRAMS += tests/integration/test_coll_rdma_emul
TESTS += tests/integration/test_coll_rdma_emul
tests_integration_test_coll_rdma_emul_SOURCES = tests/integration/test_coll_rdma.c \
	tests/integration/verbs_emul.c $(DP_HARNESS)
tests_integration_test_coll_rdma_emul_CFLAGS = $(DP_TEST_CFLAGS) $(IBVERBS_CFLAGS) \
	-DYD_VERBS_EMULATED
tests_integration_test_coll_rdma_emul_LDADD = dataplane/libyd.a common/libcommon.a \
	$(YD_CUDA_LIBS) $(CMOCKA_LIBS) -lrt -lm -lpthread
endif

check_PROGRAMS += tests/unit/test_coll_reduce
TESTS += tests/unit/test_coll_reduce
tests_unit_test_coll_reduce_SOURCES = tests/unit/test_coll_reduce.c
tests_unit_test_coll_reduce_CFLAGS = $(DP_TEST_CFLAGS)
tests_unit_test_coll_reduce_LDADD = $(DP_TEST_LIBS)

check_PROGRAMS += tests/unit/test_coll_args
TESTS += tests/unit/test_coll_args
tests_unit_test_coll_args_SOURCES = tests/unit/test_coll_args.c
tests_unit_test_coll_args_CFLAGS = $(DP_TEST_CFLAGS)
tests_unit_test_coll_args_LDADD = $(DP_TEST_LIBS)

check_PROGRAMS += tests/unit/test_doorbell
TESTS += tests/unit/test_doorbell
tests_unit_test_doorbell_SOURCES = tests/unit/test_doorbell.c
tests_unit_test_doorbell_CFLAGS = $(DP_TEST_CFLAGS)
tests_unit_test_doorbell_LDADD = $(DP_TEST_LIBS)

bin_PROGRAMS += yard-bench
yard_bench_SOURCES = dataplane/yard_bench.c
yard_bench_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS)
yard_bench_LDADD = $(YD_LIBS)

# a /dev/shm too small: a named error at creation, not a SIGBUS (needs unshare -m)
dist_check_SCRIPTS += tests/integration/dp_shm_space.sh tests/integration/dp_probe_tmp.sh
TESTS += tests/integration/dp_shm_space.sh tests/integration/dp_probe_tmp.sh
# yard-bench's emulated hosts (--hosts H or labels)
dist_check_SCRIPTS += tests/integration/dp_bench_cli.sh
TESTS += tests/integration/dp_bench_cli.sh
