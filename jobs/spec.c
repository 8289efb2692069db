/* spec.c: the job spec parser (spec.h, docs/jobspec.md): JSON → struct jobspec with every
 * field range-checked and every cross-field rule checked, and back to normalized JSON.
 *
 * Every error message starts with the dotted path of the field at fault followed by ": "
 * ("parallel.tp: 3 does not divide model.d_ff (256)"), which is what fsm_err_field and the
 * HTTP API's "field" rely on. It deliberately knows nothing about devices or placement:
 * whether a job fits a cluster is the scheduler's question, not the spec's.
 */
#include "jobs/spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

#define WORLD_MAX 65536      /* ranks in one job */
#define STEPS_MAX 1000000000 /* train.steps, checkpoint and debug step numbers */
#define ARG_MAX_BYTES 4096   /* one command argument or env value */
#define ENV_KEY_MAX 128      /* env variable name */
#define FILE_MAX_BYTES (1 << 20)
#define FILE_MAX_DEPTH 32

static const char *const schedule_names[] = {"gpipe", "1f1b", "interleaved", NULL};
static const char *const optimizer_names[] = {"sgd", "adamw", NULL};
static const char *const device_names[] = {"any", "cpu", "cuda", NULL};
static const char *const straggler_names[] = {"off", "report", "replace", NULL};

/* Variables the agent sets for every rank (torchrun's names and ours): a job may not
 * override them, or a rank would disagree with its peers about who it is. */
static const char *const reserved_env[] = {
    "RANK",       "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", NULL};

const char *jobspec_schedule_name(enum jobspec_schedule s)
{
	if ((unsigned)s < YARD_ARRAY_LEN(schedule_names) - 1)
		return schedule_names[s];
	return "unknown";
}

void jobspec_defaults(struct jobspec *spec)
{
	memset(spec, 0, sizeof *spec);
	spec->model = (struct jobspec_model){
	    .d_in = 32, .d_model = 64, .d_ff = 256, .layers = 8, .classes = 10, .seed = 1};
	spec->train = (struct jobspec_train){.steps = 200,
	                                     .batch_size = 64,
	                                     .lr = 0.01,
	                                     .optimizer = JOBSPEC_ADAMW,
	                                     .momentum = 0.9,
	                                     .beta1 = 0.9,
	                                     .beta2 = 0.999,
	                                     .eps = 1e-8,
	                                     .weight_decay = 0.0,
	                                     .clip_norm = 1.0,
	                                     .bucket_mb = 1.0,
	                                     .data_seed = 2,
	                                     .samples = 4096};
	snprintf(spec->train.dataset, sizeof spec->train.dataset, "synthetic");
	spec->parallel = (struct jobspec_parallel){.dp = 1,
	                                           .tp = 1,
	                                           .pp = 1,
	                                           .schedule = JOBSPEC_1F1B,
	                                           .virtual_stages = 1,
	                                           .micro_batches = 1};
	spec->ranks = 1;
	spec->device = JOBSPEC_DEVICE_ANY;
	spec->checkpoint.keep = 3;
	spec->checkpoint.before_restart_s = -1;
	snprintf(spec->checkpoint.store, sizeof spec->checkpoint.store, "controller");
	spec->failure = (struct jobspec_failure){.max_restarts = 3,
	                                         .hang_timeout_s = 60,
	                                         .straggler_policy = JOBSPEC_STRAGGLER_REPORT,
	                                         .straggler_threshold = 0.2,
	                                         .straggler_windows = 3,
	                                         .straggler_window_steps = 10,
	                                         .straggler_persist_s = STRAGGLER_PERSIST_S,
	                                         .max_replacements = 2};
	spec->debug = (struct jobspec_debug){
	    .slow_rank = -1, .slow_factor = 1.0, .hang_rank = -1, .crash_rank = -1};
}

void jobspec_free(struct jobspec *spec)
{
	for (int i = 0; i < spec->argc; i++)
		free(spec->argv[i]);
	for (int i = 0; i < spec->envc; i++)
		free(spec->env[i]);
	memset(spec->argv, 0, sizeof spec->argv);
	memset(spec->env, 0, sizeof spec->env);
	spec->argc = 0;
	spec->envc = 0;
}

/* ---- typed getters over jsonx that store into the struct's own types ---- */

static int get_int(const json_t *obj, const char *prefix, const char *key, int64_t min, int64_t max,
                   int *out, struct yard_err *err)
{
	int64_t v = *out;
	int rc = jsonx_get_int(obj, prefix, key, 0, min, max, &v, err);
	if (rc == 0)
		*out = (int)v;
	return rc;
}

static int get_i64(const json_t *obj, const char *prefix, const char *key, int64_t min, int64_t max,
                   int64_t *out, struct yard_err *err)
{
	return jsonx_get_int(obj, prefix, key, 0, min, max, out, err);
}

static int get_u64(const json_t *obj, const char *prefix, const char *key, uint64_t *out,
                   struct yard_err *err)
{
	int64_t v = (int64_t)*out;
	int rc = jsonx_get_int(obj, prefix, key, 0, 0, INT64_MAX, &v, err);
	if (rc == 0)
		*out = (uint64_t)v;
	return rc;
}

static int get_double(const json_t *obj, const char *prefix, const char *key, double min,
                      double max, double *out, struct yard_err *err)
{
	return jsonx_get_double(obj, prefix, key, 0, min, max, out, err);
}

/* A double in (0, max]: jsonx's ranges are closed, so zero is refused here. */
static int get_positive(const json_t *obj, const char *prefix, const char *key, double max,
                        double *out, struct yard_err *err)
{
	char path[128];
	int rc = get_double(obj, prefix, key, 0, max, out, err);
	if (rc != 0)
		return rc;
	if (*out <= 0) {
		jsonx_path(path, sizeof path, prefix, key);
		return yard_err_set(err, YARD_EINVAL, "%s: %g is out of range (0, %g]", path, *out,
		                    max);
	}
	return 0;
}

/* A string without NUL bytes of 1..max_len bytes; *out borrowed from obj. */
static int get_string(const json_t *obj, const char *prefix, const char *key, int required,
                      size_t max_len, const char **out, struct yard_err *err)
{
	char path[128];
	const char *s = NULL;
	int rc = jsonx_get_string(obj, prefix, key, required, max_len, &s, err);
	if (rc != 0 || s == NULL)
		return rc;
	int nul = strlen(s) != json_string_length(json_object_get(obj, key));
	if (nul || s[0] == '\0') {
		jsonx_path(path, sizeof path, prefix, key);
		return yard_err_set(err, YARD_EINVAL, "%s: %s", path,
		                    nul ? "contains a NUL byte" : "must not be empty");
	}
	*out = s;
	return 0;
}

static int get_enum(const json_t *obj, const char *prefix, const char *key,
                    const char *const *names, int *out, struct yard_err *err)
{
	const char *s = NULL;
	char path[128], choices[128] = "";
	int rc = get_string(obj, prefix, key, 0, 32, &s, err);
	if (rc != 0 || s == NULL)
		return rc;
	for (int i = 0; names[i] != NULL; i++)
		if (strcmp(s, names[i]) == 0) {
			*out = i;
			return 0;
		}
	for (int i = 0; names[i] != NULL; i++) {
		size_t n = strlen(choices);
		snprintf(choices + n, sizeof choices - n, "%s\"%s\"", i ? ", " : "", names[i]);
	}
	jsonx_path(path, sizeof path, prefix, key);
	return yard_err_set(err, YARD_EINVAL, "%s: \"%s\" is not one of %s", path, s, choices);
}

/* The sub-object obj[key], or NULL when absent (or null). A present non-object fails. */
static int get_object(const json_t *obj, const char *prefix, const char *key, const json_t **out,
                      struct yard_err *err)
{
	char path[128];
	json_t *v = json_object_get(obj, key);
	*out = NULL;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_object(v)) {
		jsonx_path(path, sizeof path, prefix, key);
		return yard_err_set(err, YARD_EINVAL, "%s: must be an object", path);
	}
	*out = v;
	return 0;
}

/* ---- sections ---- */

static int parse_model(const json_t *o, struct jobspec_model *m, struct yard_err *err)
{
	static const char *const keys[] = {"d_in",    "d_model", "d_ff", "layers",
	                                   "classes", "seed",    NULL};
	const char *p = "model";
	int rc;
	if ((rc = jsonx_only_keys(o, p, keys, err)) ||
	    (rc = get_int(o, p, "d_in", 1, 65536, &m->d_in, err)) ||
	    (rc = get_int(o, p, "d_model", 1, 65536, &m->d_model, err)) ||
	    (rc = get_int(o, p, "d_ff", 1, 65536, &m->d_ff, err)) ||
	    (rc = get_int(o, p, "layers", 1, 4096, &m->layers, err)) ||
	    (rc = get_int(o, p, "classes", 2, 65536, &m->classes, err)) ||
	    (rc = get_u64(o, p, "seed", &m->seed, err)))
		return rc;
	return 0;
}

static int parse_train(const json_t *o, struct jobspec_train *t, struct yard_err *err)
{
	static const char *const keys[] = {"steps",        "batch_size", "lr",        "optimizer",
	                                   "momentum",     "beta1",      "beta2",     "eps",
	                                   "weight_decay", "clip_norm",  "bucket_mb", "dataset",
	                                   "data_seed",    "samples",    NULL};
	const char *p = "train", *dataset = NULL;
	int optimizer = t->optimizer, rc;
	if ((rc = jsonx_only_keys(o, p, keys, err)) ||
	    (rc = get_i64(o, p, "steps", 1, STEPS_MAX, &t->steps, err)) ||
	    (rc = get_int(o, p, "batch_size", 1, 1 << 20, &t->batch_size, err)) ||
	    (rc = get_positive(o, p, "lr", 10, &t->lr, err)) ||
	    (rc = get_enum(o, p, "optimizer", optimizer_names, &optimizer, err)) ||
	    (rc = get_double(o, p, "momentum", 0, 0.999999, &t->momentum, err)) ||
	    (rc = get_double(o, p, "beta1", 0, 0.999999, &t->beta1, err)) ||
	    (rc = get_double(o, p, "beta2", 0, 0.999999, &t->beta2, err)) ||
	    (rc = get_positive(o, p, "eps", 1, &t->eps, err)) ||
	    (rc = get_double(o, p, "weight_decay", 0, 10, &t->weight_decay, err)) ||
	    (rc = get_double(o, p, "clip_norm", 0, 1e6, &t->clip_norm, err)) ||
	    (rc = get_positive(o, p, "bucket_mb", 4096, &t->bucket_mb, err)) ||
	    (rc = get_string(o, p, "dataset", 0, JOBSPEC_PATH_MAX, &dataset, err)) ||
	    (rc = get_u64(o, p, "data_seed", &t->data_seed, err)) ||
	    (rc = get_int(o, p, "samples", 1, 1 << 24, &t->samples, err)))
		return rc;
	t->optimizer = (enum jobspec_optimizer)optimizer;
	if (dataset != NULL)
		snprintf(t->dataset, sizeof t->dataset, "%s", dataset);
	return 0;
}

static int parse_parallel(const json_t *o, struct jobspec_parallel *par, struct yard_err *err)
{
	static const char *const keys[] = {
	    "dp", "tp", "pp", "schedule", "virtual_stages", "micro_batches", NULL};
	const char *p = "parallel";
	int schedule = par->schedule, rc;
	if ((rc = jsonx_only_keys(o, p, keys, err)) ||
	    (rc = get_int(o, p, "dp", 1, 1024, &par->dp, err)) ||
	    (rc = get_int(o, p, "tp", 1, 1024, &par->tp, err)) ||
	    (rc = get_int(o, p, "pp", 1, 64, &par->pp, err)) ||
	    (rc = get_enum(o, p, "schedule", schedule_names, &schedule, err)) ||
	    (rc = get_int(o, p, "virtual_stages", 1, 64, &par->virtual_stages, err)) ||
	    (rc = get_int(o, p, "micro_batches", 1, 4096, &par->micro_batches, err)))
		return rc;
	par->schedule = (enum jobspec_schedule)schedule;
	return 0;
}

static int parse_resources(const json_t *o, struct jobspec *spec, struct yard_err *err)
{
	static const char *const keys[] = {"device", "memory_mb", NULL};
	const char *p = "resources";
	int device = spec->device, rc;
	if ((rc = jsonx_only_keys(o, p, keys, err)) ||
	    (rc = get_enum(o, p, "device", device_names, &device, err)) ||
	    (rc = get_i64(o, p, "memory_mb", 0, 16 << 20, &spec->memory_mb, err)))
		return rc;
	spec->device = (enum jobspec_device)device;
	return 0;
}

static int parse_checkpoint(const json_t *o, struct jobspec_checkpoint *c, struct yard_err *err)
{
	static const char *const keys[] = {"every_steps", "keep", "store", "before_restart_s",
	                                   NULL};
	const char *p = "checkpoint", *store = NULL;
	int rc;
	if ((rc = jsonx_only_keys(o, p, keys, err)) ||
	    (rc = get_i64(o, p, "every_steps", 0, STEPS_MAX, &c->every_steps, err)) ||
	    (rc = get_int(o, p, "keep", 1, 1000, &c->keep, err)) ||
	    (rc = get_int(o, p, "before_restart_s", 0, 3600, &c->before_restart_s, err)) ||
	    (rc = get_string(o, p, "store", 0, JOBSPEC_PATH_MAX, &store, err)))
		return rc;
	if (store == NULL)
		return 0;
	if (strcmp(store, "controller") != 0 && (strncmp(store, "dir:/", 5) != 0))
		return yard_err_set(err, YARD_EINVAL,
		                    "checkpoint.store: \"%s\" is neither \"controller\" nor "
		                    "\"dir:\" followed by an absolute path",
		                    store);
	snprintf(c->store, sizeof c->store, "%s", store);
	return 0;
}

static int parse_straggler(const json_t *o, struct jobspec_failure *f, struct yard_err *err)
{
	static const char *const keys[] = {
	    "policy",    "threshold",        "windows", "window_steps",
	    "persist_s", "max_replacements", NULL};
	const char *p = "failure.straggler";
	int policy = f->straggler_policy, rc;
	if ((rc = jsonx_only_keys(o, p, keys, err)) ||
	    (rc = get_enum(o, p, "policy", straggler_names, &policy, err)) ||
	    (rc = get_positive(o, p, "threshold", 100, &f->straggler_threshold, err)) ||
	    (rc = get_int(o, p, "windows", 1, 1000, &f->straggler_windows, err)) ||
	    (rc = get_int(o, p, "window_steps", 1, 100000, &f->straggler_window_steps, err)) ||
	    (rc = get_double(o, p, "persist_s", 0, 86400, &f->straggler_persist_s, err)) ||
	    (rc = get_int(o, p, "max_replacements", 0, 1000, &f->max_replacements, err)))
		return rc;
	f->straggler_policy = (enum jobspec_straggler_policy)policy;
	return 0;
}

static int parse_failure(const json_t *o, struct jobspec_failure *f, struct yard_err *err)
{
	static const char *const keys[] = {"max_restarts",
	                                   "hang_timeout_s",
	                                   "first_step_timeout_s",
	                                   "stop_on_disconnect_s",
	                                   "allow_shrink_dp",
	                                   "straggler",
	                                   NULL};
	const char *p = "failure";
	const json_t *straggler;
	int rc;
	if ((rc = jsonx_only_keys(o, p, keys, err)) ||
	    (rc = get_int(o, p, "max_restarts", 0, 1000, &f->max_restarts, err)) ||
	    (rc = get_int(o, p, "hang_timeout_s", 1, 86400, &f->hang_timeout_s, err)) ||
	    (rc = get_int(o, p, "first_step_timeout_s", 0, 86400, &f->first_step_timeout_s, err)) ||
	    (rc = get_double(o, p, "stop_on_disconnect_s", 0, 86400, &f->stop_on_disconnect_s,
	                     err)) ||
	    (rc = jsonx_get_bool(o, p, "allow_shrink_dp", 0, &f->allow_shrink_dp, err)) ||
	    (rc = get_object(o, p, "straggler", &straggler, err)))
		return rc;
	return straggler ? parse_straggler(straggler, f, err) : 0;
}

static int parse_debug(const json_t *o, struct jobspec_debug *d, struct yard_err *err)
{
	static const char *const keys[] = {"slow_rank",  "slow_node",     "slow_factor",
	                                   "block_ms",   "hang_rank",     "hang_at_step",
	                                   "crash_rank", "crash_at_step", NULL};
	const char *p = "debug", *slow_node = NULL;
	int rc;
	if ((rc = jsonx_only_keys(o, p, keys, err)) ||
	    (rc = get_int(o, p, "slow_rank", -1, WORLD_MAX - 1, &d->slow_rank, err)) ||
	    (rc = get_string(o, p, "slow_node", 0, JOBSPEC_NAME_MAX, &slow_node, err)) ||
	    (rc = get_double(o, p, "slow_factor", 1, 1000, &d->slow_factor, err)) ||
	    (rc = get_double(o, p, "block_ms", 0, 10000, &d->block_ms, err)) ||
	    (rc = get_int(o, p, "hang_rank", -1, WORLD_MAX - 1, &d->hang_rank, err)) ||
	    (rc = get_i64(o, p, "hang_at_step", 0, STEPS_MAX, &d->hang_at_step, err)) ||
	    (rc = get_int(o, p, "crash_rank", -1, WORLD_MAX - 1, &d->crash_rank, err)) ||
	    (rc = get_i64(o, p, "crash_at_step", 0, STEPS_MAX, &d->crash_at_step, err)))
		return rc;
	if (slow_node != NULL)
		snprintf(d->slow_node, sizeof d->slow_node, "%s", slow_node);
	return 0;
}

/* A string element of an array or object, checked like get_string; path names it. */
static int check_string_value(const json_t *v, const char *path, size_t max_len, int allow_empty,
                              struct yard_err *err)
{
	if (!json_is_string(v))
		return yard_err_set(err, YARD_EINVAL, "%s: must be a string", path);
	if (json_string_length(v) > max_len)
		return yard_err_set(err, YARD_EINVAL, "%s: longer than %zu bytes", path, max_len);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return yard_err_set(err, YARD_EINVAL, "%s: contains a NUL byte", path);
	if (!allow_empty && json_string_length(v) == 0)
		return yard_err_set(err, YARD_EINVAL, "%s: must not be empty", path);
	return 0;
}

static int parse_command(const json_t *v, struct jobspec *spec, struct yard_err *err)
{
	char path[64];
	size_t i;
	json_t *arg;
	if (!json_is_array(v))
		return yard_err_set(err, YARD_EINVAL, "command: must be an array of strings");
	if (json_array_size(v) == 0)
		return yard_err_set(err, YARD_EINVAL, "command: must name a program");
	if (json_array_size(v) > JOBSPEC_ARGV_MAX)
		return yard_err_set(err, YARD_EINVAL,
		                    "command: %zu arguments, over the limit of %d",
		                    json_array_size(v), JOBSPEC_ARGV_MAX);
	json_array_foreach(v, i, arg)
	{
		snprintf(path, sizeof path, "command[%zu]", i);
		int rc = check_string_value(arg, path, ARG_MAX_BYTES, i > 0, err);
		if (rc != 0)
			return rc;
		spec->argv[i] = strdup(json_string_value(arg));
		if (spec->argv[i] == NULL)
			return yard_err_set(err, YARD_ENOMEM, "command: out of memory");
		spec->argc = (int)i + 1;
	}
	return 0;
}

static int env_key_valid(const char *k)
{
	if (!((k[0] >= 'A' && k[0] <= 'Z') || (k[0] >= 'a' && k[0] <= 'z') || k[0] == '_'))
		return 0;
	for (const char *c = k; *c; c++)
		if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
		      (*c >= '0' && *c <= '9') || *c == '_'))
			return 0;
	return strlen(k) <= ENV_KEY_MAX;
}

static int parse_env(const json_t *o, struct jobspec *spec, struct yard_err *err)
{
	char path[ENV_KEY_MAX + 16];
	const char *k;
	json_t *v;
	if (json_object_size(o) > JOBSPEC_ENV_MAX)
		return yard_err_set(err, YARD_EINVAL, "env: %zu variables, over the limit of %d",
		                    json_object_size(o), JOBSPEC_ENV_MAX);
	json_object_foreach((json_t *)o, k, v)
	{
		int rc;
		snprintf(path, sizeof path, "env.%.*s", ENV_KEY_MAX, k);
		if (!env_key_valid(k))
			return yard_err_set(
			    err, YARD_EINVAL,
			    "%s: not a valid variable name ([A-Za-z_][A-Za-z0-9_]*, "
			    "at most %d bytes)",
			    path, ENV_KEY_MAX);
		for (const char *const *r = reserved_env; *r != NULL; r++)
			if (strcmp(k, *r) == 0)
				return yard_err_set(err, YARD_EINVAL,
				                    "%s: reserved: set by the agent for every rank",
				                    path);
		if (strncmp(k, "YARD_", 5) == 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "%s: the YARD_ prefix is reserved for trainyard", path);
		if ((rc = check_string_value(v, path, ARG_MAX_BYTES, 1, err)) != 0)
			return rc;
		if (asprintf(&spec->env[spec->envc], "%s=%s", k, json_string_value(v)) < 0) {
			spec->env[spec->envc] = NULL;
			return yard_err_set(err, YARD_ENOMEM, "env: out of memory");
		}
		spec->envc++;
	}
	return 0;
}

static int parse_name(const json_t *root, struct jobspec *spec, struct yard_err *err)
{
	const char *name = NULL;
	int rc = jsonx_get_string(root, "", "name", 1, JOBSPEC_NAME_MAX, &name, err);
	if (rc != 0)
		return rc;
	if (name[0] == '\0')
		return yard_err_set(err, YARD_EINVAL, "name: must not be empty");
	if (strlen(name) != json_string_length(json_object_get(root, "name")))
		return yard_err_set(err, YARD_EINVAL, "name: contains a NUL byte");
	for (const char *c = name; *c; c++)
		if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
		      (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-'))
			return yard_err_set(err, YARD_EINVAL,
			                    "name: \"%s\" has a character outside [A-Za-z0-9._-]",
			                    name);
	snprintf(spec->name, sizeof spec->name, "%s", name);
	return 0;
}

/* ---- cross-field rules ---- */

static int check_trainer(struct jobspec *s, int ranks_given, struct yard_err *err)
{
	const struct jobspec_parallel *p = &s->parallel;
	if (p->is_auto) {
		/* The planner picks the layout; a given "ranks" is the device count it plans for.
		 */
		if (!ranks_given)
			s->ranks = 0;
		return 0;
	}
	int64_t world = (int64_t)p->dp * p->tp * p->pp;
	if (world > WORLD_MAX)
		return yard_err_set(err, YARD_EINVAL,
		                    "parallel: dp × tp × pp = %lld ranks, over the limit of %d",
		                    (long long)world, WORLD_MAX);
	if (ranks_given && s->ranks != world)
		return yard_err_set(
		    err, YARD_EINVAL,
		    "ranks: %d does not equal parallel.dp × tp × pp (%d × %d × %d = %lld)",
		    s->ranks, p->dp, p->tp, p->pp, (long long)world);
	s->ranks = (int)world;
	if (s->model.d_ff % p->tp != 0)
		return yard_err_set(err, YARD_EINVAL,
		                    "parallel.tp: %d does not divide model.d_ff (%d)", p->tp,
		                    s->model.d_ff);
	if (p->virtual_stages > 1 && p->schedule != JOBSPEC_INTERLEAVED)
		return yard_err_set(
		    err, YARD_EINVAL,
		    "parallel.virtual_stages: %d needs schedule \"interleaved\" (is \"%s\")",
		    p->virtual_stages, jobspec_schedule_name(p->schedule));
	if (p->pp * p->virtual_stages > s->model.layers)
		return yard_err_set(err, YARD_EINVAL,
		                    "parallel.pp: %d stages × %d virtual stages need at least %d "
		                    "layers, model.layers is %d",
		                    p->pp, p->virtual_stages, p->pp * p->virtual_stages,
		                    s->model.layers);
	if (p->schedule == JOBSPEC_INTERLEAVED) {
		if (s->model.layers % (p->pp * p->virtual_stages) != 0)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "model.layers: %d is not divisible by parallel.pp × "
			    "virtual_stages (%d × %d), as the interleaved schedule needs",
			    s->model.layers, p->pp, p->virtual_stages);
		if (p->micro_batches % p->pp != 0)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "parallel.micro_batches: %d is not divisible by parallel.pp "
			    "(%d), as the interleaved schedule needs",
			    p->micro_batches, p->pp);
	}
	if (s->train.batch_size % (p->dp * p->micro_batches) != 0)
		return yard_err_set(err, YARD_EINVAL,
		                    "train.batch_size: %d is not divisible by parallel.dp × "
		                    "micro_batches (%d × %d)",
		                    s->train.batch_size, p->dp, p->micro_batches);
	return 0;
}

static int check_debug_ranks(const struct jobspec *s, struct yard_err *err)
{
	const struct {
		const char *path;
		int rank;
	} hooks[] = {{"debug.slow_rank", s->debug.slow_rank},
	             {"debug.hang_rank", s->debug.hang_rank},
	             {"debug.crash_rank", s->debug.crash_rank}};
	if (s->ranks == 0) /* "auto" without ranks: the world size is not known yet */
		return 0;
	for (size_t i = 0; i < YARD_ARRAY_LEN(hooks); i++)
		if (hooks[i].rank >= s->ranks)
			return yard_err_set(err, YARD_EINVAL,
			                    "%s: %d is not a rank of this job (world size %d)",
			                    hooks[i].path, hooks[i].rank, s->ranks);
	return 0;
}

/* "after": an array of at most JOBSPEC_AFTER_MAX distinct job ids ("j-" and digits). */
static int parse_after(const json_t *root, struct jobspec *spec, struct yard_err *err)
{
	const json_t *after = json_object_get(root, "after"), *v;
	size_t i;
	if (after == NULL || json_is_null(after))
		return 0;
	if (!json_is_array(after))
		return yard_err_set(err, YARD_EINVAL, "after: must be an array of job ids");
	if (json_array_size(after) > JOBSPEC_AFTER_MAX)
		return yard_err_set(err, YARD_EINVAL, "after: %zu jobs, at most %d",
		                    json_array_size(after), JOBSPEC_AFTER_MAX);
	json_array_foreach(after, i, v)
	{
		const char *id = json_string_value(v);
		size_t n = id != NULL ? strlen(id) : 0, d = 2;
		while (d < n && id[d] >= '0' && id[d] <= '9')
			d++;
		if (id == NULL || n < 3 || n > JOBSPEC_JOB_ID_MAX || strncmp(id, "j-", 2) != 0 ||
		    d != n)
			return yard_err_set(err, YARD_EINVAL,
			                    "after[%zu]: must be a job id like j-000001", i);
		for (int k = 0; k < spec->n_after; k++)
			if (strcmp(spec->after[k], id) == 0)
				return yard_err_set(err, YARD_EINVAL,
				                    "after[%zu]: %s is listed twice", i, id);
		snprintf(spec->after[spec->n_after++], sizeof spec->after[0], "%s", id);
	}
	return 0;
}

static int parse_all(const json_t *root, struct jobspec *spec, struct yard_err *err)
{
	static const char *const keys[] = {"name",         "priority",   "model",   "train",
	                                   "command",      "ranks",      "env",     "parallel",
	                                   "resources",    "checkpoint", "failure", "debug",
	                                   "time_limit_s", "after",      NULL};
	const json_t *model, *train, *env, *resources, *checkpoint, *failure, *debug;
	json_t *command, *parallel, *ranks;
	int rc;

	if (!json_is_object(root))
		return yard_err_set(err, YARD_EINVAL, "spec: must be a JSON object");
	if ((rc = jsonx_only_keys(root, "", keys, err)) || (rc = parse_name(root, spec, err)) ||
	    (rc = get_int(root, "", "priority", -1000, 1000, &spec->priority, err)) ||
	    (rc = get_int(root, "", "time_limit_s", 0, JOBSPEC_TIME_LIMIT_MAX_S,
	                  &spec->time_limit_s, err)) ||
	    (rc = parse_after(root, spec, err)) ||
	    (rc = get_object(root, "", "model", &model, err)) ||
	    (rc = get_object(root, "", "train", &train, err)) ||
	    (rc = get_object(root, "", "env", &env, err)) ||
	    (rc = get_object(root, "", "resources", &resources, err)) ||
	    (rc = get_object(root, "", "checkpoint", &checkpoint, err)) ||
	    (rc = get_object(root, "", "failure", &failure, err)) ||
	    (rc = get_object(root, "", "debug", &debug, err)) ||
	    (rc = get_int(root, "", "ranks", 1, WORLD_MAX, &spec->ranks, err)))
		return rc;
	command = json_object_get(root, "command");
	parallel = json_object_get(root, "parallel");
	ranks = json_object_get(root, "ranks");
	if (json_is_null(command))
		command = NULL;
	if (json_is_null(parallel))
		parallel = NULL;
	if (json_is_null(ranks))
		ranks = NULL;

	if (command != NULL) {
		spec->is_command = 1;
		if (model != NULL)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "model: not allowed in a command job (the built-in trainer "
			    "is not used)");
		if (train != NULL)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "train: not allowed in a command job (the built-in trainer "
			    "is not used)");
		if (parallel != NULL)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "parallel: not allowed in a command job; set \"ranks\"");
		if (ranks == NULL)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "ranks: required field missing (a command job needs its "
			    "world size)");
		if ((rc = parse_command(command, spec, err)) != 0)
			return rc;
	} else {
		if ((model && (rc = parse_model(model, &spec->model, err))) ||
		    (train && (rc = parse_train(train, &spec->train, err))))
			return rc;
		if (json_is_string(parallel)) {
			if (strcmp(json_string_value(parallel), "auto") != 0)
				return yard_err_set(err, YARD_EINVAL,
				                    "parallel: must be an object or \"auto\"");
			spec->parallel.is_auto = 1;
		} else if (parallel != NULL) {
			if (!json_is_object(parallel))
				return yard_err_set(err, YARD_EINVAL,
				                    "parallel: must be an object or \"auto\"");
			if ((rc = parse_parallel(parallel, &spec->parallel, err)) != 0)
				return rc;
		}
	}
	if ((env && (rc = parse_env(env, spec, err))) ||
	    (resources && (rc = parse_resources(resources, spec, err))) ||
	    (checkpoint && (rc = parse_checkpoint(checkpoint, &spec->checkpoint, err))) ||
	    (failure && (rc = parse_failure(failure, &spec->failure, err))) ||
	    (debug && (rc = parse_debug(debug, &spec->debug, err))))
		return rc;
	if (!spec->is_command && (rc = check_trainer(spec, ranks != NULL, err)) != 0)
		return rc;
	if (spec->failure.allow_shrink_dp && (spec->is_command || spec->parallel.is_auto))
		return yard_err_set(
		    err, YARD_EINVAL,
		    "failure.allow_shrink_dp: only a trainer job with a fixed parallel "
		    "layout can shrink its data-parallel degree (this job %s)",
		    spec->is_command ? "runs a command" : "has parallel \"auto\"");
	return check_debug_ranks(spec, err);
}

int jobspec_parse(const json_t *json, struct jobspec *spec, struct yard_err *err)
{
	jobspec_defaults(spec);
	int rc = parse_all(json, spec, err);
	if (rc != 0)
		jobspec_free(spec);
	return rc;
}

int jobspec_load_file(const char *path, struct jobspec *spec, struct yard_err *err)
{
	struct yard_err inner = {0};
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t len;
	json_t *json;
	int rc;

	jobspec_defaults(spec);
	if (f == NULL)
		return yard_err_set(err, YARD_EIO, "%s: cannot open: %s", path, strerror(errno));
	buf = malloc(FILE_MAX_BYTES + 1);
	if (buf == NULL) {
		fclose(f);
		return yard_err_set(err, YARD_ENOMEM, "%s: out of memory", path);
	}
	len = fread(buf, 1, FILE_MAX_BYTES + 1, f);
	rc = ferror(f);
	fclose(f);
	if (rc) {
		free(buf);
		return yard_err_set(err, YARD_EIO, "%s: read error", path);
	}
	json = jsonx_parse(buf, len, FILE_MAX_BYTES, FILE_MAX_DEPTH, &inner);
	free(buf);
	if (json == NULL)
		return yard_err_set(err, inner.code, "%s: %s", path, inner.msg);
	rc = jobspec_parse(json, spec, &inner);
	json_decref(json);
	if (rc != 0)
		return yard_err_set(err, rc, "%s: %s", path, inner.msg);
	return 0;
}

/* ---- back to JSON ---- */

static json_t *env_to_json(const struct jobspec *s)
{
	json_t *env = json_object();
	for (int i = 0; i < s->envc; i++) {
		const char *eq = strchr(s->env[i], '=');
		char key[ENV_KEY_MAX + 1];
		snprintf(key, sizeof key, "%.*s", (int)(eq - s->env[i]), s->env[i]);
		json_object_set_new(env, key, json_string(eq + 1));
	}
	return env;
}

/* Members by hand (json_pack reads its format on every call), each object's in key order
 * (what the sorted dump of the stored spec finds already sorted). */
static void put_int(json_t *o, const char *key, json_int_t v)
{
	json_object_set_new_nocheck(o, key, json_integer(v));
}

static void put_real(json_t *o, const char *key, double v)
{
	json_object_set_new_nocheck(o, key, json_real(v));
}

static void put_str(json_t *o, const char *key, const char *v)
{
	json_object_set_new_nocheck(o, key, json_string(v));
}

int jobspec_before_restart_s(const struct jobspec *spec)
{
	if (spec->checkpoint.before_restart_s >= 0)
		return spec->checkpoint.before_restart_s;
	return spec->is_command ? 0 : JOBSPEC_BEFORE_RESTART_S;
}

json_t *jobspec_to_json(const struct jobspec *s)
{
	const struct jobspec_failure *f = &s->failure;
	const struct jobspec_debug *d = &s->debug;
	json_t *o = json_object(), *x;

	x = json_object();
	put_int(x, "every_steps", s->checkpoint.every_steps);
	put_int(x, "keep", s->checkpoint.keep);
	put_str(x, "store", s->checkpoint.store);
	/* written only when set otherwise: a stored spec stays what members built before the
	 * field existed accept */
	if (s->checkpoint.before_restart_s >= 0)
		put_int(x, "before_restart_s", s->checkpoint.before_restart_s);
	json_object_set_new_nocheck(o, "checkpoint", x);
	if (s->is_command) {
		json_t *argv = json_array();
		for (int i = 0; i < s->argc; i++)
			json_array_append_new(argv, json_string(s->argv[i]));
		json_object_set_new_nocheck(o, "command", argv);
	}
	x = json_object();
	if (d->block_ms > 0)
		put_real(x, "block_ms", d->block_ms);
	put_int(x, "crash_at_step", d->crash_at_step);
	put_int(x, "crash_rank", d->crash_rank);
	put_int(x, "hang_at_step", d->hang_at_step);
	put_int(x, "hang_rank", d->hang_rank);
	put_real(x, "slow_factor", d->slow_factor);
	/* only when set, so that the stored spec of a job without it still parses on a
	 * controller that predates the field (a rolling upgrade); so with the optional members
	 * below */
	if (d->slow_node[0] != '\0')
		put_str(x, "slow_node", d->slow_node);
	put_int(x, "slow_rank", d->slow_rank);
	json_object_set_new_nocheck(o, "debug", x);
	json_object_set_new_nocheck(o, "env", env_to_json(s));
	x = json_object();
	json_object_set_new_nocheck(x, "allow_shrink_dp", json_boolean(f->allow_shrink_dp));
	if (f->first_step_timeout_s > 0)
		put_int(x, "first_step_timeout_s", f->first_step_timeout_s);
	put_int(x, "hang_timeout_s", f->hang_timeout_s);
	put_int(x, "max_restarts", f->max_restarts);
	if (f->stop_on_disconnect_s > 0)
		put_real(x, "stop_on_disconnect_s", f->stop_on_disconnect_s);
	json_t *st = json_object();
	put_int(st, "max_replacements", f->max_replacements);
	/* the default is left out, so that a member of a version before the field parses the
	 * specs that do not set it */
	if (f->straggler_persist_s != STRAGGLER_PERSIST_S)
		put_real(st, "persist_s", f->straggler_persist_s);
	put_str(st, "policy", straggler_names[f->straggler_policy]);
	put_real(st, "threshold", f->straggler_threshold);
	put_int(st, "window_steps", f->straggler_window_steps);
	put_int(st, "windows", f->straggler_windows);
	json_object_set_new_nocheck(x, "straggler", st);
	json_object_set_new_nocheck(o, "failure", x);
	if (!s->is_command) {
		const struct jobspec_model *m = &s->model;
		x = json_object();
		put_int(x, "classes", m->classes);
		put_int(x, "d_ff", m->d_ff);
		put_int(x, "d_in", m->d_in);
		put_int(x, "d_model", m->d_model);
		put_int(x, "layers", m->layers);
		put_int(x, "seed", m->seed);
		json_object_set_new_nocheck(o, "model", x);
	}
	put_str(o, "name", s->name);
	if (!s->is_command) {
		const struct jobspec_parallel *p = &s->parallel;
		if (p->is_auto) {
			put_str(o, "parallel", "auto");
		} else {
			x = json_object();
			put_int(x, "dp", p->dp);
			put_int(x, "micro_batches", p->micro_batches);
			put_int(x, "pp", p->pp);
			put_str(x, "schedule", jobspec_schedule_name(p->schedule));
			put_int(x, "tp", p->tp);
			put_int(x, "virtual_stages", p->virtual_stages);
			json_object_set_new_nocheck(o, "parallel", x);
		}
	}
	put_int(o, "priority", s->priority);
	if (s->time_limit_s > 0) /* only when set: members built before it refuse the key */
		put_int(o, "time_limit_s", s->time_limit_s);
	if (s->n_after > 0) { /* the same */
		x = json_array();
		for (int i = 0; i < s->n_after; i++)
			json_array_append_new(x, json_string(s->after[i]));
		json_object_set_new_nocheck(o, "after", x);
	}
	if (s->ranks > 0)
		put_int(o, "ranks", s->ranks);
	x = json_object();
	put_str(x, "device", device_names[s->device]);
	put_int(x, "memory_mb", s->memory_mb);
	json_object_set_new_nocheck(o, "resources", x);
	if (!s->is_command) {
		const struct jobspec_train *t = &s->train;
		x = json_object();
		put_int(x, "batch_size", t->batch_size);
		put_real(x, "beta1", t->beta1);
		put_real(x, "beta2", t->beta2);
		put_real(x, "bucket_mb", t->bucket_mb);
		put_real(x, "clip_norm", t->clip_norm);
		put_int(x, "data_seed", t->data_seed);
		put_str(x, "dataset", t->dataset);
		put_real(x, "eps", t->eps);
		put_real(x, "lr", t->lr);
		put_real(x, "momentum", t->momentum);
		put_str(x, "optimizer", optimizer_names[t->optimizer]);
		put_int(x, "samples", t->samples);
		put_int(x, "steps", t->steps);
		put_real(x, "weight_decay", t->weight_decay);
		json_object_set_new_nocheck(o, "train", x);
	}
	return o;
}

json_t *jobspec_with_dp(const json_t *spec, int dp, struct yard_err *err)
{
	struct jobspec js;
	if (jobspec_parse(spec, &js, err) != 0)
		return NULL;
	int is_fixed = !js.is_command && !js.parallel.is_auto;
	int spec_dp = js.parallel.dp, allow = js.failure.allow_shrink_dp;
	jobspec_free(&js);
	if (!is_fixed) {
		yard_err_set(err, YARD_EINVAL,
		             "dp: only a trainer job with a fixed parallel layout can shrink its "
		             "data-parallel degree");
		return NULL;
	}
	if (dp < 1 || dp > spec_dp) {
		yard_err_set(err, YARD_EINVAL, "dp: %d is outside 1..parallel.dp (%d)", dp,
		             spec_dp);
		return NULL;
	}
	if (dp == spec_dp)
		return json_incref((json_t *)spec);
	if (!allow) {
		yard_err_set(err, YARD_EINVAL,
		             "dp: %d is smaller than parallel.dp (%d) and failure.allow_shrink_dp "
		             "is false",
		             dp, spec_dp);
		return NULL;
	}
	json_t *shrunk = json_deep_copy(spec);
	json_t *parallel = json_object_get(shrunk, "parallel");
	if (shrunk == NULL || !json_is_object(parallel)) {
		json_decref(shrunk);
		yard_err_set(err, YARD_ENOMEM, "dp: out of memory");
		return NULL;
	}
	int64_t tp = json_integer_value(json_object_get(parallel, "tp"));
	int64_t pp = json_integer_value(json_object_get(parallel, "pp"));
	json_object_set_new(parallel, "dp", json_integer(dp));
	json_object_set_new(shrunk, "ranks", json_integer((json_int_t)(dp * tp * pp)));
	struct yard_err why = {0};
	if (jobspec_parse(shrunk, &js, &why) != 0) {
		json_decref(shrunk);
		yard_err_set(err, YARD_EINVAL, "dp: with dp %d the spec is invalid: %s", dp,
		             why.msg);
		return NULL;
	}
	jobspec_free(&js);
	return shrunk;
}
