/* coll_shared.c: allreduce through shared buffers among the ranks of a host (and, when the
 * communicator spans hosts with as many ranks on each, a ring between hosts). The buffer
 * goes in chunks of up to DP_SHARED_CHUNK bytes; for each chunk, among a host's n ranks:
 *
 *   1. every rank copies its chunk (less its own slice, which no peer reads) into a slot of
 *      its own shared area and counts it staged;
 *   2. once every rank has staged it, rank r reduces slice r of the chunk straight out of
 *      its input and the n-1 peers' slots into its own slot (in a fixed order: r, r+1, ...,
 *      r-1) and counts it reduced;
 *      Across hosts, rank r then runs a ring allreduce of its slice with the ranks of the
 *      same index on the other hosts (the hierarchical algorithm's pairing: each ring
 *      carries 1/n of the data) before it counts it reduced;
 *   3. once every rank has reduced it, every rank copies the n-1 other reduced slices out of
 *      the peers' slots into its result (its own went there as it was reduced).
 *
 * Per chunk of L bytes a rank copies (n-1)/n·L in, reduces L/n from n-1 peers' slots and
 * copies (n-1)/n·L out, with two synchronisations per chunk whatever the world size, where a
 * ring needs 2(n-1) dependent steps per chunk. That is what keeps more ranks than cores from
 * collapsing: a ring step waits for the one neighbour that may be descheduled, here every
 * rank works on its whole slice when it runs. Chunk g's slot is reused for chunk g+2, which a
 * rank stages only after it has seen every rank stage chunk g+1, and a rank stages g+1 only
 * after it has copied chunk g out: no third counter is needed.
 *
 * Every slice is reduced by one rank only, so all ranks hold bitwise the same result. Before
 * reading a peer's slot a rank compares the peer's header with its own (mismatched
 * collectives fail by name, as on the other paths); a rank waiting here that finds a peer's
 * frame of this operation in its inbound ring, and a rank waiting in another algorithm that
 * finds a peer staging this operation's chunk, report the mismatch too. Waits spin, then
 * sleep on the doorbell that every counter update rings, and watch the control sockets (a
 * dead peer is named) and the communicator's deadline. */
#include "config.h"

#include <string.h>

#include "common/clock.h"
#include "dataplane/dp.h"

/* This rank's host's ranks (rank order) and, across hosts, the ranks with its index on
 * theirs (hosts in order of first appearance), as the hierarchical ring pairs them. */
struct shared_groups {
	int local[DP_SHARED_MAX_RANKS], cross[DP_SHARED_MAX_RANKS];
	struct dp_group lg, cg;
};

static void shared_groups(yd_comm *c, struct shared_groups *sg)
{
	int myhost = c->host_of[c->rank], nl = 0, li = 0, nc = 0, ci = 0;
	for (int r = 0; r < c->size && nl < DP_SHARED_MAX_RANKS; r++)
		if (c->host_of[r] == myhost) {
			if (r == c->rank)
				li = nl;
			sg->local[nl++] = r;
		}
	for (int h = 0; h < c->nhosts && nc < DP_SHARED_MAX_RANKS; h++) {
		int seen = 0;
		for (int r = 0; r < c->size; r++)
			if (c->host_of[r] == h && seen++ == li) {
				if (r == c->rank)
					ci = nc;
				sg->cross[nc++] = r;
			}
	}
	sg->lg = (struct dp_group){sg->local, nl, li};
	sg->cg = (struct dp_group){sg->cross, nc, ci};
}

int dp_shared_usable(yd_comm *c)
{
	int myhost = c->host_of ? c->host_of[c->rank] : 0, local = 0;
	if (c->size < 2 || c->size > DP_SHARED_MAX_RANKS || !c->host_of)
		return 0;
	/* between hosts, the ranks of every host pair up as the hierarchical ring's do */
	if (c->nhosts > 1 && !dp_hier_usable(c))
		return 0;
	for (int r = 0; r < c->size; r++)
		if (c->host_of[r] == myhost) {
			if (!dp_shm_shared_area(c, r))
				return 0;
			local++;
		}
	return local >= 2;
}

static void ring_all(yd_comm *c, const struct dp_group *lg)
{
	for (int i = 0; i < lg->n; i++)
		if (i != lg->me)
			dp_shm_ring_doorbell(c->peers[lg->ranks[i]].shm_doorbell,
			                     c->peers[lg->ranks[i]].shm_waiting);
}

/* The first rank of the host whose counter (staged or reduced) is below target, or -1. */
static int lagging(yd_comm *c, const struct dp_group *lg, int reduced, uint64_t target)
{
	for (int i = 0; i < lg->n; i++) {
		struct dp_shared_area *a = dp_shm_shared_area(c, lg->ranks[i]);
		_Atomic uint64_t *ctr = reduced ? &a->reduced : &a->staged;
		if (atomic_load_explicit(ctr, memory_order_acquire) < target)
			return lg->ranks[i];
	}
	return -1;
}

/* A peer whose staged chunk belongs to another operation: the mismatch, named. */
static int compare_headers(yd_comm *c, const struct dp_group *lg, const struct dp_op *o,
                           size_t bytes, uint64_t g)
{
	for (int i = 0; i < lg->n; i++) {
		int r = lg->ranks[i];
		if (r == c->rank)
			continue;
		struct dp_xfer x;
		dp_x_recv(&x, o, r, NULL, bytes);
		struct dp_hdr got = dp_shm_shared_area(c, r)->hdr[g % DP_SHARED_SLOTS];
		int rc = dp_hdr_check(c, &x, &got);
		if (rc)
			return rc;
	}
	return 0;
}

/* A frame from a peer waiting in our inbound ring while we run a shared-buffer chunk: unless
 * it belongs to a later operation (a peer done with this one may send its next), the peer
 * called another collective or algorithm. */
static int stray_frames(yd_comm *c, const struct dp_op *o, size_t bytes)
{
	for (int r = 0; r < c->size; r++) {
		const struct dp_hdr *h = r == c->rank ? NULL : dp_shm_peek(&c->peers[r]);
		if (!h || h->kind == DP_P2P || h->seq > o->seq)
			continue;
		struct dp_xfer x;
		dp_x_recv(&x, o, r, NULL, bytes);
		struct dp_hdr got = *h;
		return dp_hdr_check(c, &x, &got);
	}
	return 0;
}

void dp_announce(yd_comm *c, const struct dp_op *o)
{
	/* a failed communicator's calls return its error at once: they run no collective, and
	 * announcing one would make a survivor still in that sequence number report a mismatch
	 * instead of the failure */
	if (o->kind == DP_P2P || atomic_load(&c->failed) || atomic_load(&c->aborted))
		return;
	dp_hdr_fill(&c->doing, o, 0);
	struct dp_shared_area *a = dp_shm_shared_area(c, c->rank);
	if (a == NULL)
		return;
	atomic_store_explicit(&a->op_seq, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	dp_hdr_fill(&a->op, o, 0);
	atomic_store_explicit(&a->op_seq, o->seq, memory_order_release);
}

/* A shm peer that announced another collective under the sequence number this rank's own
 * announcement has: the mismatch, named. */
static int announced_mismatch(yd_comm *c)
{
	struct dp_shared_area *mine = dp_shm_shared_area(c, c->rank);
	uint64_t seq = mine ? atomic_load_explicit(&mine->op_seq, memory_order_relaxed) : 0;
	if (seq == 0)
		return 0;
	for (int r = 0; r < c->size; r++) {
		struct dp_shared_area *a = r == c->rank ? NULL : dp_shm_shared_area(c, r);
		if (a == NULL || atomic_load_explicit(&a->op_seq, memory_order_acquire) != seq)
			continue;
		struct dp_hdr got = a->op;
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&a->op_seq, memory_order_relaxed) != seq)
			continue; /* rewritten while read: it has moved on */
		struct dp_xfer x = {
		    .peer = r, .hdr = mine->op, .what = dp_kind_name(mine->op.kind)};
		int rc = dp_hdr_check(c, &x, &got);
		if (rc)
			return rc;
	}
	return 0;
}

int dp_shared_check_peers(yd_comm *c, const struct dp_xfer *x)
{
	int rc = announced_mismatch(c);
	if (rc)
		return rc;
	if (!x || x->hdr.kind == DP_P2P || !dp_shared_usable(c))
		return 0;
	for (int r = 0; r < c->size; r++) {
		struct dp_shared_area *a = dp_shm_shared_area(c, r);
		uint64_t staged;
		if (r == c->rank || a == NULL ||
		    (staged = atomic_load_explicit(&a->staged, memory_order_acquire)) <=
		        c->shared_chunks)
			continue;
		/* r cannot stage again before this rank takes part, so hdr holds still */
		struct dp_hdr got = a->hdr[staged % DP_SHARED_SLOTS];
		if (got.seq != x->hdr.seq)
			continue;
		struct dp_xfer y = *x;
		y.peer = r;
		return dp_hdr_check(c, &y, &got);
	}
	return 0;
}

static int wait_all(yd_comm *c, const struct dp_group *lg, const struct dp_op *o, size_t bytes,
                    int reduced, uint64_t target)
{
	uint64_t since = 0;
	int rc;
	for (int spins = 0;; spins++) {
		uint32_t bell = atomic_load(c->doorbell);
		int lag = lagging(c, lg, reduced, target);
		if (lag < 0)
			return 0;
		if ((rc = atomic_load(&c->failed)) != 0)
			return rc;
		if (atomic_load(&c->aborted))
			return dp_fail(c, YARD_EABORTED, c->rank, "operation aborted");
		if (spins < DP_SPIN_ROUNDS) {
			dp_spin(spins);
			continue;
		}
		uint64_t now = yard_now_mono_ms();
		if (!since)
			since = now;
		if (now - since >= (uint64_t)c->timeout_ms) {
			char peer[160];
			return dp_fail(
			    c, YARD_ETIMEDOUT, lag,
			    "%s #%llu: timed out after %d ms waiting for %s (shared-buffer "
			    "chunk %llu not yet %s)",
			    dp_kind_name(o->kind), (unsigned long long)o->seq, c->timeout_ms,
			    dp_peer_desc(c, lag, peer, sizeof peer), (unsigned long long)target,
			    reduced ? "reduced" : "staged");
		}
		if ((rc = stray_frames(c, o, bytes)) != 0 || (rc = announced_mismatch(c)) != 0)
			return rc;
		if (atomic_load(c->doorbell) == bell)
			dp_shm_wait(c, bell, 5);
		if ((rc = dp_poll_ctl_op(c, o, 0)) != 0)
			return rc;
	}
}

/* Slice [off, off+cnt) of the chunk reduced over the host's ranks' data into this rank's slot
 * (for the peers) and, when out is set, into out (this rank's result), in the order me,
 * me+1, ..., me-1 of the host's ranks: this rank's own part straight from its input (it never
 * staged it; no peer reads it), the others' from their slots, block by block so that the
 * running result stays in cache. slot[i] is the host's rank i's. */
static void reduce_slice(const struct dp_group *lg, const struct dp_op *o,
                         const unsigned char *mine, unsigned char *const *slot, unsigned char *out,
                         size_t off, size_t cnt)
{
	size_t esz = yd_dtype_size(o->dtype), step = 8192 / esz;
	int n = lg->n, me = lg->me;
	for (size_t i = 0; i < cnt; i += step) {
		size_t k = DP_MIN(step, cnt - i), at = (off + i) * esz;
		unsigned char *acc = slot[me] + at;
		dp_op_reduce(o, acc, mine + at, slot[(me + 1) % n] + at, k);
		for (int j = 2; j < n; j++)
			dp_op_reduce(o, acc, acc, slot[(me + j) % n] + at, k);
		if (out)
			memcpy(out + at, acc, k * esz);
	}
}

int dp_shared_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count)
{
	struct shared_groups sg;
	shared_groups(c, &sg);
	const struct dp_group *lg = &sg.lg;
	int n = lg->n, me = lg->me, rc;
	size_t esz = yd_dtype_size(o->dtype), per = DP_SHARED_CHUNK / esz;
	size_t bytes = count * esz, chunks = count ? (count + per - 1) / per : 1;
	struct dp_shared_area *area[n];
	for (int i = 0; i < n; i++)
		area[i] = dp_shm_shared_area(c, lg->ranks[i]);
	for (size_t k = 0; k < chunks; k++) {
		uint64_t g = ++c->shared_chunks;
		size_t first = k * per, cnt = count ? DP_MIN(per, count - first) : 0;
		unsigned char *slot[n];
		for (int i = 0; i < n; i++)
			slot[i] = area[i]->slot[g % DP_SHARED_SLOTS];
		const unsigned char *in = (const unsigned char *)src + first * esz;
		size_t off, len;
		dp_block(cnt, n, me, &off, &len);
		/* the peers read every slice of this slot but this rank's own */
		if (off)
			memcpy(slot[me], in, off * esz);
		if (off + len < cnt)
			memcpy(slot[me] + (off + len) * esz, in + (off + len) * esz,
			       (cnt - off - len) * esz);
		dp_hdr_fill(&area[me]->hdr[g % DP_SHARED_SLOTS], o, bytes);
		atomic_store_explicit(&area[me]->staged, g, memory_order_release);
		ring_all(c, lg);
		if ((rc = wait_all(c, lg, o, bytes, 0, g)) != 0 ||
		    (rc = compare_headers(c, lg, o, bytes, g)) != 0)
			return rc;
		unsigned char *out = (unsigned char *)dst + first * esz;
		/* in place, out is in: the slice is read before it is written, block by block */
		reduce_slice(lg, o, in, slot, sg.cg.n > 1 ? NULL : out, off, len);
		if (sg.cg.n > 1) {
			/* the host's sum of this slice with the other hosts' (same slice, same
			 * index) */
			unsigned char *mine = slot[me] + off * esz;
			if ((rc = dp_ring_allreduce(c, o, sg.cg, mine, mine, len)) != 0)
				return rc;
			memcpy(out + off * esz, mine, len * esz);
		}
		atomic_store_explicit(&area[me]->reduced, g, memory_order_release);
		ring_all(c, lg);
		if ((rc = wait_all(c, lg, o, bytes, 1, g)) != 0)
			return rc;
		for (int i = 0; i < n; i++) {
			dp_block(cnt, n, i, &off, &len);
			if (i != me)
				memcpy(out + off * esz, slot[i] + off * esz, len * esz);
		}
	}
	return 0;
}

/* Reduce-scatter and allgather on one host through the same areas, one synchronisation per
 * chunk: every rank stages its chunk and, once all have, reads what it needs of the others'.
 * A rank stages chunk g+1 only after it has read chunk g, so the slot argument above holds;
 * so does it for the headers, one per slot: a peer may stage g+1 (and write that slot's
 * header) while this rank still compares chunk g's. */
static int stage_and_wait(yd_comm *c, const struct dp_group *lg, const struct dp_op *o,
                          size_t bytes, uint64_t g)
{
	struct dp_shared_area *mine = dp_shm_shared_area(c, c->rank);
	dp_hdr_fill(&mine->hdr[g % DP_SHARED_SLOTS], o, bytes);
	atomic_store_explicit(&mine->staged, g, memory_order_release);
	ring_all(c, lg);
	int rc = wait_all(c, lg, o, bytes, 0, g);
	return rc ? rc : compare_headers(c, lg, o, bytes, g);
}

/* Chunk k of count elements per, on one host: its number, its first element and length,
 * and every rank's slot for it (slot[r] is rank r's). */
static uint64_t chunk_begin(yd_comm *c, size_t k, size_t per, size_t count, unsigned char **slot,
                            size_t *first, size_t *cnt)
{
	uint64_t g = ++c->shared_chunks;
	*first = k * per;
	*cnt = count ? DP_MIN(per, count - *first) : 0;
	for (int r = 0; r < c->size; r++)
		slot[r] = dp_shm_shared_area(c, r)->slot[g % DP_SHARED_SLOTS];
	return g;
}

int dp_shared_reduce_scatter(yd_comm *c, const struct dp_op *o, const void *src, void *dst,
                             size_t count)
{
	struct shared_groups sg;
	shared_groups(c, &sg);
	int n = c->size, me = c->rank, rc;
	size_t esz = yd_dtype_size(o->dtype), per = DP_SHARED_CHUNK / esz / (size_t)n;
	size_t bytes = count * (size_t)n * esz, chunks = count ? (count + per - 1) / per : 1;
	size_t step = 8192 / esz;
	for (size_t k = 0; k < chunks; k++) {
		unsigned char *slot[n];
		size_t first, cnt;
		uint64_t g = chunk_begin(c, k, per, count, slot, &first, &cnt);
		/* block b's part of this chunk at b·cnt of the slot; this rank's own block is
		 * read by this rank alone, from its input */
		for (int b = 0; b < n; b++)
			if (b != me)
				memcpy(slot[me] + (size_t)b * cnt * esz,
				       (const char *)src + ((size_t)b * count + first) * esz,
				       cnt * esz);
		if ((rc = stage_and_wait(c, &sg.lg, o, bytes, g)) != 0)
			return rc;
		const unsigned char *own =
		    (const unsigned char *)src + ((size_t)me * count + first) * esz;
		unsigned char *out = (unsigned char *)dst + first * esz;
		for (size_t i = 0; i < cnt; i += step) {
			size_t m = DP_MIN(step, cnt - i), at = ((size_t)me * cnt + i) * esz;
			/* in place, out is own: read before written, element by element */
			dp_op_reduce(o, out + i * esz, own + i * esz, slot[(me + 1) % n] + at, m);
			for (int j = 2; j < n; j++)
				dp_op_reduce(o, out + i * esz, out + i * esz,
				             slot[(me + j) % n] + at, m);
		}
	}
	return 0;
}

int dp_shared_allgather(yd_comm *c, const struct dp_op *o, void *buf, size_t count)
{
	struct shared_groups sg;
	shared_groups(c, &sg);
	int n = c->size, me = c->rank, rc;
	size_t esz = yd_dtype_size(o->dtype), per = DP_SHARED_CHUNK / esz;
	size_t bytes = count * (size_t)n * esz, chunks = count ? (count + per - 1) / per : 1;
	for (size_t k = 0; k < chunks; k++) {
		unsigned char *slot[n];
		size_t first, cnt;
		uint64_t g = chunk_begin(c, k, per, count, slot, &first, &cnt);
		memcpy(slot[me], (char *)buf + ((size_t)me * count + first) * esz, cnt * esz);
		if ((rc = stage_and_wait(c, &sg.lg, o, bytes, g)) != 0)
			return rc;
		for (int b = 0; b < n; b++)
			if (b != me)
				memcpy((char *)buf + ((size_t)b * count + first) * esz, slot[b],
				       cnt * esz);
	}
	return 0;
}
