/* algo_select.c: which algorithm runs a collective. Forced (yd_config.algo, YARD_ALGO,
 * yd_comm_set_algo) where the algorithm applies to the collective; otherwise, for an
 * allreduce, the cheapest by the costs calibrate.c measured on this communicator when it was
 * created (per algorithm the slowest rank's times at a few sizes, so every rank computes the
 * same choice), unless the first calls of that size found another faster (tune.c, which
 * changes the algorithm when the call runs). Without a calibration (YARD_CALIBRATE=0,
 * yd_config.calibrate < 0) the alpha-beta-gamma model of research/dataplane.md §2 with
 * built-in constants: time = steps·α + bytes moved·β + bytes reduced·γ, with α and β of the
 * slowest link the algorithm crosses.
 * The choice travels in every header, so a divergence is reported as a mismatch rather than
 * corrupting data. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "dataplane/dp.h"

static double model_cost(yd_comm *c, enum yd_algo a, size_t bytes);

static const char *const algo_names[YD_ALGO_COUNT] = {"auto",  "ring", "rd",   "hd",    "tree",
                                                      "naive", "ps",   "hier", "shared"};

const char *yd_algo_name(enum yd_algo a)
{
	return (unsigned)a < YD_ALGO_COUNT ? algo_names[a] : "?";
}

int yd_algo_parse(const char *name)
{
	for (int i = 0; name && i < YD_ALGO_COUNT; i++)
		if (strcmp(name, algo_names[i]) == 0)
			return i;
	return -1;
}

int dp_algo_supported(enum dp_kind kind, enum yd_algo a)
{
	switch (kind) {
	case DP_ALLREDUCE:
		return a != YD_ALGO_AUTO;
	case DP_REDUCE_SCATTER:
	case DP_ALLGATHER:
		return a == YD_ALGO_RING || a == YD_ALGO_NAIVE || a == YD_ALGO_PS ||
		       a == YD_ALGO_HIER || a == YD_ALGO_SHARED;
	case DP_BROADCAST:
	case DP_REDUCE:
		return a == YD_ALGO_RING || a == YD_ALGO_TREE || a == YD_ALGO_NAIVE;
	default:
		return 0;
	}
}

static int any_tcp(yd_comm *c)
{
	for (int i = 0; i < c->size; i++)
		if (i != c->rank && c->peers[i].transport != YD_TRANSPORT_SHM)
			return 1;
	return 0;
}

/* Predicted seconds for an allreduce of `bytes` with algorithm a. */
double dp_algo_cost(yd_comm *c, enum yd_algo a, size_t bytes)
{
	if (c->costs.calibrated && (unsigned)a < YD_ALGO_COUNT)
		return dp_calibrated_cost(c, a, bytes);
	return model_cost(c, a, bytes);
}

void dp_algo_init(yd_comm *c)
{
	static const enum yd_algo all[] = {YD_ALGO_RING,  YD_ALGO_RD, YD_ALGO_HD,   YD_ALGO_TREE,
	                                   YD_ALGO_NAIVE, YD_ALGO_PS, YD_ALGO_HIER, YD_ALGO_SHARED};
	c->any_net = any_tcp(c);
	c->ncand = 0;
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		/* naive moves n-1 full copies through every rank: never a choice beyond 4 */
		if (all[i] == YD_ALGO_NAIVE && c->size > 4)
			continue;
		if (isinf(model_cost(c, all[i], 4096)))
			continue;
		c->cand[c->ncand++] = all[i];
	}
}

int dp_algo_candidates(yd_comm *c, enum yd_algo out[YD_ALGO_COUNT])
{
	memcpy(out, c->cand, sizeof c->cand[0] * (size_t)c->ncand);
	return c->ncand;
}

/* The alpha-beta-gamma model's seconds for an allreduce of `bytes` with algorithm a. */
static double model_cost(yd_comm *c, enum yd_algo a, size_t bytes)
{
	const struct dp_costs *k = &c->costs;
	double p = c->size, n = (double)bytes, lg = ceil(log2(p));
	int tcp = c->any_net;
	double al = tcp ? k->alpha_tcp : k->alpha_shm, be = tcp ? k->beta_tcp : k->beta_shm;
	double g = k->gamma;
	int pow2 = (c->size & (c->size - 1)) == 0;
	double fold = pow2 ? 0 : 2 * al + 2 * n * be;
	switch (a) {
	case YD_ALGO_RING:
		return 2 * (p - 1) * al + 2 * (p - 1) / p * n * be + (p - 1) / p * n * g;
	case YD_ALGO_RD:
		return floor(log2(p)) * (al + n * be + n * g) + fold;
	case YD_ALGO_HD:
		return 2 * floor(log2(p)) * al + 2 * (p - 1) / p * n * be + (p - 1) / p * n * g +
		       fold;
	case YD_ALGO_TREE:
		return 2 * lg * al + 2 * lg * n * be + lg * n * g;
	case YD_ALGO_NAIVE:
		/* one step, but n-1 full copies in and out of every rank */
		return al + (p - 1) * n * be + (p - 1) * n * g;
	case YD_ALGO_PS:
		return 2 * al + 2 * (p - 1) / p * n * be * (tcp ? 1.5 : 1.0) + (p - 1) / p * n * g;
	case YD_ALGO_HIER: {
		if (!dp_hier_usable(c) || !tcp)
			return INFINITY;
		double kk = p / c->nhosts, h = c->nhosts;
		return 2 * (kk - 1) * k->alpha_shm + 2 * (kk - 1) / kk * n * k->beta_shm +
		       2 * (h - 1) * k->alpha_tcp + 2 * (h - 1) / h * (n / kk) * k->beta_tcp +
		       (p - 1) / p * n * g;
	}
	case YD_ALGO_SHARED: {
		if (!dp_shared_usable(c))
			return INFINITY;
		/* two synchronisations per chunk; every byte copied in and out once; between
		 * hosts, per chunk a ring allreduce of the host's 1/k share */
		double chunks = fmax(1, ceil(n / DP_SHARED_CHUNK)), h = c->nhosts, kk = p / h;
		double cost = 2 * chunks * k->alpha_shm + 2 * n * k->beta_shm + (p - 1) / p * n * g;
		if (h > 1)
			cost += 2 * (h - 1) * chunks * k->alpha_tcp +
			        2 * (h - 1) / h * (n / kk) * k->beta_tcp;
		return cost;
	}
	default:
		return INFINITY;
	}
}

size_t dp_op_select_bytes(const yd_comm *c, const struct dp_op *o)
{
	size_t bytes = o->count * yd_dtype_size(o->dtype);
	return o->kind == DP_REDUCE_SCATTER || o->kind == DP_ALLGATHER ? bytes * (size_t)c->size
	                                                               : bytes;
}

enum yd_algo dp_algo_select(yd_comm *c, enum dp_kind kind, size_t bytes)
{
	if (c->algo != YD_ALGO_AUTO && dp_algo_supported(kind, c->algo))
		return c->algo;
	switch (kind) {
	case DP_ALLREDUCE: {
		/* the cheapest, but the ring unless that is clearly (5%) cheaper */
		enum yd_algo best = YD_ALGO_RING;
		double bt = INFINITY, ring = dp_algo_cost(c, YD_ALGO_RING, bytes);
		for (int i = 0; i < c->ncand; i++) {
			double t = dp_algo_cost(c, c->cand[i], bytes);
			if (c->cand[i] != YD_ALGO_RING && t < bt) {
				bt = t;
				best = c->cand[i];
			}
		}
		return bt < ring * 0.95 ? best : YD_ALGO_RING;
	}
	case DP_REDUCE_SCATTER:
	case DP_ALLGATHER:
		if (c->size <= 4 && bytes <= 16384)
			return YD_ALGO_NAIVE;
		/* the shared buffers on one host from 3 ranks and 4 MiB: 1.3-2.2x the ring at 4 and
		 * 8 ranks on 2 cores, about even below 4 MiB; at 2 ranks the ring's single copy
		 * wins the allgather */
		if (c->size >= 3 && bytes >= (4u << 20) && c->nhosts == 1 && dp_shared_usable(c))
			return YD_ALGO_SHARED;
		return YD_ALGO_RING;
	case DP_BROADCAST:
	case DP_REDUCE:
		if (bytes <= 65536)
			return c->size <= 4 ? YD_ALGO_NAIVE : YD_ALGO_TREE;
		return c->size <= 4 ? YD_ALGO_RING : YD_ALGO_TREE;
	default:
		return YD_ALGO_AUTO;
	}
}

enum yd_algo yd_allreduce_algo(yd_comm *c, size_t count, enum yd_dtype dt)
{
	if (!c)
		return YD_ALGO_AUTO;
	size_t bytes = count * yd_dtype_size(dt);
	enum yd_algo a = dp_algo_select(c, DP_ALLREDUCE, bytes);
	if (!dp_algo_supported(DP_ALLREDUCE, c->algo)) {
		enum yd_algo tuned = dp_tune_chosen(c, DP_ALLREDUCE, bytes, dt);
		if (tuned != YD_ALGO_AUTO)
			a = tuned;
	}
	return a;
}
