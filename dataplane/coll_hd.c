/* coll_hd.c: halving-doubling allreduce (Rabenseifner): recursive-halving reduce-scatter
 * (each step sends half of the current range to the partner and reduces the other half)
 * then recursive-doubling allgather. log2(p) steps each way and the ring's bandwidth term.
 * Non-power-of-two sizes fold the extra ranks in and out as recursive doubling does. */
#include "config.h"

#include <string.h>

#include "dataplane/dp.h"

int dp_hd_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count)
{
	size_t esz = yd_dtype_size(o->dtype), bytes = count * esz;
	int p = dp_pow2_floor(c->size), rem = c->size - p, q, rc;
	char *d = dst;
	const void *mine;
	if ((rc = dp_fold_in(c, o, src, dst, bytes, &q, &mine)) != 0)
		return rc;
	if (q >= 0) {
		if (p == 1 && mine != dst) /* no step to read the input: copy it */
			memcpy(dst, mine, bytes);
		/* the first step sends from and reduces with the input where it is (out of place:
		 * never copied) into dst; the later ones work within dst */
		const char *m = mine;
		size_t boff[p + 1], bcnt[p];
		for (int b = 0; b < p; b++)
			dp_block(count, p, b, &boff[b], &bcnt[b]);
		boff[p] = count;
		int lo = 0, hi = p;
		for (int mask = p / 2; mask >= 1; mask >>= 1) {
			int mid = (lo + hi) / 2, partner = dp_fold_real(q ^ mask, rem);
			int klo = (q & mask) ? mid : lo, khi = (q & mask) ? hi : mid;
			int slo = (q & mask) ? lo : mid, shi = (q & mask) ? mid : hi;
			struct dp_xfer x[2];
			dp_x_send(&x[0], o, partner, m + boff[slo] * esz,
			          (boff[shi] - boff[slo]) * esz);
			dp_x_recv_reduce(&x[1], o, partner, d + boff[klo] * esz,
			                 m + boff[klo] * esz, (boff[khi] - boff[klo]) * esz);
			if ((rc = dp_xfer_run(c, x, 2)) != 0)
				return rc;
			lo = klo;
			hi = khi;
			m = d;
		}
		for (int mask = 1; mask < p; mask <<= 1) {
			int partner = dp_fold_real(q ^ mask, rem);
			int mlo = q & ~(mask - 1), plo = (q ^ mask) & ~(mask - 1);
			struct dp_xfer x[2];
			dp_x_send(&x[0], o, partner, d + boff[mlo] * esz,
			          (boff[mlo + mask] - boff[mlo]) * esz);
			dp_x_recv(&x[1], o, partner, d + boff[plo] * esz,
			          (boff[plo + mask] - boff[plo]) * esz);
			if ((rc = dp_xfer_run(c, x, 2)) != 0)
				return rc;
		}
	}
	return dp_fold_out(c, o, dst, bytes);
}
