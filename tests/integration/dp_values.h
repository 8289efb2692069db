/* dp_values.h: deterministic test inputs whose reductions are exact in every dtype (small
 * integers, powers of two), and a reference computed in double then encoded, so results are
 * compared bit for bit whatever order an algorithm reduces in. */
#ifndef DP_VALUES_H
#define DP_VALUES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dataplane/yd.h"

static inline double dpv_value(enum yd_op op, int rank, size_t i)
{
	static const double prod_vals[4] = {1, 2, -1, 1};
	switch (op) {
	case YD_PROD:
		return prod_vals[((size_t)rank + i) % 4];
	case YD_MIN:
	case YD_MAX:
		return (double)(((size_t)rank * 13 + i * 7) % 23) - 11;
	default:
		return (double)(((size_t)rank * 7 + i * 3) % 11) - 5;
	}
}

static inline uint16_t dpv_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline void dpv_set(void *buf, enum yd_dtype dt, size_t i, double v)
{
	switch (dt) {
	case YD_F32:
		((float *)buf)[i] = (float)v;
		break;
	case YD_F64:
		((double *)buf)[i] = v;
		break;
	case YD_F16: {
		_Float16 h = (_Float16)(float)v;
		memcpy((uint16_t *)buf + i, &h, 2);
		break;
	}
	case YD_BF16:
		((uint16_t *)buf)[i] = dpv_bf16((float)v);
		break;
	case YD_I32:
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	case YD_I64:
		((int64_t *)buf)[i] = (int64_t)v;
		break;
	default:
		break;
	}
}

/* The expected result of reducing dpv_value over ranks 0..n-1 at index i, encoded. */
static inline void dpv_ref(void *buf, enum yd_dtype dt, enum yd_op op, int n, size_t i)
{
	double acc = dpv_value(op, 0, i);
	for (int r = 1; r < n; r++) {
		double v = dpv_value(op, r, i);
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
	if (op != YD_AVG) {
		dpv_set(buf, dt, i, acc);
		return;
	}
	switch (dt) {
	case YD_F64:
		dpv_set(buf, dt, i, acc / n);
		break;
	case YD_I32:
	case YD_I64:
		dpv_set(buf, dt, i, (double)((int64_t)acc / n));
		break;
	default: /* f32, f16, bf16 divide in float, then round */
		dpv_set(buf, dt, i, (double)((float)acc / (float)n));
	}
}

#endif
