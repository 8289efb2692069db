/* transport_rdma.c: RDMA verbs device discovery. Compiled only with libibverbs; asked at
 * init whether a device exists so the choice (and the fallback to TCP) is logged. The RDMA
 * data path itself is not implemented yet (README, Known limitations). */
#include "config.h"

#include "dataplane/dp.h"

#ifdef HAVE_IBVERBS
#include <infiniband/verbs.h>

int dp_rdma_device_present(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (list)
		ibv_free_device_list(list);
	return n > 0;
}
#else
int dp_rdma_device_present(void)
{
	return 0;
}
#endif
