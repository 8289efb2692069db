/* place.c: gang placement (see place.h). Greedy by tensor-parallel group in rank order:
 * nodes are visited in a fixed order (most free devices first, then id) and each node takes
 * as many whole TP groups as it can hold before the next node is tried. Greedy is optimal
 * for the question "does the gang fit" because every group has the same size: a node with
 * f free devices holds floor(f / tp) groups whichever groups they are. */
#include "scheduler/place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

static int node_eligible(const struct place_node *node, const struct place_request *req)
{
	if (!node->schedulable)
		return 0;
	if (req->require_cuda && node->kind != PLACE_DEVICE_CUDA)
		return 0;
	if (req->require_cpu && node->kind != PLACE_DEVICE_CPU)
		return 0;
	if (req->memory_mb > 0 && node->device_memory_mb > 0 &&
	    node->device_memory_mb < req->memory_mb)
		return 0;
	return 1;
}

int place_node_free(const struct place_node *node, const struct place_request *req)
{
	int free_count = 0;
	if (!node_eligible(node, req))
		return 0;
	for (int d = 0; d < node->n_devices; d++)
		if (!(node->busy_mask & (1ull << d)))
			free_count++;
	return free_count;
}

struct order_entry {
	int index;
	int free_devices;
	const char *id;
};

static int order_cmp(const void *a, const void *b)
{
	const struct order_entry *x = a, *y = b;
	if (x->free_devices != y->free_devices)
		return y->free_devices - x->free_devices;
	return strcmp(x->id, y->id);
}

int place_gang(struct place_node *nodes, int n_nodes, const struct place_request *req,
               struct place_slot *slots, char *reason, int reason_len)
{
	int ranks, groups, total_free = 0, group_room = 0, placed_groups = 0;
	struct order_entry *order;

	if (req->dp < 1 || req->tp < 1 || req->pp < 1) {
		snprintf(reason, (size_t)reason_len, "invalid layout dp=%d tp=%d pp=%d", req->dp,
		         req->tp, req->pp);
		return YARD_EINVAL;
	}
	ranks = req->dp * req->tp * req->pp;
	groups = req->dp * req->pp;
	if (req->tp > PLACE_MAX_DEVICES_PER_NODE) {
		snprintf(reason, (size_t)reason_len,
		         "tensor-parallel degree %d exceeds the %d devices a node can have",
		         req->tp, PLACE_MAX_DEVICES_PER_NODE);
		return YARD_EINVAL;
	}
	order = calloc((size_t)(n_nodes > 0 ? n_nodes : 1), sizeof *order);
	if (order == NULL)
		return YARD_ENOMEM;
	for (int i = 0; i < n_nodes; i++) {
		order[i].index = i;
		order[i].free_devices = place_node_free(&nodes[i], req);
		order[i].id = nodes[i].id;
		total_free += order[i].free_devices;
		group_room += order[i].free_devices / req->tp;
	}
	if (total_free < ranks) {
		snprintf(reason, (size_t)reason_len, "needs %d devices, %d free", ranks,
		         total_free);
		free(order);
		return YARD_ENOSPACE;
	}
	if (group_room < groups) {
		snprintf(
		    reason, (size_t)reason_len,
		    "needs %d groups of %d devices on one node (tensor parallel), nodes have room "
		    "for %d",
		    groups, req->tp, group_room);
		free(order);
		return YARD_ENOSPACE;
	}
	qsort(order, (size_t)n_nodes, sizeof *order, order_cmp);
	for (int o = 0; o < n_nodes && placed_groups < groups; o++) {
		struct place_node *node = &nodes[order[o].index];
		int fit = order[o].free_devices / req->tp;
		int device = 0;
		for (int g = 0; g < fit && placed_groups < groups; g++, placed_groups++) {
			for (int t = 0; t < req->tp; t++) {
				while (node->busy_mask & (1ull << device))
					device++;
				slots[placed_groups * req->tp + t].node = order[o].index;
				slots[placed_groups * req->tp + t].device = device;
				node->busy_mask |= 1ull << device;
			}
		}
	}
	free(order);
	reason[0] = '\0';
	return 0;
}

void place_release(struct place_node *nodes, int n_nodes, const struct place_slot *slots,
                   int n_slots)
{
	for (int i = 0; i < n_slots; i++)
		if (slots[i].node >= 0 && slots[i].node < n_nodes)
			nodes[slots[i].node].busy_mask &= ~(1ull << slots[i].device);
}
