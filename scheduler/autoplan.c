/* autoplan.c: job spec + node rows + measured rates → planner input and JSON answers (see
 * autoplan.h). */
#include "scheduler/autoplan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonx.h"
#include "jobs/fsm.h"

/* what a node name is made of (fsm_valid_name) */
#define NODE_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."

/* the exchange costs a probe measures (probe.h): optional, 0 when not measured */
#define PERF_SYNC_KEYS                                                                        \
	"intra_sync_s", "intra_busy_sync_s", "intra_sync_cpu_s", "intra_busy_sync_cpu_s",    \
	    "intra_allreduce_sync_s", "intra_allreduce_sync_cpu_s",                           \
	    "intra_busy_allreduce_sync_cpu_s"

json_t *autoplan_perf_clean(const json_t *perf, struct yard_err *err)
{
	static const char *const sync_keys[] = {PERF_SYNC_KEYS, NULL};
	static const char *const keys[] = {"flops_per_s",
	                                   "gemm",
	                                   "block",
	                                   "optim_s_per_param",
	                                   "parallel_efficiency",
	                                   "availability",
	                                   "devices",
	                                   "intra_bw_bytes_per_s",
	                                   "intra_latency_s",
	                                   "intra_busy_latency_s",
	                                   PERF_SYNC_KEYS,
	                                   "tcp_bw_bytes_per_s",
	                                   "tcp_latency_s",
	                                   "inter_bw_bytes_per_s",
	                                   "inter_latency_s",
	                                   "inter_source",
	                                   "device_memory_mb",
	                                   "probe_ms",
	                                   NULL};
	static const char *const positive[] = {"flops_per_s", "intra_bw_bytes_per_s",
	                                       "inter_bw_bytes_per_s", NULL};
	double v = 0, eff = 1, avail = 1, intra_lat = 0, inter_lat = 0, busy_lat = 0;
	int64_t memory_mb = 0, probe_ms = 0;
	const char *source = "configured";
	if (!json_is_object(perf)) {
		yard_err_set(err, YARD_EINVAL, "perf: must be an object");
		return NULL;
	}
	if (jsonx_only_keys(perf, "perf", keys, err) != 0 ||
	    jsonx_get_double(perf, "perf", "parallel_efficiency", 0, 1e-6, 1, &eff, err) != 0 ||
	    jsonx_get_double(perf, "perf", "availability", 0, 1e-6, 1, &avail, err) != 0 ||
	    jsonx_get_double(perf, "perf", "intra_latency_s", 0, 0, 10, &intra_lat, err) != 0 ||
	    jsonx_get_double(perf, "perf", "inter_latency_s", 0, 0, 10, &inter_lat, err) != 0 ||
	    jsonx_get_double(perf, "perf", "intra_busy_latency_s", 0, 0, 10, &busy_lat, err) != 0 ||
	    jsonx_get_int(perf, "perf", "device_memory_mb", 0, 0, 1LL << 40, &memory_mb, err) !=
	        0 ||
	    jsonx_get_int(perf, "perf", "probe_ms", 0, 0, 3600000, &probe_ms, err) != 0 ||
	    jsonx_get_string(perf, "perf", "inter_source", 0, 9 + FSM_NAME_MAX, &source, err) != 0)
		return NULL;
	/* "configured" (--link-gbps), "tcp-loopback" (no peer measured yet) or
	 * "measured:PEER" (a link probe to node PEER, which then also names a latency) */
	int measured = strncmp(source, "measured:", 9) == 0;
	if (!measured && strcmp(source, "configured") != 0 && strcmp(source, "tcp-loopback") != 0) {
		yard_err_set(err, YARD_EINVAL,
		             "perf.inter_source: '%s' is not configured, tcp-loopback or "
		             "measured:NODE",
		             source);
		return NULL;
	}
	if (measured &&
	    (source[9] == '\0' || strspn(source + 9, NODE_NAME_CHARS) != strlen(source + 9))) {
		yard_err_set(
		    err, YARD_EINVAL,
		    "perf.inter_source: '%s' does not name a node after measured:", source);
		return NULL;
	}
	if (measured && !(inter_lat > 0)) {
		yard_err_set(err, YARD_EINVAL,
		             "perf.inter_latency_s: a measured link (inter_source %s) needs a "
		             "positive latency",
		             source);
		return NULL;
	}
	json_t *out = json_pack("{s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:s}", "parallel_efficiency", eff,
	                        "availability", avail, "intra_latency_s", intra_lat,
	                        "intra_busy_latency_s", busy_lat, "inter_latency_s", inter_lat,
	                        "device_memory_mb", (json_int_t)memory_mb, "probe_ms",
	                        (json_int_t)probe_ms, "inter_source", source);
	/* the exchange costs (probe.h): optional, 0 when not measured */
	for (int i = 0; sync_keys[i] != NULL; i++) {
		double x = 0;
		if (jsonx_get_double(perf, "perf", sync_keys[i], 0, 0, 10, &x, err) != 0) {
			json_decref(out);
			return NULL;
		}
		json_object_set_new(out, sync_keys[i], json_real(x));
	}
	for (int i = 0; positive[i] != NULL; i++) {
		if (jsonx_get_double(perf, "perf", positive[i], 1, 1e-300, 1e300, &v, err) != 0) {
			json_decref(out);
			return NULL;
		}
		json_object_set_new(out, positive[i], json_real(v));
	}
	static const char *const block_keys[] = {"mac_s",  "weight_s",  "hidden_s", "model_s",
	                                         "call_s", "fit_error", NULL};
	static const char *const optim_keys[] = {"adamw", "sgd", NULL};
	const struct {
		const char *key, *prefix;
		const char *const *fields;
	} parts[] = {{"block", "perf.block", block_keys},
	             {"optim_s_per_param", "perf.optim_s_per_param", optim_keys}};
	for (size_t p = 0; p < 2; p++) {
		const json_t *part = json_object_get(perf, parts[p].key);
		if (part == NULL)
			continue;
		if (!json_is_object(part) ||
		    jsonx_only_keys(part, parts[p].prefix, parts[p].fields, err) != 0) {
			if (err->code == 0)
				yard_err_set(err, YARD_EINVAL, "%s: must be an object",
				             parts[p].prefix);
			json_decref(out);
			return NULL;
		}
		json_t *clean = json_object();
		for (int i = 0; parts[p].fields[i] != NULL; i++) {
			if (jsonx_get_double(part, parts[p].prefix, parts[p].fields[i], 1, 0, 1e6,
			                     &v, err) != 0) {
				json_decref(clean);
				json_decref(out);
				return NULL;
			}
			json_object_set_new(clean, parts[p].fields[i], json_real(v));
		}
		json_object_set_new(out, parts[p].key, clean);
	}
	const json_t *gemm = json_object_get(perf, "gemm");
	if (gemm != NULL) {
		size_t i;
		json_t *point;
		double last = 0;
		if (!json_is_array(gemm) || json_array_size(gemm) > PLAN_RATE_POINTS_MAX) {
			json_decref(out);
			yard_err_set(err, YARD_EINVAL,
			             "perf.gemm: must be an array of at most %d [call_flops, "
			             "flops_per_s] pairs",
			             PLAN_RATE_POINTS_MAX);
			return NULL;
		}
		json_array_foreach(gemm, i, point)
		{
			double x = json_number_value(json_array_get(point, 0));
			double y = json_number_value(json_array_get(point, 1));
			if (!json_is_array(point) || json_array_size(point) != 2 || !(x > last) ||
			    !(y > 0) || !isfinite(x) || !isfinite(y)) {
				json_decref(out);
				yard_err_set(
				    err, YARD_EINVAL,
				    "perf.gemm[%zu]: want [call_flops, flops_per_s], positive, "
				    "call_flops ascending",
				    i);
				return NULL;
			}
			last = x;
		}
		json_object_set_new(out, "gemm", json_deep_copy(gemm));
	}
	return out;
}

void autoplan_model(const struct jobspec *spec, struct plan_model *out)
{
	memset(out, 0, sizeof *out);
	out->d_in = spec->model.d_in;
	out->d_model = spec->model.d_model;
	out->d_ff = spec->model.d_ff;
	out->layers = spec->model.layers;
	out->classes = spec->model.classes;
	out->batch_size = spec->train.batch_size;
	out->adamw = spec->train.optimizer == JOBSPEC_ADAMW;
	out->bucket_bytes = spec->train.bucket_mb * 1024 * 1024;
}

static double num(const json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

/* Whether a node row can take part in a plan for jobs of device kind `device`: NODE_PLANNABLE
 * (its rates in *perf, its kind in *cuda) or why not. */
enum node_use { NODE_PLANNABLE, NODE_UNSCHEDULABLE, NODE_OTHER_KIND, NODE_UNMEASURED };

static enum node_use node_use(const json_t *node, const json_t *perf_by_node,
                              enum jobspec_device device, const json_t **perf, int *cuda)
{
	const char *id = json_string_value(json_object_get(node, "id"));
	const char *kind = json_string_value(
	    json_object_get(json_array_get(json_object_get(node, "devices"), 0), "kind"));
	const char *state = json_string_value(json_object_get(node, "state"));
	*cuda = kind != NULL && strcmp(kind, "cuda") == 0;
	*perf = id ? json_object_get(perf_by_node, id) : NULL;
	if (state == NULL || strcmp(state, "up") != 0 ||
	    json_is_true(json_object_get(node, "cordoned")))
		return NODE_UNSCHEDULABLE;
	if ((device == JOBSPEC_DEVICE_CUDA && !*cuda) || (device == JOBSPEC_DEVICE_CPU && *cuda))
		return NODE_OTHER_KIND;
	return *perf == NULL ? NODE_UNMEASURED : NODE_PLANNABLE;
}

void autoplan_devices(const json_t *nodes, const json_t *perf_by_node, int *cpu, int *cuda)
{
	size_t i;
	json_t *node;
	*cpu = *cuda = 0;
	json_array_foreach(nodes, i, node)
	{
		const json_t *perf;
		int is_cuda;
		if (node_use(node, perf_by_node, JOBSPEC_DEVICE_ANY, &perf, &is_cuda) ==
		    NODE_PLANNABLE)
			*(is_cuda ? cuda : cpu) +=
			    (int)json_array_size(json_object_get(node, "devices"));
	}
}

/* autoplan_cluster's view leaving out the plannable nodes measured below min_flops (0: none
 * left out). */
static int cluster_view(const json_t *nodes, const json_t *perf_by_node, const struct jobspec *spec,
                        double min_flops, struct plan_cluster *k, struct yard_err *err)
{
	size_t i;
	json_t *node;
	int unmeasured = 0, other_kind = 0, unschedulable = 0;
	const json_t *slowest = NULL;
	memset(k, 0, sizeof *k);
	json_array_foreach(nodes, i, node)
	{
		const json_t *devices = json_object_get(node, "devices");
		const json_t *perf;
		int cuda, n = (int)json_array_size(devices);
		enum node_use use = node_use(node, perf_by_node, spec->device, &perf, &cuda);
		if (use == NODE_UNSCHEDULABLE)
			unschedulable++;
		else if (use == NODE_OTHER_KIND)
			other_kind++;
		else if (use == NODE_UNMEASURED)
			unmeasured++;
		if (use != NODE_PLANNABLE || num(perf, "flops_per_s") < min_flops)
			continue;
		int64_t memory_mb =
		    json_integer_value(json_object_get(json_array_get(devices, 0), "memory_mb"));
		if (memory_mb <= 0)
			memory_mb = json_integer_value(json_object_get(perf, "device_memory_mb"));
		double memory = (double)memory_mb * 1048576.0;
		double inter_lat = num(perf, "inter_latency_s");
		if (!cuda)
			k->host_compute = 1; /* CPU devices: ranks compute on the host's cores */
		k->devices += n;
		if (n > k->devices_per_node)
			k->devices_per_node = n;
		if (k->device_memory_bytes == 0 || memory < k->device_memory_bytes)
			k->device_memory_bytes = memory;
		if (slowest == NULL || num(perf, "flops_per_s") < num(slowest, "flops_per_s"))
			slowest = perf;
		if (k->intra_bw_bytes_per_s == 0 ||
		    num(perf, "intra_bw_bytes_per_s") < k->intra_bw_bytes_per_s)
			k->intra_bw_bytes_per_s = num(perf, "intra_bw_bytes_per_s");
		if (k->inter_bw_bytes_per_s == 0 ||
		    num(perf, "inter_bw_bytes_per_s") < k->inter_bw_bytes_per_s)
			k->inter_bw_bytes_per_s = num(perf, "inter_bw_bytes_per_s");
		k->latency_s = fmax(k->latency_s, num(perf, "intra_latency_s"));
		k->busy_latency_s = fmax(k->busy_latency_s, num(perf, "intra_busy_latency_s"));
		k->sync_s = fmax(k->sync_s, num(perf, "intra_sync_s"));
		k->busy_sync_s = fmax(k->busy_sync_s, num(perf, "intra_busy_sync_s"));
		k->sync_cpu_s = fmax(k->sync_cpu_s, num(perf, "intra_sync_cpu_s"));
		k->busy_sync_cpu_s = fmax(k->busy_sync_cpu_s, num(perf, "intra_busy_sync_cpu_s"));
		k->allreduce_sync_s =
		    fmax(k->allreduce_sync_s, num(perf, "intra_allreduce_sync_s"));
		k->allreduce_sync_cpu_s =
		    fmax(k->allreduce_sync_cpu_s, num(perf, "intra_allreduce_sync_cpu_s"));
		k->busy_allreduce_sync_cpu_s = fmax(k->busy_allreduce_sync_cpu_s,
		                                    num(perf, "intra_busy_allreduce_sync_cpu_s"));
		if (json_is_number(json_object_get(perf, "intra_allreduce_sync_s")))
			k->allreduce_measured = 1; /* a measured 0 is a figure, not an absence */
		k->inter_latency_s = fmax(k->inter_latency_s, inter_lat);
		if (k->parallel_efficiency == 0 ||
		    num(perf, "parallel_efficiency") < k->parallel_efficiency)
			k->parallel_efficiency = num(perf, "parallel_efficiency");
		if (k->availability == 0 || num(perf, "availability") < k->availability)
			k->availability = num(perf, "availability");
	}
	if (slowest == NULL)
		return yard_err_set(err, YARD_ENOSPACE,
		                    "no node to plan for: %d up node(s) of the job's device kind "
		                    "have not reported measured rates yet, %d are of another "
		                    "kind, %d are not up or cordoned",
		                    unmeasured, other_kind, unschedulable);
	if (spec->ranks > 0 && spec->ranks < k->devices)
		k->devices = spec->ranks;
	k->flops_per_s = num(slowest, "flops_per_s");
	const json_t *block = json_object_get(slowest, "block");
	const json_t *optim = json_object_get(slowest, "optim_s_per_param");
	k->block_mac_s = num(block, "mac_s");
	k->block_weight_s = num(block, "weight_s");
	k->block_hidden_s = num(block, "hidden_s");
	k->block_model_s = num(block, "model_s");
	k->block_call_s = num(block, "call_s");
	k->adamw_s_per_param = num(optim, "adamw");
	k->sgd_s_per_param = num(optim, "sgd");
	const json_t *gemm = json_object_get(slowest, "gemm");
	json_t *point;
	json_array_foreach(gemm, i, point)
	{
		if (k->rate_points == PLAN_RATE_POINTS_MAX)
			break;
		k->rate_call_flops[k->rate_points] = json_number_value(json_array_get(point, 0));
		k->rate_flops_per_s[k->rate_points] = json_number_value(json_array_get(point, 1));
		k->rate_points++;
	}
	if (k->device_memory_bytes <= 0)
		return yard_err_set(err, YARD_ENOSPACE,
		                    "no node to plan for: device memory is unknown (neither the "
		                    "node's devices nor its perf give memory_mb)");
	return 0;
}

int autoplan_cluster(const json_t *nodes, const json_t *perf_by_node, const struct jobspec *spec,
                     struct plan_cluster *k, struct yard_err *err)
{
	return cluster_view(nodes, perf_by_node, spec, 0, k, err);
}

static json_t *layout_json(const struct plan_candidate *c)
{
	return json_pack("{s:i,s:i,s:i,s:s,s:i,s:i}", "dp", c->dp, "tp", c->tp, "pp", c->pp,
	                 "schedule", plan_schedule_name(c->schedule), "virtual_stages", c->v,
	                 "micro_batches", c->m);
}

static json_t *candidate_json(const struct plan_candidate *c)
{
	json_t *o =
	    json_pack("{s:o,s:i}", "layout", layout_json(c), "world", c->dp * c->tp * c->pp);
	json_object_set_new(o, "step_ms", json_real(c->step_s * 1e3));
	json_object_set_new(o, "compute_ms", json_real(c->compute_s * 1e3));
	json_object_set_new(o, "tp_comm_ms", json_real(c->tp_comm_s * 1e3));
	json_object_set_new(o, "pp_comm_ms", json_real(c->pp_comm_s * 1e3));
	json_object_set_new(o, "dp_comm_ms", json_real(c->dp_comm_s * 1e3));
	json_object_set_new(o, "dp_exposed_ms", json_real(c->dp_exposed_s * 1e3));
	json_object_set_new(o, "loss_comm_ms", json_real(c->loss_comm_s * 1e3));
	json_object_set_new(o, "optim_ms", json_real(c->optim_s * 1e3));
	json_object_set_new(o, "bubble_fraction", json_real(c->bubble_fraction));
	json_object_set_new(o, "memory_mb", json_real(c->memory_bytes / 1048576.0));
	json_object_set_new(o, "comm_mb", json_real(c->comm_bytes / 1048576.0));
	return o;
}

static json_t *cluster_json(const struct plan_cluster *k)
{
	json_t *o =
	    json_pack("{s:i,s:i}", "devices", k->devices, "devices_per_node", k->devices_per_node);
	json_object_set_new(o, "device_memory_mb", json_real(k->device_memory_bytes / 1048576.0));
	json_object_set_new(o, "flops_per_s", json_real(k->flops_per_s));
	json_object_set_new(o, "parallel_efficiency",
	                    json_real(k->parallel_efficiency > 0 ? k->parallel_efficiency : 1));
	json_object_set_new(o, "availability",
	                    json_real(k->availability > 0 ? k->availability : 1));
	json_object_set_new(o, "intra_bw_bytes_per_s", json_real(k->intra_bw_bytes_per_s));
	json_object_set_new(o, "inter_bw_bytes_per_s", json_real(k->inter_bw_bytes_per_s));
	json_object_set_new(o, "intra_latency_s", json_real(k->latency_s));
	json_object_set_new(o, "intra_busy_latency_s", json_real(k->busy_latency_s));
	json_object_set_new(o, "intra_sync_s", json_real(k->sync_s));
	json_object_set_new(o, "intra_busy_sync_s", json_real(k->busy_sync_s));
	json_object_set_new(o, "intra_sync_cpu_s", json_real(k->sync_cpu_s));
	json_object_set_new(o, "intra_busy_sync_cpu_s", json_real(k->busy_sync_cpu_s));
	json_object_set_new(o, "intra_allreduce_sync_s", json_real(k->allreduce_sync_s));
	json_object_set_new(o, "intra_allreduce_sync_cpu_s", json_real(k->allreduce_sync_cpu_s));
	json_object_set_new(o, "intra_busy_allreduce_sync_cpu_s",
	                    json_real(k->busy_allreduce_sync_cpu_s));
	json_object_set_new(o, "intra_allreduce_measured", json_boolean(k->allreduce_measured));
	json_object_set_new(o, "host_compute", json_boolean(k->host_compute));
	json_object_set_new(o, "inter_latency_s", json_real(k->inter_latency_s));
	return o;
}

int autoplan_capacity(const json_t *spec_json, const json_t *nodes, const json_t *perf_by_node)
{
	struct jobspec spec;
	struct plan_cluster cluster;
	struct yard_err err = {0};
	if (jobspec_parse(spec_json, &spec, &err) != 0)
		return -1;
	int rc = autoplan_cluster(nodes, perf_by_node, &spec, &cluster, &err);
	jobspec_free(&spec);
	return rc == 0 ? cluster.devices : 0;
}

/* The plannable nodes of spec's kind measured below AUTOPLAN_SLOW_RATIO of the fastest one's
 * FLOP rate: their ids (a new array; NULL when there is none), the fastest rate and the
 * slowest node's fraction of it. */
static json_t *slow_nodes(const json_t *nodes, const json_t *perf_by_node,
                          const struct jobspec *spec, double *fastest, double *slowest_ratio)
{
	size_t i;
	json_t *node, *slow = NULL;
	const json_t *perf;
	int cuda;
	double least = 0;
	*fastest = 0;
	json_array_foreach(nodes, i, node)
	{
		if (node_use(node, perf_by_node, spec->device, &perf, &cuda) != NODE_PLANNABLE)
			continue;
		double f = num(perf, "flops_per_s");
		*fastest = fmax(*fastest, f);
		least = least == 0 ? f : fmin(least, f);
	}
	if (*fastest <= 0 || least >= AUTOPLAN_SLOW_RATIO * *fastest)
		return NULL;
	*slowest_ratio = least / *fastest;
	slow = json_array();
	json_array_foreach(nodes, i, node)
	{
		if (node_use(node, perf_by_node, spec->device, &perf, &cuda) == NODE_PLANNABLE &&
		    num(perf, "flops_per_s") < AUTOPLAN_SLOW_RATIO * *fastest)
			json_array_append(slow, json_object_get(node, "id"));
	}
	return slow;
}

/* Every plan is costed at the slowest node's rates, so one node measured slow (a sick node,
 * or one whose probe met other work on its cores) slows every plan. When the cluster without
 * the slow nodes has a plan predicted AUTOPLAN_SLOW_GAIN faster than answer's winner, answer
 * gets "slow_nodes" {"nodes" (the first AUTOPLAN_SLOW_NAMED), "count", "slowest_ratio",
 * "without": that plan's candidate} and its explanation says what to do about them. */
static void slow_node_hint(json_t *answer, const struct plan_model *model, const json_t *nodes,
                           const json_t *perf_by_node, const struct jobspec *spec,
                           const struct plan_candidate *best)
{
	double fastest = 0, ratio = 1;
	json_t *slow = slow_nodes(nodes, perf_by_node, spec, &fastest, &ratio);
	struct plan_cluster k;
	struct plan_result r = {0};
	struct yard_err err = {0};
	if (slow == NULL)
		return;
	if (cluster_view(nodes, perf_by_node, spec, AUTOPLAN_SLOW_RATIO * fastest, &k, &err) != 0 ||
	    plan_run(model, &k, &r, &err) != 0 || r.count == 0 ||
	    r.candidates[0].step_s >= AUTOPLAN_SLOW_GAIN * best->step_s) {
		plan_result_free(&r);
		json_decref(slow);
		return;
	}
	const struct plan_candidate *c = &r.candidates[0];
	size_t n = json_array_size(slow);
	char names[200] = "";
	for (size_t i = 0, at = 0; i < n && i < 3; i++)
		at +=
		    (size_t)snprintf(names + at, at < sizeof names ? sizeof names - at : 0, "%s%s",
		                     i ? ", " : "", json_string_value(json_array_get(slow, i)));
	char more[48] = "";
	if (n > 3)
		snprintf(more, sizeof more, " and %zu more", n - 3);
	const char *why = json_string_value(json_object_get(answer, "explanation"));
	json_t *hint = json_sprintf(
	    "%s. Every plan is costed at the slowest node's rates, and %s%s measured at %.2g× the "
	    "fastest node's FLOP rate: without %s the best plan, dp%d×tp%d×pp%d %s on %d devices, "
	    "is predicted at %.2f ms/step against %.2f ms; cordon %s (yardctl node cordon), or, "
	    "if %s busy when %s measured, measure %s again (yardctl node probe)",
	    why ? why : "", names, more, ratio, n > 1 ? "them" : "it", c->dp, c->tp, c->pp,
	    plan_schedule_name(c->schedule), c->dp * c->tp * c->pp, c->step_s * 1e3,
	    best->step_s * 1e3, n > 1 ? "them" : "it", n > 1 ? "they were" : "it was",
	    n > 1 ? "they" : "it", n > 1 ? "them" : "it");
	if (hint != NULL)
		json_object_set_new(answer, "explanation", hint);
	while (json_array_size(slow) > AUTOPLAN_SLOW_NAMED)
		json_array_remove(slow, AUTOPLAN_SLOW_NAMED);
	json_object_set_new(answer, "slow_nodes",
	                    json_pack("{s:o,s:I,s:f,s:o}", "nodes", slow, "count", (json_int_t)n,
	                              "slowest_ratio", ratio, "without", candidate_json(c)));
	plan_result_free(&r);
}

json_t *autoplan_run(const json_t *spec_json, const json_t *nodes, const json_t *perf_by_node,
                     int limit, struct yard_err *err)
{
	struct jobspec spec;
	struct plan_model model;
	struct plan_cluster cluster;
	struct plan_result result;
	char why[600];
	if (jobspec_parse(spec_json, &spec, err) != 0)
		return NULL;
	if (spec.is_command) {
		jobspec_free(&spec);
		yard_err_set(err, YARD_EINVAL,
		             "command: a command job has no layout to plan (the planner plans the "
		             "built-in trainer's model)");
		return NULL;
	}
	autoplan_model(&spec, &model);
	if (autoplan_cluster(nodes, perf_by_node, &spec, &cluster, err) != 0 ||
	    plan_run(&model, &cluster, &result, err) != 0) {
		jobspec_free(&spec);
		return NULL;
	}
	plan_explain(&result, why, sizeof why);
	json_t *candidates = json_array();
	for (int i = 0; i < result.count && (limit <= 0 || i < limit); i++)
		json_array_append_new(candidates, candidate_json(&result.candidates[i]));
	json_t *answer =
	    json_pack("{s:o,s:i,s:i,s:i,s:s,s:o}", "cluster", cluster_json(&cluster), "count",
	              result.count, "rejected_memory", result.rejected_memory, "rejected_rules",
	              result.rejected_rules, "explanation", why, "candidates", candidates);
	if (answer != NULL && result.count > 0)
		slow_node_hint(answer, &model, nodes, perf_by_node, &spec, &result.candidates[0]);
	jobspec_free(&spec);
	plan_result_free(&result);
	return answer;
}

json_t *autoplan_record(const json_t *answer)
{
	const json_t *candidates = json_object_get(answer, "candidates");
	json_t *winner = json_deep_copy(json_array_get(candidates, 0));
	if (winner == NULL)
		return NULL;
	json_object_set(winner, "cluster", json_object_get(answer, "cluster"));
	json_object_set(winner, "explanation", json_object_get(answer, "explanation"));
	json_object_set(winner, "candidates", json_object_get(answer, "count"));
	if (json_array_size(candidates) > 1) {
		json_t *runner_up = json_deep_copy(json_array_get(candidates, 1));
		json_object_set_new(winner, "runner_up", runner_up);
	}
	json_t *ranked = json_array();
	for (size_t i = 0; i < json_array_size(candidates) && i < AUTOPLAN_RECORD_RANKED; i++)
		json_array_append_new(ranked, json_deep_copy(json_array_get(candidates, i)));
	json_object_set_new(winner, "ranked", ranked);
	if (json_object_get(answer, "slow_nodes") != NULL)
		json_object_set(winner, "slow_nodes", json_object_get(answer, "slow_nodes"));
	return winner;
}

int autoplan_layout(const json_t *plan, struct jobspec_parallel *p, struct yard_err *err)
{
	static const char *const keys[] = {
	    "dp", "tp", "pp", "schedule", "virtual_stages", "micro_batches", NULL};
	const json_t *layout = json_object_get(plan, "layout");
	int64_t dp = 0, tp = 0, pp = 0, v = 0, m = 0;
	const char *schedule = NULL;
	if (!json_is_object(layout))
		return yard_err_set(err, YARD_EINVAL, "plan.layout: must be an object");
	if (jsonx_only_keys(layout, "plan.layout", keys, err) != 0 ||
	    jsonx_get_int(layout, "plan.layout", "dp", 1, 1, 1024, &dp, err) != 0 ||
	    jsonx_get_int(layout, "plan.layout", "tp", 1, 1, 1024, &tp, err) != 0 ||
	    jsonx_get_int(layout, "plan.layout", "pp", 1, 1, 64, &pp, err) != 0 ||
	    jsonx_get_int(layout, "plan.layout", "virtual_stages", 1, 1, 64, &v, err) != 0 ||
	    jsonx_get_int(layout, "plan.layout", "micro_batches", 1, 1, 4096, &m, err) != 0 ||
	    jsonx_get_string(layout, "plan.layout", "schedule", 1, 16, &schedule, err) != 0)
		return err->code;
	memset(p, 0, sizeof *p);
	if (strcmp(schedule, "gpipe") == 0)
		p->schedule = JOBSPEC_GPIPE;
	else if (strcmp(schedule, "1f1b") == 0)
		p->schedule = JOBSPEC_1F1B;
	else if (strcmp(schedule, "interleaved") == 0)
		p->schedule = JOBSPEC_INTERLEAVED;
	else
		return yard_err_set(err, YARD_EINVAL,
		                    "plan.layout.schedule: '%s' is not gpipe, 1f1b or interleaved",
		                    schedule);
	p->dp = (int)dp, p->tp = (int)tp, p->pp = (int)pp;
	p->virtual_stages = (int)v, p->micro_batches = (int)m;
	return 0;
}
