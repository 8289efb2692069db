/* test_schedule.c: the pipeline schedules as instruction lists, run through the simulator:
 * complete, matched, deadlock-free, the bubble each schedule is known for, and the in-flight
 * activation bounds; plus the checker itself catching broken programs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/schedule.h"

static void build_all(enum sched_kind kind, int p, int v, int m, struct sched_program *progs)
{
	struct yard_err err = {0};
	for (int s = 0; s < p; s++)
		if (sched_build(kind, p, v, m, s, &progs[s], &err) != 0)
			fail_msg("%s p %d v %d m %d stage %d: %s", sched_kind_name(kind), p, v, m,
			         s, err.msg);
}

static void free_all(struct sched_program *progs, int p)
{
	for (int s = 0; s < p; s++)
		sched_program_free(&progs[s]);
}

static void check_ok(struct sched_program *progs, int p, struct sched_stats *st)
{
	struct yard_err err = {0};
	if (sched_check(progs, p, 1.0, 2.0, st, &err) != 0)
		fail_msg("%s p %d v %d m %d: %s", sched_kind_name(progs[0].kind), p, progs[0].v,
		         progs[0].m, err.msg);
}

static void test_gpipe_and_1f1b_have_the_textbook_bubble(void **state)
{
	const int ps[] = {1, 2, 3, 4, 8};
	const int ms[] = {1, 2, 3, 4, 7, 8, 16};
	for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
		for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++)
			for (int kind = SCHED_GPIPE; kind <= SCHED_1F1B; kind++) {
				int p = ps[i], m = ms[j];
				struct sched_program progs[8];
				struct sched_stats st;
				build_all(kind, p, 1, m, progs);
				check_ok(progs, p, &st);
				double theory = (double)(p - 1) / (m + p - 1);
				for (int s = 0; s < p; s++)
					if (fabs(st.bubble_fraction[s] - theory) > 1e-9)
						fail_msg("%s p %d m %d stage %d: bubble %.4f, "
						         "theory %.4f",
						         sched_kind_name(kind), p, m, s,
						         st.bubble_fraction[s], theory);
				/* one activation and one gradient per boundary and micro-batch */
				assert_int_equal(st.messages, 2 * (p - 1) * m);
				free_all(progs, p);
			}
}

static void test_in_flight_activations(void **state)
{
	for (int p = 1; p <= 8; p *= 2)
		for (int m = 1; m <= 16; m *= 2) {
			struct sched_program progs[8];
			struct sched_stats st;
			build_all(SCHED_GPIPE, p, 1, m, progs);
			check_ok(progs, p, &st);
			assert_int_equal(st.peak_in_flight[0], m);
			free_all(progs, p);
			build_all(SCHED_1F1B, p, 1, m, progs);
			check_ok(progs, p, &st);
			for (int s = 0; s < p; s++)
				if (st.peak_in_flight[s] > p - s)
					fail_msg("1f1b p %d m %d stage %d: %d in flight, bound %d",
					         p, m, s, st.peak_in_flight[s], p - s);
			assert_int_equal(st.peak_in_flight[0], m < p ? m : p);
			free_all(progs, p);
		}
}

static void test_interleaved_covers_all_chunks_with_a_smaller_bubble(void **state)
{
	const int ps[] = {2, 4};
	const int vs[] = {1, 2, 3, 4};
	for (size_t i = 0; i < 2; i++)
		for (size_t j = 0; j < 4; j++)
			for (int mult = 1; mult <= 4; mult *= 2) {
				int p = ps[i], v = vs[j], m = p * mult;
				struct sched_program progs[4], flat[4];
				struct sched_stats st, st_flat;
				build_all(SCHED_INTERLEAVED, p, v, m, progs);
				check_ok(progs, p, &st); /* every (mb, chunk) once, in order */
				build_all(SCHED_1F1B, p, 1, m, flat);
				check_ok(flat, p, &st_flat);
				double theory = (double)(p - 1) / (v * m + p - 1);
				if (st.bubble_fraction[0] > theory + 1e-9)
					fail_msg("interleaved p %d v %d m %d: bubble %.4f above "
					         "theory %.4f",
					         p, v, m, st.bubble_fraction[0], theory);
				if (v > 1 && st.bubble_fraction[0] >= st_flat.bubble_fraction[0])
					fail_msg("interleaved p %d v %d m %d: bubble %.4f not "
					         "below 1f1b's "
					         "%.4f",
					         p, v, m, st.bubble_fraction[0],
					         st_flat.bubble_fraction[0]);
				assert_int_equal(st.messages, 2 * (p * v - 1) * m);
				free_all(progs, p);
				free_all(flat, p);
			}
}

static void test_unrunnable_schedules_are_refused_by_name(void **state)
{
	struct sched_program prog;
	struct yard_err err = {0};
	assert_int_equal(sched_build(SCHED_INTERLEAVED, 4, 2, 6, 0, &prog, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "divisible"));
	assert_non_null(strstr(err.msg, "m 6, pp 4"));
	assert_int_equal(sched_build(SCHED_1F1B, 2, 2, 4, 0, &prog, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "parallel.virtual_stages"));
	assert_int_equal(sched_build(SCHED_GPIPE, 2, 1, 0, 0, &prog, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "parallel.micro_batches"));
}

static void test_checker_catches_broken_programs(void **state)
{
	struct sched_program progs[2];
	struct sched_stats st;
	struct yard_err err = {0};
	/* stage 1 waits for a gradient before it sends the activation stage 0 waits for */
	build_all(SCHED_GPIPE, 2, 1, 1, progs);
	/* stage 0: FORWARD SEND_ACT RECV_GRAD BACKWARD; swap its first two to send too early */
	struct sched_instr tmp = progs[0].instr[0];
	progs[0].instr[0] = progs[0].instr[1];
	progs[0].instr[1] = tmp;
	assert_int_equal(sched_check(progs, 2, 1, 1, &st, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "send of data not yet computed"));
	free_all(progs, 2);

	build_all(SCHED_1F1B, 2, 1, 2, progs);
	/* drop stage 1's last SEND_GRAD: stage 0 blocks forever */
	progs[1].count--;
	assert_int_equal(progs[1].instr[progs[1].count].op, SCHED_SEND_GRAD);
	assert_int_equal(sched_check(progs, 2, 1, 1, &st, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "deadlock"));
	assert_non_null(strstr(err.msg, "stage 0 at RECV_GRAD(mb 1"));
	progs[1].count++;
	/* a backward before its forward */
	struct sched_instr *first_b = NULL;
	for (int k = 0; k < progs[1].count && !first_b; k++)
		if (progs[1].instr[k].op == SCHED_BACKWARD)
			first_b = &progs[1].instr[k];
	first_b->mb = 1;
	assert_int_equal(sched_check(progs, 2, 1, 1, &st, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "backward before forward"));
	free_all(progs, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gpipe_and_1f1b_have_the_textbook_bubble),
	    cmocka_unit_test(test_in_flight_activations),
	    cmocka_unit_test(test_interleaved_covers_all_chunks_with_a_smaller_bubble),
	    cmocka_unit_test(test_unrunnable_schedules_are_refused_by_name),
	    cmocka_unit_test(test_checker_catches_broken_programs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
