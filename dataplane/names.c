/* names.c: names and parsers for the public enums of yd.h (dtype, op, algorithm, transport). */
#include "config.h"

#include <string.h>

#include "dataplane/yd.h"

static const char *const dtype_names[YD_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i32", "i64"};
static const size_t dtype_sizes[YD_DTYPE_COUNT] = {4, 8, 2, 2, 4, 8};
static const char *const op_names[YD_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};
static const char *const algo_names[YD_ALGO_COUNT] = {"auto", "ring",  "rd", "hd",
                                                      "tree", "naive", "ps", "hier"};
static const char *const transport_names[YD_TRANSPORT_COUNT] = {"auto", "shm", "tcp", "rdma"};

const char *yd_dtype_name(enum yd_dtype d)
{
	return (unsigned)d < YD_DTYPE_COUNT ? dtype_names[d] : "?";
}

size_t yd_dtype_size(enum yd_dtype d)
{
	return (unsigned)d < YD_DTYPE_COUNT ? dtype_sizes[d] : 0;
}

const char *yd_op_name(enum yd_op op)
{
	return (unsigned)op < YD_OP_COUNT ? op_names[op] : "?";
}

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

const char *yd_transport_name(enum yd_transport t)
{
	return (unsigned)t < YD_TRANSPORT_COUNT ? transport_names[t] : "?";
}

int yd_transport_parse(const char *name)
{
	for (int i = 0; name && i < YD_TRANSPORT_COUNT; i++)
		if (strcmp(name, transport_names[i]) == 0)
			return i;
	return -1;
}
