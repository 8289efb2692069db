/* test_planner.c: the parallelism planner: trainer rules, memory limits, the bubble formula,
 * and that the ranking follows the measured rates (compute-bound → use every device;
 * slow links → fewer devices). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/planner.h"

static const struct plan_model model = {.d_in = 32,
                                        .d_model = 64,
                                        .d_ff = 256,
                                        .layers = 8,
                                        .classes = 10,
                                        .batch_size = 64,
                                        .adamw = 1};

static struct plan_cluster cluster(void)
{
	struct plan_cluster k = {.devices = 8,
	                         .devices_per_node = 4,
	                         .device_memory_bytes = 1e9,
	                         .flops_per_s = 20e9,
	                         .intra_bw_bytes_per_s = 3e9,
	                         .inter_bw_bytes_per_s = 1e9,
	                         .latency_s = 10e-6};
	return k;
}

static void test_rules_name_what_breaks(void **state)
{
	struct plan_cluster k = cluster();
	char why[160];
	struct plan_candidate c = {
	    .dp = 1, .tp = 3, .pp = 1, .v = 1, .m = 1, .schedule = PLAN_1F1B};
	assert_int_not_equal(plan_layout_valid(&model, &k, &c, why, sizeof why), 0);
	assert_non_null(strstr(why, "tp 3 does not divide d_ff 256"));
	c = (struct plan_candidate){
	    .dp = 1, .tp = 1, .pp = 4, .v = 2, .m = 6, .schedule = PLAN_INTERLEAVED};
	assert_int_not_equal(plan_layout_valid(&model, &k, &c, why, sizeof why), 0);
	assert_non_null(strstr(why, "interleaved"));
	c.m = 8;
	assert_int_equal(plan_layout_valid(&model, &k, &c, why, sizeof why), 0);
	c = (struct plan_candidate){
	    .dp = 3, .tp = 1, .pp = 1, .v = 1, .m = 1, .schedule = PLAN_1F1B};
	assert_int_not_equal(plan_layout_valid(&model, &k, &c, why, sizeof why), 0);
	assert_non_null(strstr(why, "batch 64 is not divisible"));
	c = (struct plan_candidate){
	    .dp = 1, .tp = 8, .pp = 1, .v = 1, .m = 1, .schedule = PLAN_1F1B};
	assert_int_not_equal(plan_layout_valid(&model, &k, &c, why, sizeof why), 0);
	assert_non_null(strstr(why, "exceeds the 4 devices of a node"));
}

static void test_bubble_follows_theory(void **state)
{
	struct plan_cluster k = cluster();
	struct plan_candidate c = {
	    .dp = 1, .tp = 1, .pp = 4, .v = 1, .m = 8, .schedule = PLAN_1F1B};
	plan_predict(&model, &k, &c);
	assert_float_equal(c.bubble_fraction, 3.0 / 11.0, 1e-12);
	c.schedule = PLAN_INTERLEAVED;
	c.v = 2;
	plan_predict(&model, &k, &c);
	assert_float_equal(c.bubble_fraction, 3.0 / 19.0, 1e-12);
}

static void test_1f1b_holds_less_activation_memory_than_gpipe(void **state)
{
	struct plan_cluster k = cluster();
	struct plan_candidate g = {
	    .dp = 1, .tp = 1, .pp = 4, .v = 1, .m = 16, .schedule = PLAN_GPIPE};
	struct plan_candidate f = g;
	f.schedule = PLAN_1F1B;
	plan_predict(&model, &k, &g);
	plan_predict(&model, &k, &f);
	assert_true(f.memory_bytes < g.memory_bytes);
	/* same step-time model for both: the bubble is the same */
	assert_float_equal(f.step_s, g.step_s, 1e-12);
}

static void test_memory_limit_rejects_and_explains(void **state)
{
	struct plan_cluster k = cluster();
	struct plan_result r;
	struct yard_err err = {0};
	k.device_memory_bytes = 1000; /* nothing fits */
	assert_int_equal(plan_run(&model, &k, &r, &err), YARD_ENOSPACE);
	assert_non_null(strstr(err.msg, "rejected by device memory"));
	k = cluster();
	assert_int_equal(plan_run(&model, &k, &r, &err), 0);
	for (int i = 0; i < r.count; i++)
		assert_true(r.candidates[i].memory_bytes <= k.device_memory_bytes);
	for (int i = 1; i < r.count; i++)
		assert_true(r.candidates[i - 1].step_s <= r.candidates[i].step_s);
	plan_result_free(&r);
}

static void test_compute_bound_uses_every_device(void **state)
{
	struct plan_cluster k = cluster();
	struct plan_result r;
	struct yard_err err = {0};
	struct plan_model big = model;
	big.d_model = 1024;
	big.d_ff = 4096;
	big.batch_size = 512;
	k.flops_per_s = 1e9; /* slow devices, fast links */
	k.intra_bw_bytes_per_s = k.inter_bw_bytes_per_s = 100e9;
	assert_int_equal(plan_run(&big, &k, &r, &err), 0);
	assert_int_equal(r.candidates[0].dp * r.candidates[0].tp * r.candidates[0].pp, 8);
	plan_result_free(&r);
}

static void test_slow_links_keep_the_job_small(void **state)
{
	struct plan_cluster k = cluster();
	struct plan_result r;
	struct yard_err err = {0};
	char why[512];
	k.flops_per_s = 1e15; /* compute is free, links crawl */
	k.intra_bw_bytes_per_s = k.inter_bw_bytes_per_s = 1e3;
	k.latency_s = 0.1;
	assert_int_equal(plan_run(&model, &k, &r, &err), 0);
	assert_int_equal(r.candidates[0].dp * r.candidates[0].tp * r.candidates[0].pp, 1);
	plan_explain(&r, why, sizeof why);
	assert_non_null(strstr(why, "dp1×tp1×pp1"));
	plan_result_free(&r);
}

static void test_ranking_is_deterministic(void **state)
{
	struct plan_cluster k = cluster();
	struct plan_result a, b;
	struct yard_err err = {0};
	assert_int_equal(plan_run(&model, &k, &a, &err), 0);
	assert_int_equal(plan_run(&model, &k, &b, &err), 0);
	assert_int_equal(a.count, b.count);
	assert_memory_equal(a.candidates, b.candidates, sizeof *a.candidates * (size_t)a.count);
	plan_result_free(&a);
	plan_result_free(&b);
}

static void test_unmeasured_cluster_is_refused(void **state)
{
	struct plan_cluster k = cluster();
	struct plan_result r;
	struct yard_err err = {0};
	k.flops_per_s = 0;
	assert_int_equal(plan_run(&model, &k, &r, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "measured"));
}

/* The measured GEMM curve is interpolated in log(size) and clamped at its ends. */
static void test_rate_curve_interpolates(void **state)
{
	struct plan_cluster k = cluster();
	k.rate_points = 3;
	k.rate_call_flops[0] = 1e3, k.rate_flops_per_s[0] = 1e9;
	k.rate_call_flops[1] = 1e5, k.rate_flops_per_s[1] = 3e9;
	k.rate_call_flops[2] = 1e7, k.rate_flops_per_s[2] = 5e9;
	assert_float_equal(plan_device_rate(&k, 10), 1e9, 1);
	assert_float_equal(plan_device_rate(&k, 1e4), 2e9, 1);
	assert_float_equal(plan_device_rate(&k, 1e6), 4e9, 1);
	assert_float_equal(plan_device_rate(&k, 1e9), 5e9, 1);
	k.rate_points = 0;
	assert_float_equal(plan_device_rate(&k, 1e4), k.flops_per_s, 1);
}

/* Ranks that outnumber what a node computes at once share it; otherwise each has a device. */
static void test_oversubscribed_node_shares_compute(void **state)
{
	struct plan_cluster k = cluster(); /* 4 per node */
	k.parallel_efficiency = 0.5;       /* the node computes 2 devices' worth at once */
	assert_float_equal(plan_device_share(&k, 1), 1, 1e-12);
	assert_float_equal(plan_device_share(&k, 2), 1, 1e-12);
	assert_float_equal(plan_device_share(&k, 4), 0.5, 1e-12);
	struct plan_candidate one = {
	    .dp = 1, .tp = 1, .pp = 1, .v = 1, .m = 1, .schedule = PLAN_1F1B};
	struct plan_candidate four = one;
	four.dp = 4;
	plan_predict(&model, &k, &one);
	plan_predict(&model, &k, &four);
	/* dp4: 4 ranks each with a quarter of the compute and a whole optimiser step, on 2
	 * devices' worth: the step is the node's work over its capacity (the critical path,
	 * a quarter of the compute plus the allreduces, is shorter) */
	assert_float_equal(four.step_s, (one.compute_s / 4 + one.optim_s) * 4 / 2,
	                   one.step_s * 1e-9);
	assert_float_equal(four.compute_s + four.optim_s + four.dp_exposed_s + four.loss_comm_s,
	                   four.step_s, one.step_s * 1e-9);
	/* a pipeline over the 4 devices with one micro-batch: only one stage computes at a
	 * time, so the critical path (each stage in turn) is the step, not the node's bound */
	struct plan_candidate pp4 = one;
	pp4.pp = 4;
	plan_predict(&model, &k, &pp4);
	assert_float_equal(pp4.bubble_fraction, 0.75, 1e-12);
	assert_true(pp4.step_s > (pp4.compute_s + pp4.optim_s) * 4 / 2);
	assert_float_equal(pp4.step_s,
	                   (pp4.compute_s + pp4.pp_comm_s) / 0.25 + pp4.loss_comm_s + pp4.optim_s,
	                   one.step_s * 1e-9);
	/* but every rank runs its optimiser step right after the loss allreduce, the four
	 * stages at once: on 2 devices' worth each takes twice what it takes alone */
	k.adamw_s_per_param = 1e-8;
	plan_predict(&model, &k, &pp4);
	struct plan_cluster roomy = k;
	roomy.parallel_efficiency = 0;
	struct plan_candidate pp4_roomy = pp4;
	plan_predict(&model, &roomy, &pp4_roomy);
	assert_true(pp4_roomy.optim_s > 0);
	assert_float_equal(pp4.optim_s, 2 * pp4_roomy.optim_s, pp4.optim_s * 1e-12);
	assert_float_equal(pp4.compute_s, pp4_roomy.compute_s, pp4.compute_s * 1e-12);
	/* the gradient buckets overlap the last backward only where a core is spare: on an
	 * accelerator's host always (uncrowded), on CPU devices when a core's worth is left
	 * beyond the ranks */
	struct plan_candidate dp2 = one;
	dp2.dp = 2;
	k.parallel_efficiency = 0.6; /* 2.4 devices' worth: 2 ranks leave 0.4 */
	plan_predict(&model, &k, &dp2);
	assert_true(dp2.dp_comm_s > 0);
	assert_float_equal(dp2.dp_exposed_s, 0, 1e-15); /* accelerators: hidden */
	k.host_compute = 1;
	plan_predict(&model, &k, &dp2);
	assert_float_equal(dp2.dp_exposed_s, dp2.dp_comm_s, 1e-15); /* no spare core */
	k.parallel_efficiency = 0.8; /* 3.2 devices' worth: a core to spare */
	plan_predict(&model, &k, &dp2);
	assert_float_equal(dp2.dp_exposed_s, 0, 1e-15);
	k.host_compute = 0;
	k.parallel_efficiency = 0.5;
	/* tensor-parallel allreduces on the crowded node pay the measured busy latency */
	struct plan_candidate tp2 = one, tp4 = one;
	tp2.tp = 2;
	tp4.tp = 4;
	k.busy_latency_s = 1e-3;
	plan_predict(&model, &k, &tp2);
	plan_predict(&model, &k, &tp4);
	double per_step_tp2 = tp2.tp_comm_s / (2.0 * 8 * 2); /* 8 blocks, 2 ring steps */
	double per_step_tp4 = tp4.tp_comm_s / (2.0 * 8 * 6); /* 6 ring steps */
	assert_true(per_step_tp2 < 1e-4);                    /* 2 ranks fit: two-device latency */
	assert_true(per_step_tp4 >= 1e-3);                   /* 4 ranks crowd 2 devices' worth */
	k.parallel_efficiency = 0;
	assert_float_equal(plan_device_share(&k, 4), 1, 1e-12);
	/* other programs leave a lone process 40% of a core: every compute cost grows */
	k.availability = 0.4;
	struct plan_candidate shared = one;
	plan_predict(&model, &k, &shared);
	assert_float_equal(shared.compute_s, one.compute_s / 0.4, one.compute_s * 1e-9);
}

/* With a measured block cost, every micro-batch pays the per-call cost (many tiny
 * micro-batches stop being free) and the optimiser step is not shared by data parallelism
 * but is split by tensor and pipeline parallelism. */
static void test_measured_block_and_optimiser_costs(void **state)
{
	struct plan_cluster k = cluster();
	k.block_mac_s = 1e-10;
	k.block_hidden_s = 1e-9;
	k.block_model_s = 1e-9;
	k.block_call_s = 1e-4;
	k.adamw_s_per_param = 1e-8;
	struct plan_candidate c = {
	    .dp = 1, .tp = 1, .pp = 2, .v = 1, .m = 1, .schedule = PLAN_1F1B};
	plan_predict(&model, &k, &c);
	double m1 = c.compute_s;
	c.m = 16;
	plan_predict(&model, &k, &c);
	/* 4 blocks per stage: 15 more micro-batches cost 60 more calls */
	assert_float_equal(c.compute_s - m1, 60 * k.block_call_s, 1e-9);
	struct plan_candidate d1 = {
	    .dp = 1, .tp = 1, .pp = 1, .v = 1, .m = 1, .schedule = PLAN_1F1B};
	struct plan_candidate d2 = d1, t2 = d1;
	d2.dp = 2;
	t2.tp = 2;
	plan_predict(&model, &k, &d1);
	plan_predict(&model, &k, &d2);
	plan_predict(&model, &k, &t2);
	assert_true(d1.optim_s > 0);
	assert_float_equal(d2.optim_s, d1.optim_s, 1e-15);
	assert_true(t2.optim_s < d1.optim_s * 0.7);
	assert_float_equal(d1.step_s, d1.compute_s + d1.optim_s, 1e-12);
}

/* The measured exchange (sync) costs: the wall time once per allreduce (its own figure when
 * measured) and per pipeline message within a node on the critical path; the CPU time per
 * exchange in the node's bound (for the ranks on the node: 2 → the two-rank figure, every
 * device → the busy one, linear between); and the step's loss allreduce over every rank.
 * Exact figures from deterministic inputs. */
static void test_sync_cost_per_exchange(void **state)
{
	struct plan_cluster k = cluster(); /* 4 per node, 10 µs latency, 3 GB/s */
	k.latency_s = 0;                   /* only the sync and bandwidth terms remain */
	k.sync_s = 20e-6;
	k.sync_cpu_s = 4e-6;
	k.busy_sync_cpu_s = 12e-6;
	assert_float_equal(plan_sync_cpu(&k, 1, 0), 4e-6, 1e-15);
	assert_float_equal(plan_sync_cpu(&k, 2, 0), 4e-6, 1e-15);
	assert_float_equal(plan_sync_cpu(&k, 3, 0), 8e-6, 1e-15);
	assert_float_equal(plan_sync_cpu(&k, 4, 0), 12e-6, 1e-15);
	assert_float_equal(plan_sync_cpu(&k, 3, 1), 8e-6, 1e-15); /* no allreduce figure */
	struct plan_candidate one = {
	    .dp = 1, .tp = 1, .pp = 1, .v = 1, .m = 1, .schedule = PLAN_1F1B};
	plan_predict(&model, &k, &one);
	assert_float_equal(one.loss_comm_s, 0, 1e-15); /* one rank: nothing to reduce */
	double act_bytes = 64.0 * 64 * 4;              /* 64 rows × d_model 64, f32 */
	/* tp2: 8 blocks × 2 allreduces, each a sync plus (2·1/2) · bytes / bw */
	struct plan_candidate tp2 = one;
	tp2.tp = 2;
	plan_predict(&model, &k, &tp2);
	assert_float_equal(tp2.tp_comm_s, 16 * (20e-6 + act_bytes / 3e9), 1e-12);
	/* the loss allreduce over 2 ranks: a sync, 32 bytes */
	assert_float_equal(tp2.loss_comm_s, 20e-6 + 32.0 / 3e9, 1e-12);
	/* pp2 with m 4: 2 · 4 messages of 16 rows, each a sync */
	struct plan_candidate pp2 = one;
	pp2.pp = 2;
	pp2.m = 4;
	plan_predict(&model, &k, &pp2);
	assert_float_equal(pp2.pp_comm_s, 8 * (20e-6 + 16.0 * 64 * 4 / 3e9), 1e-12);
	assert_float_equal(pp2.step_s,
	                   (pp2.compute_s + pp2.pp_comm_s) / (1 - pp2.bubble_fraction) +
	                       pp2.dp_exposed_s + pp2.loss_comm_s + pp2.optim_s,
	                   1e-12);
	/* a measured allreduce figure replaces the exchange's for allreduces only */
	k.allreduce_sync_s = 5e-6;
	k.allreduce_sync_cpu_s = 1e-6;
	k.busy_allreduce_sync_cpu_s = 3e-6;
	assert_float_equal(plan_sync_cpu(&k, 3, 1), 2e-6, 1e-15);
	plan_predict(&model, &k, &tp2);
	assert_float_equal(tp2.tp_comm_s, 16 * (5e-6 + act_bytes / 3e9), 1e-12);
	assert_float_equal(tp2.loss_comm_s, 5e-6 + 32.0 / 3e9, 1e-12);
	plan_predict(&model, &k, &pp2);
	assert_float_equal(pp2.pp_comm_s, 8 * (20e-6 + 16.0 * 64 * 4 / 3e9), 1e-12);
	/* a measured 0 (the allreduce added nothing measurable) is a figure: the exchange's 20 µs
	 * does not stand in for it, on the critical path or in the node's CPU */
	k.allreduce_sync_s = 0;
	k.allreduce_sync_cpu_s = 0;
	k.allreduce_measured = 1;
	assert_float_equal(plan_sync_cpu(&k, 2, 1), 0, 1e-15);
	assert_float_equal(plan_sync_cpu(&k, 3, 1), 1.5e-6, 1e-15);
	plan_predict(&model, &k, &tp2);
	assert_float_equal(tp2.tp_comm_s, 16 * (act_bytes / 3e9), 1e-12);
	assert_float_equal(tp2.loss_comm_s, 32.0 / 3e9, 1e-12);
	k.allreduce_measured = 0; /* not measured: the exchange's figures again */
	plan_predict(&model, &k, &tp2);
	assert_float_equal(tp2.tp_comm_s, 16 * (20e-6 + act_bytes / 3e9), 1e-12);
	k.allreduce_sync_s = 5e-6;
	k.allreduce_sync_cpu_s = 1e-6;
	/* crowded (4 ranks on 2 devices' worth): tp4's node bound is its compute, optimiser
	 * and 17 allreduces' busy CPU (16 tensor-parallel, 1 loss) per rank, × 4 ranks / 2 */
	k.parallel_efficiency = 0.5;
	struct plan_candidate tp4 = one;
	tp4.tp = 4;
	k.allreduce_sync_s = 0; /* keep the critical path short: the node's bound wins */
	k.sync_s = 0;
	plan_predict(&model, &k, &tp4);
	struct plan_candidate tp4_alone = tp4;
	struct plan_cluster roomy = k;
	roomy.parallel_efficiency = 0;
	plan_predict(&model, &roomy, &tp4_alone); /* the same layout, uncrowded */
	assert_float_equal(tp4.step_s,
	                   (tp4_alone.compute_s + tp4_alone.optim_s + 17 * 3e-6) * 4 / 2, 1e-12);
	assert_true(tp4.step_s > tp4_alone.step_s);
	/* pipeline messages on a node whose every device runs a rank pay the busy wall figure,
	 * at most one message's worth of the stage's compute */
	k = cluster();
	k.latency_s = 0;
	k.sync_s = 20e-6;
	k.busy_sync_s = 100e-6;
	assert_float_equal(plan_pipeline_sync(&k, 2), 20e-6, 1e-15);
	assert_float_equal(plan_pipeline_sync(&k, 3), 60e-6, 1e-15);
	assert_float_equal(plan_pipeline_sync(&k, 4), 100e-6, 1e-15);
	struct plan_candidate pp4 = one;
	pp4.pp = 4;
	pp4.m = 4;
	plan_predict(&model, &k, &pp4);
	double msg = 16.0 * 64 * 4 / 3e9;
	assert_float_equal(pp4.pp_comm_s, 8 * (100e-6 + msg), 1e-12);
	k.busy_sync_s = 1; /* far longer than a message's worth of compute (< 1 ms here) */
	plan_predict(&model, &k, &pp4);
	assert_float_equal(pp4.pp_comm_s, 8 * (pp4.compute_s / 8 + msg), 1e-12);
	/* unmeasured (0): no sync terms */
	k = cluster();
	k.latency_s = 0;
	plan_predict(&model, &k, &tp2);
	assert_float_equal(tp2.tp_comm_s, 16 * act_bytes / 3e9, 1e-12);
	/* pipeline stages on different nodes pay no intra-node sync */
	k.sync_s = 20e-6;
	k.devices_per_node = 1;
	plan_predict(&model, &k, &pp2);
	assert_float_equal(pp2.pp_comm_s, 8 * (16.0 * 64 * 4 / 1e9), 1e-12);
}

/* Data-parallel gradients travel in the trainer's buckets, each an allreduce of its own:
 * with a bucket of one weight matrix every matrix closes one (16 for 8 blocks) and the last
 * block's layernorm with the input projection fill one more; each bucket pays 2(dp−1) ring
 * steps of the pipeline message's sync. */
static void test_dp_buckets(void **state)
{
	struct plan_model mb = model; /* d_model 64, d_ff 256, 8 layers */
	struct plan_candidate dp2 = {
	    .dp = 2, .tp = 1, .pp = 1, .v = 1, .m = 1, .schedule = PLAN_1F1B};
	mb.bucket_bytes = 0;
	assert_int_equal(plan_dp_buckets(&mb, &dp2), 1);
	mb.bucket_bytes = 1e9;
	assert_int_equal(plan_dp_buckets(&mb, &dp2), 1);
	mb.bucket_bytes = 4.0 * 64 * 256;
	assert_int_equal(plan_dp_buckets(&mb, &dp2), 17);
	struct plan_cluster k = cluster();
	k.latency_s = 0;
	k.sync_s = 20e-6;
	plan_predict(&mb, &k, &dp2);
	double params =
	    8 * (2 * 64 + 64 * 256 + 256 + 256 * 64 + 64) + (32 * 64 + 64) + (64 * 10 + 10);
	assert_float_equal(dp2.dp_comm_s, params * 4 / 3e9 + 17 * 2 * 20e-6, 1e-12);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rules_name_what_breaks),
	    cmocka_unit_test(test_bubble_follows_theory),
	    cmocka_unit_test(test_1f1b_holds_less_activation_memory_than_gpipe),
	    cmocka_unit_test(test_memory_limit_rejects_and_explains),
	    cmocka_unit_test(test_compute_bound_uses_every_device),
	    cmocka_unit_test(test_slow_links_keep_the_job_small),
	    cmocka_unit_test(test_ranking_is_deterministic),
	    cmocka_unit_test(test_unmeasured_cluster_is_refused),
	    cmocka_unit_test(test_rate_curve_interpolates),
	    cmocka_unit_test(test_oversubscribed_node_shares_compute),
	    cmocka_unit_test(test_measured_block_and_optimiser_costs),
	    cmocka_unit_test(test_sync_cost_per_exchange),
	    cmocka_unit_test(test_dp_buckets),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
