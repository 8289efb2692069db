/* snapbuf.c: see snapbuf.h. */
#include "raft/snapbuf.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void snapbuf_init(struct snapbuf *b)
{
	memset(b, 0, sizeof *b);
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	b->inited = 1;
}

/* Writes one byte per page, so the kernel maps every page now and not during the copy. */
static void touch(unsigned char *p, size_t cap)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t step = page > 0 ? (size_t)page : 4096;
	for (size_t i = 0; i < cap; i += step)
		p[i] = 0;
	if (cap > 0)
		p[cap - 1] = 0;
}

static void *worker(void *arg)
{
	struct snapbuf *b = arg;
	pthread_mutex_lock(&b->mu);
	for (;;) {
		if (b->n_free > 0) {
			void *p = b->to_free[--b->n_free];
			pthread_mutex_unlock(&b->mu);
			free(p);
			pthread_mutex_lock(&b->mu);
			continue;
		}
		if (b->want > 0 && !b->stop) {
			size_t cap = b->want;
			void *old = b->ready;
			b->want = 0;
			b->ready = NULL;
			b->ready_cap = 0;
			b->preparing = 1;
			b->preparing_cap = cap;
			pthread_mutex_unlock(&b->mu);
			free(old);
			unsigned char *p = malloc(cap);
			if (p != NULL)
				touch(p, cap);
			pthread_mutex_lock(&b->mu);
			b->preparing = 0;
			if (p != NULL) {
				b->ready = p;
				b->ready_cap = cap;
				b->prepared++;
			} else {
				b->failed++;
			}
			pthread_cond_broadcast(&b->cv);
			continue;
		}
		if (b->stop)
			break;
		pthread_cond_wait(&b->cv, &b->mu);
	}
	b->want = 0;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

/* Starts the worker on first use; 0 when it runs. Called with mu held. */
static int start_locked(struct snapbuf *b)
{
	if (b->started)
		return 0;
	if (b->stop || pthread_create(&b->thread, NULL, worker, b) != 0)
		return -1;
	b->started = 1;
	return 0;
}

void snapbuf_prepare(struct snapbuf *b, size_t cap)
{
	if (!b->inited || cap == 0)
		return;
	pthread_mutex_lock(&b->mu);
	int enough = (b->ready != NULL && b->ready_cap >= cap) || b->want >= cap ||
	             (b->preparing && b->want == 0 && b->preparing_cap >= cap);
	if (!enough && start_locked(b) == 0) {
		b->want = cap;
		pthread_cond_broadcast(&b->cv);
	}
	pthread_mutex_unlock(&b->mu);
}

void *snapbuf_take(struct snapbuf *b, size_t *cap)
{
	void *p = NULL;
	if (!b->inited)
		return NULL;
	pthread_mutex_lock(&b->mu);
	while (b->started && !b->stop && (b->preparing || b->want > 0))
		pthread_cond_wait(&b->cv, &b->mu);
	p = b->ready;
	*cap = b->ready_cap;
	b->ready = NULL;
	b->ready_cap = 0;
	pthread_mutex_unlock(&b->mu);
	return p;
}

void snapbuf_release(struct snapbuf *b, void *p)
{
	if (p == NULL)
		return;
	if (b->inited) {
		pthread_mutex_lock(&b->mu);
		if (b->n_free < SNAPBUF_FREE_MAX && start_locked(b) == 0) {
			b->to_free[b->n_free++] = p;
			pthread_cond_broadcast(&b->cv);
			p = NULL;
		}
		pthread_mutex_unlock(&b->mu);
	}
	free(p);
}

void snapbuf_destroy(struct snapbuf *b)
{
	if (!b->inited)
		return;
	pthread_mutex_lock(&b->mu);
	b->stop = 1;
	pthread_cond_broadcast(&b->cv);
	int started = b->started;
	pthread_mutex_unlock(&b->mu);
	if (started)
		pthread_join(b->thread, NULL);
	for (int i = 0; i < b->n_free; i++)
		free(b->to_free[i]);
	free(b->ready);
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
	b->inited = 0;
}
