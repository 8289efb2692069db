/* place.h: gang placement of one job onto the free devices of the cluster's nodes.
 *
 * Pure functions over plain arrays (no raft, no SQLite), so the leader's scheduling pass and
 * the tests run the same code. A job is placed whole or not at all (gang): every rank gets a
 * device, or nothing changes and the reason says what is missing.
 *
 * Layout (DESIGN.md §5): rank = (dp_i * pp + pp_i) * tp + tp_i. A tensor-parallel group (tp
 * consecutive ranks) is the unit of placement and never spans nodes. Units are placed in rank
 * order, filling a node before moving on, so pipeline neighbours and data-parallel replicas
 * land together when they fit.
 *
 * Topology: a node's domain (its switch, rack or NVLink domain: the value of the leader's
 * topology label) groups nodes whose links are fast to one another. A gang goes into one
 * domain whenever one has room for it, the one with the least room that fits (best fit,
 * which keeps larger domains whole for larger gangs; ties to the lower domain number);
 * otherwise it spans domains, taking the domains with the most room first, so it spans as
 * few as it can and its ranks fill one domain before the next. Domains never decide whether
 * a gang fits, only where it goes. With every node in domain 0 (no label) placement is what
 * it was without domains.
 */
#ifndef YARD_SCHED_PLACE_H
#define YARD_SCHED_PLACE_H

#include <stdint.h>

#define PLACE_MAX_DEVICES_PER_NODE 64
#define PLACE_NODE_ID_MAX 63

enum place_device_kind { PLACE_DEVICE_CPU, PLACE_DEVICE_CUDA };

struct place_node {
	char id[PLACE_NODE_ID_MAX + 1];
	int schedulable; /* up and not cordoned/draining */
	enum place_device_kind kind;
	int n_devices;            /* ≤ PLACE_MAX_DEVICES_PER_NODE */
	uint64_t busy_mask;       /* bit d set: device d is assigned to some rank */
	int64_t device_memory_mb; /* per device, 0 = unknown (no memory check) */
	int domain;               /* topology domain, 0..PLACE_MAX_DOMAINS-1 (0: unlabelled) */
};

#define PLACE_MAX_DOMAINS 4096 /* a node beyond it counts as domain 0 */

/* (queue.c's same_request compares every field: keep it in step) */
struct place_request {
	int dp, tp, pp;
	int require_cuda;  /* 1: only CUDA nodes; 0: any */
	int require_cpu;   /* 1: only CPU nodes */
	int64_t memory_mb; /* per device, 0 = no requirement */
};

struct place_slot {
	int node;   /* index into the nodes array */
	int device; /* device index on that node */
};

/* Places ranks = dp*tp*pp ranks. On success returns 0, fills slots[rank] and marks the
 * devices busy in nodes[].busy_mask. Otherwise returns YARD_ENOSPACE (or YARD_EINVAL for an
 * impossible request), leaves nodes unchanged and writes a reason such as
 * "needs 8 devices, 6 free" or "needs 2 groups of 4 devices on one node (tensor parallel),
 * nodes have room for 1". Deterministic: the same input gives the same placement. */
int place_gang(struct place_node *nodes, int n_nodes, const struct place_request *req,
               struct place_slot *slots, char *reason, int reason_len);

/* Whether the request would fit if every device of the schedulable nodes were free (the
 * same counting as place_gang: devices, then tensor-parallel groups per node). */
int place_fits_empty(const struct place_node *nodes, int n_nodes, const struct place_request *req);

/* Whether a node may take the request's ranks: schedulable, its device kind and memory. */
int place_node_eligible(const struct place_node *node, const struct place_request *req);

/* Free devices of a node that meet the request's device kind and memory. */
int place_node_free(const struct place_node *node, const struct place_request *req);

/* A free-device index over a node array for one scheduling pass: nodes bucketed by their
 * number of free devices (in id order within a bucket) and per-class (device kind, memory)
 * counts, so a gang that does not fit is refused in O(classes) instead of a scan of every
 * node, and one that fits visits only the nodes it lands on plus its bucket words, instead
 * of sorting every node. place_index_gang gives exactly the slots and reasons place_gang
 * gives on the same nodes (tests/unit/test_place.c checks that on random clusters) and keeps
 * the nodes' busy masks up to date; the nodes must not change otherwise while it lives. */
struct place_index;
struct place_index *place_index_build(struct place_node *nodes, int n_nodes);
int place_index_gang(struct place_index *x, const struct place_request *req,
                     struct place_slot *slots, char *reason, int reason_len);
void place_index_free(struct place_index *x);
/* Marks device of node busy (no-op when it already is), keeping the index in step: devices
 * held for a job that is not placed yet (queue.h, hold). */
void place_index_hold(struct place_index *x, int node, int device);

/* Releases the devices of a placement (marks them free). */
void place_release(struct place_node *nodes, int n_nodes, const struct place_slot *slots,
                   int n_slots);

#endif
