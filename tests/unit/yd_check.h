/* yd_check.h: typed element access and reference reductions for the data plane tests.
 * Inputs are small integers, so every sum/product/min/max is exact in every dtype and the
 * expected result is bit-exact whatever order an algorithm reduces in. */
#ifndef YD_CHECK_H
#define YD_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "dataplane/reduce.h"
#include "dataplane/yd.h"

static inline void check_put(void *buf, size_t i, enum yd_dtype dt, double v)
{
	switch (dt) {
	case YD_F32:
		((float *)buf)[i] = (float)v;
		break;
	case YD_F64:
		((double *)buf)[i] = v;
		break;
	case YD_F16:
		((uint16_t *)buf)[i] = reduce_float_to_f16((float)v);
		break;
	case YD_BF16:
		((uint16_t *)buf)[i] = reduce_float_to_bf16((float)v);
		break;
	case YD_I32:
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	default:
		((int64_t *)buf)[i] = (int64_t)v;
		break;
	}
}

/* The test input of rank r at index i for op (products use {2, 1, -1} to stay exact). */
static inline int check_input(int r, size_t i, enum yd_op op, int salt)
{
	if (op == YD_PROD) {
		int k = (int)((r + i + (unsigned)salt) % 3u);
		return k == 0 ? 2 : (k == 1 ? 1 : -1);
	}
	return (int)((r * 7u + i * 3u + (unsigned)salt * 5u) % 11u) - 5;
}

/* The expected reduction over ranks 0..n-1 of check_input(r, i, op, salt), as dtype bits. */
static inline void check_expect(void *buf, size_t at, enum yd_dtype dt, enum yd_op op, int n,
                                size_t i, int salt)
{
	double acc = check_input(0, i, op, salt);
	for (int r = 1; r < n; r++) {
		double v = check_input(r, i, op, salt);
		switch (op) {
		case YD_PROD:
			acc *= v;
			break;
		case YD_MIN:
			acc = v < acc ? v : acc;
			break;
		case YD_MAX:
			acc = v > acc ? v : acc;
			break;
		default:
			acc += v;
		}
	}
	if (op == YD_AVG) {
		switch (dt) {
		case YD_F32:
		case YD_F16:
		case YD_BF16:
			acc = (double)((float)acc / (float)n);
			break;
		case YD_F64:
			acc = acc / n;
			break;
		default:
			acc = (double)((int64_t)acc / n);
		}
	}
	check_put(buf, at, dt, acc);
}

#endif
