/* reduce.h: elementwise reductions for every yd_dtype x yd_op, and the f16/bf16 conversions.
 * YD_AVG reduces as a sum; the caller divides once at the end (reduce_finish_avg). */
#ifndef YD_REDUCE_H
#define YD_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "dataplane/yd.h"

/* dst[i] = a[i] op b[i] for i < count. dst may alias a or b (in-place). AVG sums. */
void reduce_apply(void *dst, const void *a, const void *b, size_t count, enum yd_dtype dt,
                  enum yd_op op);
/* For YD_AVG: buf[i] /= world_size (integer dtypes: C integer division, truncating toward 0).
 * No-op for every other op. */
void reduce_finish_avg(void *buf, size_t count, enum yd_dtype dt, enum yd_op op, int world_size);

float reduce_f16_to_float(uint16_t h);
uint16_t reduce_float_to_f16(float f); /* round to nearest even; overflow to inf */
float reduce_bf16_to_float(uint16_t h);
uint16_t reduce_float_to_bf16(float f); /* round to nearest even; NaN stays NaN */

#endif
