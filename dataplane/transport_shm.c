/* transport_shm.c: shared memory between ranks of one host. Each rank owns one segment that
 * holds its doorbell and one inbound ring per sender; a sender copies message frames into
 * the receiver's ring, the receiver reduces (or copies) straight out of the slot into its
 * destination, so the reduction is fused into the only copy that reads the peer's data.
 *
 * Rings are single-producer single-consumer: head (frames published) and tail (frames
 * consumed) counters with release/acquire ordering, 8 slots of 128 KiB, so a large message
 * keeps 8 frames in flight. Waiting is spin-then-block: after a short spin the waiter sleeps
 * on its doorbell futex (shared, so it works across processes), which every sender and
 * consumer bumps after changing a ring. Dead peers are found through the control socket the
 * engine watches (a killed process's sockets close), never through shared memory. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "dataplane/dp.h"

#define SHM_SLOTS 8
#define SHM_SLOT_BYTES (128u * 1024u)

struct shm_slot {
	struct dp_hdr hdr;
	uint64_t len, off;
	unsigned char data[SHM_SLOT_BYTES] __attribute__((aligned(64)));
};

struct dp_shm_ring {
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) struct shm_slot slot[SHM_SLOTS];
};

struct shm_ctl {
	_Alignas(64) _Atomic uint32_t doorbell;
	_Alignas(64) _Atomic uint32_t waiting;
	int32_t pid;
};

#define CTL_BYTES 4096u

/* control page, one inbound ring per sender, the shared-buffer allreduce's area */
static size_t seg_len(int world)
{
	return CTL_BYTES + (size_t)world * sizeof(struct dp_shm_ring) +
	       sizeof(struct dp_shared_area);
}

static struct dp_shared_area *seg_shared(void *seg, int world)
{
	return (struct dp_shared_area *)((char *)seg + CTL_BYTES +
	                                 (size_t)world * sizeof(struct dp_shm_ring));
}

struct dp_shared_area *dp_shm_shared_area(yd_comm *c, int rank)
{
	if (rank == c->rank)
		return c->shm_self_len ? seg_shared(c->shm_self, c->size) : NULL;
	return c->shm_map && c->shm_map[rank] ? seg_shared(c->shm_map[rank], c->size) : NULL;
}

static struct dp_shm_ring *seg_ring(void *seg, int sender)
{
	return (struct dp_shm_ring *)((char *)seg + CTL_BYTES) + sender;
}

static void seg_name(char *buf, size_t len, uint64_t nonce, int rank)
{
	snprintf(buf, len, "/yd-%016llx-%d", (unsigned long long)nonce, rank);
}

/* A barrier among the shm peers over the control sockets (used twice during setup). */
static int local_barrier(yd_comm *c, char tag)
{
	for (int j = 0; j < c->size; j++)
		if (c->peers[j].transport == YD_TRANSPORT_SHM &&
		    dp_write_full(c->peers[j].ctl_fd, &tag, 1, c->timeout_ms))
			return YARD_EPEER;
	for (int j = 0; j < c->size; j++) {
		char got;
		if (c->peers[j].transport != YD_TRANSPORT_SHM)
			continue;
		if (dp_read_full(c->peers[j].ctl_fd, &got, 1, c->timeout_ms) || got != tag)
			return YARD_EPEER;
	}
	return 0;
}

int dp_shm_setup(yd_comm *c, char *err, size_t errlen)
{
	int any = 0, rc;
	for (int j = 0; j < c->size; j++)
		any |= c->peers[j].transport == YD_TRANSPORT_SHM;
	c->shm_map = calloc((size_t)c->size, sizeof *c->shm_map);
	c->shm_map_len = calloc((size_t)c->size, sizeof *c->shm_map_len);
	if (!c->shm_map || !c->shm_map_len)
		return YARD_ENOMEM;
	if (!any) {
		/* a private doorbell, so that waits and wakes work the same without peers */
		c->shm_self = calloc(1, CTL_BYTES);
		if (!c->shm_self)
			return YARD_ENOMEM;
		c->doorbell = &((struct shm_ctl *)c->shm_self)->doorbell;
		c->waiting = &((struct shm_ctl *)c->shm_self)->waiting;
		return 0;
	}
	seg_name(c->shm_name, sizeof c->shm_name, c->nonce, c->rank);
	int fd = shm_open(c->shm_name, O_CREAT | O_EXCL | O_RDWR, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "shm_open %s: %s", c->shm_name, strerror(errno));
		c->shm_name[0] = 0;
		return YARD_EIO;
	}
	c->shm_self_len = seg_len(c->size);
	if (ftruncate(fd, (off_t)c->shm_self_len) < 0) {
		snprintf(err, errlen, "ftruncate %s: %s", c->shm_name, strerror(errno));
		close(fd);
		return YARD_EIO;
	}
	/* the pages now, not at first touch: a full /dev/shm (a container's default is 64 MiB)
	 * is this error, not a SIGBUS in the middle of a collective */
	int fe = posix_fallocate(fd, 0, (off_t)c->shm_self_len);
	if (fe != 0) {
		snprintf(
		    err, errlen,
		    "shared memory for rank %d: %zu KiB in /dev/shm: %s (a container's /dev/shm "
		    "is often small: raise it, e.g. docker --shm-size, or use "
		    "YARD_TRANSPORT=tcp)",
		    c->rank, c->shm_self_len >> 10, strerror(fe));
		close(fd);
		return fe == ENOSPC ? YARD_ENOSPACE : YARD_EIO;
	}
	void *m = mmap(NULL, c->shm_self_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		snprintf(err, errlen, "mmap %s: %s", c->shm_name, strerror(errno));
		return YARD_EIO;
	}
	c->shm_self = m;
	struct shm_ctl *ctl = m;
	ctl->pid = (int32_t)getpid();
	c->doorbell = &ctl->doorbell;
	c->waiting = &ctl->waiting;
	if ((rc = local_barrier(c, 'c')) != 0) {
		snprintf(err, errlen, "shared-memory setup: a local peer went away");
		return rc;
	}
	for (int j = 0; j < c->size; j++) {
		struct dp_peer *p = &c->peers[j];
		char name[64];
		if (p->transport != YD_TRANSPORT_SHM)
			continue;
		seg_name(name, sizeof name, c->nonce, j);
		int pfd = shm_open(name, O_RDWR, 0600);
		if (pfd < 0) {
			snprintf(err, errlen, "shm_open %s (rank %d): %s", name, j,
			         strerror(errno));
			return YARD_EIO;
		}
		void *pm = mmap(NULL, seg_len(c->size), PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
		close(pfd);
		if (pm == MAP_FAILED) {
			snprintf(err, errlen, "mmap %s: %s", name, strerror(errno));
			return YARD_EIO;
		}
		c->shm_map[j] = pm;
		c->shm_map_len[j] = seg_len(c->size);
		p->shm_tx = seg_ring(pm, c->rank);
		p->shm_rx = seg_ring(m, j);
		p->shm_doorbell = &((struct shm_ctl *)pm)->doorbell;
		p->shm_waiting = &((struct shm_ctl *)pm)->waiting;
	}
	rc = local_barrier(c, 'o');
	shm_unlink(c->shm_name);
	c->shm_name[0] = 0;
	if (rc)
		snprintf(err, errlen, "shared-memory setup: a local peer went away");
	return rc;
}

void dp_shm_teardown(yd_comm *c)
{
	if (c->shm_name[0])
		shm_unlink(c->shm_name);
	if (c->shm_map) {
		for (int j = 0; j < c->size; j++)
			if (c->shm_map[j])
				munmap(c->shm_map[j], c->shm_map_len[j]);
	}
	free(c->shm_map);
	free(c->shm_map_len);
	if (c->shm_self_len)
		munmap(c->shm_self, c->shm_self_len);
	else
		free(c->shm_self);
	c->shm_self = NULL;
	c->shm_map = NULL;
	c->shm_map_len = NULL;
}

const struct dp_hdr *dp_shm_peek(struct dp_peer *p)
{
	struct dp_shm_ring *ring = p->shm_rx;
	if (!ring)
		return NULL;
	uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
	return head == tail ? NULL : &ring->slot[tail % SHM_SLOTS].hdr;
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

void dp_shm_ring_doorbell(_Atomic uint32_t *doorbell, _Atomic uint32_t *waiting)
{
	atomic_fetch_add(doorbell, 1);
	if (atomic_load(waiting))
		futex(doorbell, FUTEX_WAKE, INT_MAX, NULL);
}

int dp_doorbell_wait(_Atomic uint32_t *doorbell, _Atomic uint32_t *waiting, uint32_t seen,
                     int timeout_ms)
{
	struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
	/* a ringer adds to the doorbell before it reads `waiting`: either it sees this waiter
	 * and wakes it, or the futex sees the doorbell moved past `seen` and does not sleep */
	atomic_fetch_add(waiting, 1);
	long r = futex(doorbell, FUTEX_WAIT, seen, &ts);
	int timed_out = r != 0 && errno == ETIMEDOUT;
	atomic_fetch_sub(waiting, 1);
	return !timed_out && atomic_load(doorbell) != seen;
}

void dp_shm_wait(yd_comm *c, uint32_t seen, int timeout_ms)
{
	dp_doorbell_wait(c->doorbell, c->waiting, seen, timeout_ms);
}

static int shm_gone(yd_comm *c, struct dp_peer *p, struct dp_xfer *x)
{
	return dp_peer_lost(c, p, x, "left the communicator mid-operation");
}

int dp_shm_progress_tx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed)
{
	struct dp_shm_ring *ring = p->shm_tx;
	int moved = 0;
	for (;;) {
		if (p->shm_tx_cur < 0) {
			p->shm_tx_cur = dp_xset_next(s, p->shm_tx_last, p->rank, 1);
			if (p->shm_tx_cur < 0)
				break;
		}
		struct dp_xfer *x = &s->x[p->shm_tx_cur];
		if (p->eof)
			return shm_gone(c, p, x);
		uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
		uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
		int sent_one = 0;
		while (head - tail < SHM_SLOTS) {
			struct shm_slot *sl = &ring->slot[head % SHM_SLOTS];
			size_t n = DP_MIN(SHM_SLOT_BYTES, x->len - x->done);
			sl->hdr = x->hdr;
			sl->len = n;
			sl->off = x->done;
			if (n) /* a barrier's empty message has no buffer at all */
				memcpy(sl->data, (const char *)x->src + x->done, n);
			head++;
			atomic_store_explicit(&ring->head, head, memory_order_release);
			x->done += n;
			sent_one = 1;
			if (x->done == x->len)
				break;
		}
		if (!sent_one)
			break;
		moved = 1;
		if (x->done < x->len)
			break;
		x->complete = 1;
		p->shm_tx_last = p->shm_tx_cur;
		p->shm_tx_cur = -1;
	}
	if (moved) {
		*progressed = 1;
		dp_shm_ring_doorbell(p->shm_doorbell, p->shm_waiting);
	}
	return 0;
}

int dp_shm_progress_rx(yd_comm *c, struct dp_peer *p, struct dp_xset *s, int *progressed)
{
	struct dp_shm_ring *ring = p->shm_rx;
	int moved = 0, rc;
	for (;;) {
		if (p->shm_rx_cur < 0) {
			p->shm_rx_cur = dp_xset_next(s, p->shm_rx_last, p->rank, 0);
			if (p->shm_rx_cur < 0)
				break;
		}
		struct dp_xfer *x = &s->x[p->shm_rx_cur];
		uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
		uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
		if (head == tail) {
			if (p->eof)
				return shm_gone(c, p, x);
			break;
		}
		while (tail < head) {
			struct shm_slot *sl = &ring->slot[tail % SHM_SLOTS];
			rc = dp_frame_deliver(c, x, &sl->hdr, sl->off, sl->len, sl->data,
			                      "shared-memory");
			if (rc)
				return rc;
			tail++;
			atomic_store_explicit(&ring->tail, tail, memory_order_release);
			moved = 1;
			if (x->done == x->len)
				break;
		}
		if (x->done < x->len)
			break;
		x->complete = 1;
		p->shm_rx_last = p->shm_rx_cur;
		p->shm_rx_cur = -1;
	}
	if (moved) {
		*progressed = 1;
		dp_shm_ring_doorbell(p->shm_doorbell, p->shm_waiting);
	}
	return 0;
}
