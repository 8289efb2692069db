/* coll_rd.c: recursive doubling allreduce. log2(p) steps, each exchanging the whole buffer
 * with the partner at distance 2^k and reducing: the fewest messages, so the small-message
 * choice. Any world size: the first 2·(n−p) ranks pair up and the even one folds its data
 * into the odd one before and receives the result after (MPICH's scheme), with p the largest
 * power of two ≤ n. Also the fold/unfold helpers halving-doubling shares. */
#include "config.h"

#include <string.h>

#include "dataplane/dp.h"

int dp_pow2_floor(int n)
{
	int p = 1;
	while (p * 2 <= n)
		p *= 2;
	return p;
}

/* Real rank of a rank in the power-of-two group. */
int dp_fold_real(int q, int rem)
{
	return q < rem ? 2 * q + 1 : q + rem;
}

/* Folds the extra ranks in: returns this rank's index in the power-of-two group, or -1 if it
 * sat out (then it must wait for dp_fold_out). On return *mine points at this rank's
 * contribution (src, plus the folded neighbour's): dst for a rank that folded a neighbour in,
 * else src itself, not copied (the first step reads it from there and writes dst). */
int dp_fold_in(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t bytes,
               int *q_out, const void **mine)
{
	int n = c->size, r = c->rank, p = dp_pow2_floor(n), rem = n - p;
	struct dp_xfer x;
	*mine = src;
	if (r < 2 * rem) {
		if (r % 2 == 0) {
			dp_x_send(&x, o, r + 1, src, bytes);
			*q_out = -1;
			return dp_xfer_run(c, &x, 1);
		}
		dp_x_recv_reduce(&x, o, r - 1, dst, src, bytes);
		*q_out = r / 2;
		*mine = dst;
		return dp_xfer_run(c, &x, 1);
	}
	*q_out = r - rem;
	return 0;
}

int dp_fold_out(yd_comm *c, const struct dp_op *o, void *dst, size_t bytes)
{
	int n = c->size, r = c->rank, rem = n - dp_pow2_floor(n);
	struct dp_xfer x;
	if (r >= 2 * rem)
		return 0;
	if (r % 2 == 0)
		dp_x_recv(&x, o, r + 1, dst, bytes);
	else
		dp_x_send(&x, o, r - 1, dst, bytes);
	return dp_xfer_run(c, &x, 1);
}

int dp_rd_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count)
{
	size_t bytes = count * yd_dtype_size(o->dtype);
	int p = dp_pow2_floor(c->size), rem = c->size - p, q, rc;
	const void *mine;
	if ((rc = dp_fold_in(c, o, src, dst, bytes, &q, &mine)) != 0)
		return rc;
	if (q >= 0) {
		char *tmp = dp_scratch(c, bytes + 1);
		if (!tmp)
			return YARD_ENOMEM;
		/* each step reads cur and writes the other of dst and tmp. Out of place the
		 * first reads the input where it is, never copied, and writes where the last
		 * step then lands in dst: dst for an odd number of steps, else tmp */
		int steps = 0;
		for (int mask = 1; mask < p; mask <<= 1)
			steps++;
		const char *cur = mine;
		for (int mask = 1; mask < p; mask <<= 1) {
			char *nxt = cur == (const char *)dst ? tmp : dst;
			if (mask == 1 && cur != (const char *)dst)
				nxt = steps % 2 ? dst : tmp;
			struct dp_xfer x[2];
			int partner = dp_fold_real(q ^ mask, rem);
			dp_x_send(&x[0], o, partner, cur, bytes);
			dp_x_recv_reduce(&x[1], o, partner, nxt, cur, bytes);
			if ((rc = dp_xfer_run(c, x, 2)) != 0)
				return rc;
			cur = nxt;
		}
		if (cur != (const char *)dst)
			memcpy(dst, cur, bytes);
	}
	return dp_fold_out(c, o, dst, bytes);
}
