/* test_doorbell.c: the shared-memory doorbell's sleep (dp_doorbell_wait). A waiter reads the
 * doorbell, looks for work, finds none and sleeps; a ring that lands between its look and its
 * sleep must not be lost (the wait used to re-read the doorbell just before sleeping, and such
 * a ring then cost the whole timeout). */
#include "config.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "dataplane/dp.h"

static _Atomic uint32_t bell, waiting;

/* rung after the waiter's look, before its sleep: it does not sleep */
static void test_a_ring_before_the_sleep_is_not_lost(void **state)
{
	(void)state;
	uint32_t seen = atomic_load(&bell);
	dp_shm_ring_doorbell(&bell, &waiting);
	assert_int_equal(dp_doorbell_wait(&bell, &waiting, seen, 10000), 1);
	assert_int_equal(atomic_load(&waiting), 0);
}

/* nobody rings: it sleeps until the timeout and says so */
static void test_an_unrung_wait_times_out(void **state)
{
	(void)state;
	uint32_t seen = atomic_load(&bell);
	assert_int_equal(dp_doorbell_wait(&bell, &waiting, seen, 20), 0);
	assert_int_equal(atomic_load(&bell), seen);
	assert_int_equal(atomic_load(&waiting), 0);
}

static void *ring_when_waited_on(void *arg)
{
	(void)arg;
	/* bounded: the waiter announces itself at once (50 ms at most here) */
	for (int i = 0; i < 50000 && atomic_load(&waiting) == 0; i++) {
		struct timespec ts = {0, 1000};
		nanosleep(&ts, NULL);
	}
	dp_shm_ring_doorbell(&bell, &waiting);
	return NULL;
}

/* a sleeping waiter is woken by a ring from another thread */
static void test_a_sleeper_is_woken(void **state)
{
	(void)state;
	pthread_t t;
	uint32_t seen = atomic_load(&bell);
	assert_int_equal(pthread_create(&t, NULL, ring_when_waited_on, NULL), 0);
	assert_int_equal(dp_doorbell_wait(&bell, &waiting, seen, 10000), 1);
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&waiting), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_ring_before_the_sleep_is_not_lost),
	    cmocka_unit_test(test_an_unrung_wait_times_out),
	    cmocka_unit_test(test_a_sleeper_is_woken),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
