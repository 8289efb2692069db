/* algo_select.c: which algorithm runs a collective. A forced algorithm (yd_config.algo,
 * YARD_ALGO, yd_comm_set_algo) wins where it applies to the collective; otherwise the choice
 * depends on the buffer size and the world size (and is the same on every rank, since it
 * depends only on arguments all ranks share). */
#include "config.h"

#include "dataplane/yd_impl.h"

/* Below this many bytes per rank the one-round direct exchange beats the 2(n-1) rounds of
 * a ring (measured on loopback TCP: a round costs ~25 us, a byte ~0.3 ns). */
#define DIRECT_MAX_BYTES (16 * 1024)

enum yd_algo algo_select(const yd_comm *comm, const struct coll_args *a)
{
	size_t bytes = a->count * yd_dtype_size(a->dt);
	enum yd_algo forced = comm->algo;
	switch (a->kind) {
	case COLL_ALLREDUCE:
		if (forced != YD_ALGO_AUTO)
			return forced;
		return bytes <= DIRECT_MAX_BYTES ? YD_ALGO_NAIVE : YD_ALGO_RING;
	case COLL_REDUCE_SCATTER:
	case COLL_ALLGATHER:
		if (forced == YD_ALGO_NAIVE || forced == YD_ALGO_RING)
			return forced;
		return bytes <= DIRECT_MAX_BYTES / 4 ? YD_ALGO_NAIVE : YD_ALGO_RING;
	case COLL_SPLIT:
	case COLL_BARRIER:
		return YD_ALGO_NAIVE;
	default:
		return YD_ALGO_TREE;
	}
}
