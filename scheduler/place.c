/* place.c: gang placement (see place.h). Greedy by tensor-parallel group in rank order:
 * nodes are visited in a fixed order (most free devices first, then id) and each node takes
 * as many whole TP groups as it can hold before the next node is tried. Greedy is optimal
 * for the question "does the gang fit" because every group has the same size: a node with
 * f free devices holds floor(f / tp) groups whichever groups they are. Topology domains
 * (place.h) only put the domains first in that order: one that holds the whole gang (best
 * fit), else the roomiest ones. */
#include "scheduler/place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/err.h"

int place_node_eligible(const struct place_node *node, const struct place_request *req)
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
	if (!place_node_eligible(node, req))
		return 0;
	for (int d = 0; d < node->n_devices; d++)
		if (!(node->busy_mask & (1ull << d)))
			free_count++;
	return free_count;
}

int place_fits_empty(const struct place_node *nodes, int n_nodes, const struct place_request *req)
{
	int devices = 0, group_room = 0;
	if (req->dp < 1 || req->tp < 1 || req->pp < 1)
		return 0;
	for (int i = 0; i < n_nodes; i++) {
		int n = place_node_eligible(&nodes[i], req) ? nodes[i].n_devices : 0;
		devices += n;
		group_room += n / req->tp;
	}
	return devices >= req->dp * req->tp * req->pp && group_room >= req->dp * req->pp;
}

static int domain_of(const struct place_node *node)
{
	return node->domain > 0 && node->domain < PLACE_MAX_DOMAINS ? node->domain : 0;
}

static const int *sort_room; /* qsort has no context argument */

static int roomier_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	if (sort_room[x] != sort_room[y])
		return sort_room[y] - sort_room[x];
	return x - y;
}

/* The domains a gang visits, in order (place.h, Topology), from the tensor-parallel groups
 * each domain has room for: the one domain with the least room that holds all `groups`,
 * else every domain with room, the roomiest first (ties to the lower number). Returns how
 * many it wrote to order[]. */
static int domain_order(const int *room, int n_domains, int groups, int *order)
{
	int best = -1, n = 0;
	for (int d = 0; d < n_domains; d++)
		if (room[d] >= groups && (best < 0 || room[d] < room[best]))
			best = d;
	if (best >= 0) {
		order[0] = best;
		return 1;
	}
	for (int d = 0; d < n_domains; d++)
		if (room[d] > 0)
			order[n++] = d;
	sort_room = room;
	qsort(order, (size_t)n, sizeof *order, roomier_cmp);
	return n;
}

struct order_entry {
	int index;
	int rank; /* of the node's domain in the domain order */
	int free_devices;
	const char *id;
};

static int order_cmp(const void *a, const void *b)
{
	const struct order_entry *x = a, *y = b;
	if (x->rank != y->rank)
		return x->rank - y->rank;
	if (x->free_devices != y->free_devices)
		return y->free_devices - x->free_devices;
	return strcmp(x->id, y->id);
}

/* A request no cluster could place (a bad layout, a TP group wider than any node): YARD_EINVAL
 * with the reason; 0 otherwise. */
static int layout_check(const struct place_request *req, char *reason, int reason_len)
{
	if (req->dp < 1 || req->tp < 1 || req->pp < 1) {
		snprintf(reason, (size_t)reason_len, "invalid layout dp=%d tp=%d pp=%d", req->dp,
		         req->tp, req->pp);
		return YARD_EINVAL;
	}
	if (req->tp > PLACE_MAX_DEVICES_PER_NODE) {
		snprintf(reason, (size_t)reason_len,
		         "tensor-parallel degree %d exceeds the %d devices a node can have",
		         req->tp, PLACE_MAX_DEVICES_PER_NODE);
		return YARD_EINVAL;
	}
	return 0;
}

int place_gang(struct place_node *nodes, int n_nodes, const struct place_request *req,
               struct place_slot *slots, char *reason, int reason_len)
{
	int ranks, groups, total_free = 0, group_room = 0, placed_groups = 0;
	struct order_entry *order;

	int rc = layout_check(req, reason, reason_len);
	if (rc != 0)
		return rc;
	ranks = req->dp * req->tp * req->pp;
	groups = req->dp * req->pp;
	int n_domains = 1;
	for (int i = 0; i < n_nodes; i++)
		n_domains = YARD_MAX(n_domains, domain_of(&nodes[i]) + 1);
	order = calloc((size_t)(n_nodes > 0 ? n_nodes : 1), sizeof *order);
	int *room = calloc((size_t)n_domains * 3, sizeof *room);
	if (order == NULL || room == NULL) {
		free(order);
		free(room);
		return YARD_ENOMEM;
	}
	int *domains = room + n_domains, *rank_of = domains + n_domains;
	for (int i = 0; i < n_nodes; i++) {
		order[i].index = i;
		order[i].free_devices = place_node_free(&nodes[i], req);
		order[i].id = nodes[i].id;
		total_free += order[i].free_devices;
		group_room += order[i].free_devices / req->tp;
		room[domain_of(&nodes[i])] += order[i].free_devices / req->tp;
	}
	int n_order = domain_order(room, n_domains, groups, domains);
	for (int d = 0; d < n_domains; d++)
		rank_of[d] = n_order;
	for (int o = 0; o < n_order; o++)
		rank_of[domains[o]] = o;
	for (int i = 0; i < n_nodes; i++)
		order[i].rank = rank_of[domain_of(&nodes[i])];
	free(room);
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

/* ---- the per-pass index ---- */

#define PLACE_FREE_BUCKETS (PLACE_MAX_DEVICES_PER_NODE + 1)

struct place_class {
	enum place_device_kind kind;
	int64_t device_memory_mb;
	int representative;            /* a node of this class, for place_node_eligible */
	int count[PLACE_FREE_BUCKETS]; /* nodes of the class with f free devices */
};

struct place_index {
	struct place_node *nodes;
	int n_nodes;
	int *by_pos;   /* position in id order -> node index */
	int *pos_of;   /* node index -> position */
	int *class_of; /* node index -> class, -1: not schedulable */
	int *free_of;  /* node index -> free devices (of its n_devices) */
	struct place_class *classes; /* [cap_classes]: a handful (kinds × memory sizes) */
	int n_classes, cap_classes;
	int n_words;
	uint64_t *buckets; /* [f][word]: bit p set: the node at position p has f free */
	/* positions are in (domain, id) order: domain d holds positions [start[d], start[d+1]) */
	int n_domains;
	int *domain_start; /* [n_domains + 1] */
	int *room;         /* [n_domains], scratch of place_index_gang */
	int *order;        /* [n_domains], scratch of place_index_gang */
};

static int popcount_free(const struct place_node *n)
{
	int f = 0;
	for (int d = 0; d < n->n_devices; d++)
		if (!(n->busy_mask & (1ull << d)))
			f++;
	return f;
}

static struct place_node *sort_nodes; /* qsort has no context argument */

static int pos_cmp(const void *a, const void *b)
{
	const struct place_node *x = &sort_nodes[*(const int *)a],
	                        *y = &sort_nodes[*(const int *)b];
	if (domain_of(x) != domain_of(y))
		return domain_of(x) - domain_of(y);
	return strcmp(x->id, y->id);
}

static uint64_t *bucket_words(struct place_index *x, int f)
{
	return x->buckets + (size_t)f * (size_t)x->n_words;
}

static void index_set(struct place_index *x, int node, int f, int on)
{
	int p = x->pos_of[node];
	uint64_t *w = bucket_words(x, f);
	if (on)
		w[p / 64] |= 1ull << (p % 64);
	else
		w[p / 64] &= ~(1ull << (p % 64));
	x->classes[x->class_of[node]].count[f] += on ? 1 : -1;
}

void place_index_free(struct place_index *x)
{
	if (x == NULL)
		return;
	free(x->by_pos);
	free(x->pos_of);
	free(x->class_of);
	free(x->free_of);
	free(x->classes);
	free(x->buckets);
	free(x->domain_start);
	free(x);
}

void place_index_hold(struct place_index *x, int node, int device)
{
	struct place_node *n = &x->nodes[node];
	if (device < 0 || device >= n->n_devices || (n->busy_mask & (1ull << device)))
		return;
	if (x->class_of[node] >= 0)
		index_set(x, node, x->free_of[node], 0);
	n->busy_mask |= 1ull << device;
	x->free_of[node]--;
	if (x->class_of[node] >= 0)
		index_set(x, node, x->free_of[node], 1);
}

struct place_index *place_index_build(struct place_node *nodes, int n_nodes)
{
	struct place_index *x = calloc(1, sizeof *x);
	size_t n = (size_t)(n_nodes > 0 ? n_nodes : 1);
	if (x == NULL)
		return NULL;
	x->nodes = nodes;
	x->n_nodes = n_nodes;
	x->n_words = (n_nodes + 63) / 64 + 1;
	x->by_pos = malloc(n * sizeof *x->by_pos);
	x->pos_of = malloc(n * sizeof *x->pos_of);
	x->class_of = malloc(n * sizeof *x->class_of);
	x->free_of = malloc(n * sizeof *x->free_of);
	/* grown as classes appear: one per node up front was 2.8 MB to zero per pass at
	 * 10,000 nodes */
	x->cap_classes = 8;
	x->classes = calloc((size_t)x->cap_classes, sizeof *x->classes);
	x->buckets = calloc((size_t)PLACE_FREE_BUCKETS * (size_t)x->n_words, sizeof *x->buckets);
	if (x->by_pos == NULL || x->pos_of == NULL || x->class_of == NULL || x->free_of == NULL ||
	    x->classes == NULL || x->buckets == NULL) {
		place_index_free(x);
		return NULL;
	}
	x->n_domains = 1;
	for (int i = 0; i < n_nodes; i++)
		x->n_domains = YARD_MAX(x->n_domains, domain_of(&nodes[i]) + 1);
	x->domain_start = calloc((size_t)x->n_domains * 3 + 1, sizeof *x->domain_start);
	if (x->domain_start == NULL) {
		place_index_free(x);
		return NULL;
	}
	x->room = x->domain_start + x->n_domains + 1;
	x->order = x->room + x->n_domains;
	int sorted = 1;
	sort_nodes = nodes;
	for (int i = 0; i < n_nodes; i++) {
		x->by_pos[i] = i;
		if (i > 0 && sorted && pos_cmp(&(int){i - 1}, &(int){i}) > 0)
			sorted = 0;
		x->domain_start[domain_of(&nodes[i]) + 1]++;
	}
	if (!sorted) /* callers that keep their nodes in (domain, id) order skip this */
		qsort(x->by_pos, (size_t)n_nodes, sizeof *x->by_pos, pos_cmp);
	for (int d = 0; d < x->n_domains; d++)
		x->domain_start[d + 1] += x->domain_start[d];
	for (int p = 0; p < n_nodes; p++)
		x->pos_of[x->by_pos[p]] = p;
	for (int i = 0; i < n_nodes; i++) {
		const struct place_node *node = &nodes[i];
		x->class_of[i] = -1;
		x->free_of[i] = popcount_free(node);
		if (!node->schedulable)
			continue;
		int c;
		for (c = 0; c < x->n_classes; c++)
			if (x->classes[c].kind == node->kind &&
			    x->classes[c].device_memory_mb == node->device_memory_mb)
				break;
		if (c == x->n_classes) {
			if (c == x->cap_classes) {
				struct place_class *grown =
				    realloc(x->classes, 2 * (size_t)c * sizeof *grown);
				if (grown == NULL) {
					place_index_free(x);
					return NULL;
				}
				memset(grown + c, 0, (size_t)c * sizeof *grown);
				x->classes = grown;
				x->cap_classes = 2 * c;
			}
			x->classes[c].kind = node->kind;
			x->classes[c].device_memory_mb = node->device_memory_mb;
			x->classes[c].representative = i;
			x->n_classes++;
		}
		x->class_of[i] = c;
		index_set(x, i, x->free_of[i], 1);
	}
	return x;
}

int place_index_gang(struct place_index *x, const struct place_request *req,
                     struct place_slot *slots, char *reason, int reason_len)
{
	int ranks, groups, total_free = 0, group_room = 0;
	int eligible[64], n_eligible = 0, many = 0;

	int rc = layout_check(req, reason, reason_len);
	if (rc != 0)
		return rc;
	ranks = req->dp * req->tp * req->pp;
	groups = req->dp * req->pp;
	/* totals over the eligible classes: what place_gang sums node by node */
	for (int c = 0; c < x->n_classes; c++) {
		if (!place_node_eligible(&x->nodes[x->classes[c].representative], req))
			continue;
		if (n_eligible < 64)
			eligible[n_eligible++] = c;
		else
			many = 1;
		for (int f = 1; f < PLACE_FREE_BUCKETS; f++) {
			total_free += f * x->classes[c].count[f];
			group_room += f / req->tp * x->classes[c].count[f];
		}
	}
	if (total_free < ranks) {
		snprintf(reason, (size_t)reason_len, "needs %d devices, %d free", ranks,
		         total_free);
		return YARD_ENOSPACE;
	}
	if (group_room < groups) {
		snprintf(
		    reason, (size_t)reason_len,
		    "needs %d groups of %d devices on one node (tensor parallel), nodes have room "
		    "for %d",
		    groups, req->tp, group_room);
		return YARD_ENOSPACE;
	}
	/* Domain by domain in the domain order; within one, most free devices first, then id:
	 * buckets from the top, the domain's positions in id order. The nodes are chosen first
	 * and changed afterwards, as place_gang sorts before placing. */
	int *chosen = malloc((size_t)groups * 2 * sizeof *chosen), *chosen_fit = chosen + groups;
	int n_chosen = 0, room = 0;
	if (chosen == NULL)
		return YARD_ENOMEM;
	/* each domain's room: one pass over the positions, which are in (domain, id) order,
	 * and only for a gang that fits and a cluster with domains */
	x->room[0] = group_room;
	if (x->n_domains > 1)
		for (int d = 0; d < x->n_domains; d++) {
			x->room[d] = 0;
			for (int p = x->domain_start[d]; p < x->domain_start[d + 1]; p++) {
				int node = x->by_pos[p];
				if (x->class_of[node] >= 0 &&
				    place_node_eligible(&x->nodes[node], req))
					x->room[d] += x->free_of[node] / req->tp;
			}
		}
	int n_order = domain_order(x->room, x->n_domains, groups, x->order);
	for (int o = 0; o < n_order && room < groups; o++) {
		int start = x->domain_start[x->order[o]], end = x->domain_start[x->order[o] + 1];
		if (start == end)
			continue;
		for (int f = PLACE_MAX_DEVICES_PER_NODE; f >= req->tp && room < groups; f--) {
			const uint64_t *w = bucket_words(x, f);
			for (int k = start / 64; k <= (end - 1) / 64 && room < groups; k++) {
				uint64_t bits = w[k];
				if (k == start / 64)
					bits &= ~0ull << (start % 64);
				if (k == (end - 1) / 64 && end % 64 != 0)
					bits &= ~(~0ull << (end % 64));
				while (bits != 0 && room < groups) {
					int p = k * 64 + __builtin_ctzll(bits);
					bits &= bits - 1;
					int node = x->by_pos[p];
					int c = x->class_of[node], ok = many;
					for (int e = 0; e < n_eligible && !ok; e++)
						ok = eligible[e] == c;
					if (!ok || !place_node_eligible(&x->nodes[node], req))
						continue;
					chosen[n_chosen] = node;
					chosen_fit[n_chosen++] = f / req->tp;
					room += f / req->tp;
				}
			}
		}
	}
	int placed_groups = 0;
	for (int o = 0; o < n_chosen && placed_groups < groups; o++) {
		int index = chosen[o];
		struct place_node *node = &x->nodes[index];
		int device = 0;
		index_set(x, index, x->free_of[index], 0);
		for (int g = 0; g < chosen_fit[o] && placed_groups < groups; g++, placed_groups++) {
			for (int t = 0; t < req->tp; t++) {
				while (node->busy_mask & (1ull << device))
					device++;
				slots[placed_groups * req->tp + t].node = index;
				slots[placed_groups * req->tp + t].device = device;
				node->busy_mask |= 1ull << device;
				x->free_of[index]--;
			}
		}
		index_set(x, index, x->free_of[index], 1);
	}
	free(chosen);
	reason[0] = '\0';
	return 0;
}
