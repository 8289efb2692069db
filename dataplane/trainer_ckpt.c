/* trainer_ckpt.c: a rank's checkpoint shard (format in ckpt.h) and the directory around it:
 *   DIR/step-NNNNNNNN/rank-NNNNN.shard   one per rank
 *   DIR/step-NNNNNNNN/MANIFEST           written by rank 0 after every rank wrote its shard;
 *                                        a step directory without it is ignored on restore
 * Saving and restoring are collective over the world (they meet in an allreduce). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "dataplane/ckpt.h"
#include "dataplane/trainer.h"

static void meta_fill(const struct trainer *t, struct ckpt_meta *meta)
{
	memset(meta, 0, sizeof *meta);
	snprintf(meta->job, sizeof meta->job, "%s", t->job_id);
	meta->step = t->step;
	meta->rank = t->rank;
	meta->world = t->world;
	meta->dp = t->par.dp;
	meta->tp = t->par.tp;
	meta->pp = t->par.pp;
	meta->v = t->par.virtual_stages;
	meta->m = t->par.micro_batches;
	meta->d_in = t->model.cfg.d_in;
	meta->d_model = t->model.cfg.d_model;
	meta->d_ff = t->model.cfg.d_ff;
	meta->layers = t->model.cfg.layers;
	meta->classes = t->model.cfg.classes;
	meta->model_seed = t->model.cfg.seed;
	meta->optimizer = t->optim.cfg.kind;
	meta->optim_t = t->optim.t;
	meta->data_seed = t->train.data_seed;
	meta->data_position = (uint64_t)t->step * (uint64_t)t->train.batch_size;
}

/* Parameters, then optimiser slots, each named after its parameter. Caller frees. */
static struct ckpt_tensor *tensors_of(struct trainer *t, int *count)
{
	int slots = optim_state_slots(&t->optim);
	int n = t->model.nparams * (1 + slots);
	struct ckpt_tensor *ts = calloc((size_t)n, sizeof *ts);
	if (!ts)
		return NULL;
	int k = 0;
	for (int s = 0; s <= slots; s++)
		for (int i = 0; i < t->model.nparams; i++, k++) {
			const struct model_param *p = &t->model.params[i];
			struct ckpt_tensor *c = &ts[k];
			snprintf(c->name, sizeof c->name, "%s", p->name);
			c->kind = (uint32_t)s; /* CKPT_PARAM, CKPT_OPTIM_M, CKPT_OPTIM_V */
			c->tensor_id = p->tensor_id;
			c->rows = p->rows;
			c->cols = p->cols;
			c->row0 = p->row0;
			c->col0 = p->col0;
			c->full_rows = p->full_rows;
			c->full_cols = p->full_cols;
			c->data = s == 0 ? p->data : (s == 1 ? t->optim.m : t->optim.v) + p->offset;
		}
	*count = n;
	return ts;
}

/* mkdir -p: the store's parent may not exist yet on a fresh cluster. */
static int mkdir_p1(const char *path, struct yard_err *err)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
			return yard_err_set(err, YARD_EIO, "%s: cannot create directory: %s", tmp,
			                    strerror(errno));
		*p = '/';
	}
	if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
		return yard_err_set(err, YARD_EIO, "%s: cannot create directory: %s", path,
		                    strerror(errno));
	return 0;
}

/* Complete steps in dir, ascending. Caller frees *steps. */
static int complete_steps(const char *dir, int64_t **steps, int *count)
{
	*steps = NULL;
	*count = 0;
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	struct dirent *e;
	int cap = 0;
	while ((e = readdir(d))) {
		long long step;
		char tail;
		if (sscanf(e->d_name, "step-%lld%c", &step, &tail) != 1)
			continue;
		char manifest[4096];
		snprintf(manifest, sizeof manifest, "%s/%s/MANIFEST", dir, e->d_name);
		if (access(manifest, R_OK) != 0)
			continue;
		if (*count == cap) {
			cap = cap ? 2 * cap : 16;
			int64_t *grown = realloc(*steps, (size_t)cap * sizeof **steps);
			if (!grown) {
				closedir(d);
				return YARD_ENOMEM;
			}
			*steps = grown;
		}
		(*steps)[(*count)++] = step;
	}
	closedir(d);
	for (int i = 1; i < *count; i++) /* insertion sort: few entries */
		for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
			int64_t tmp = (*steps)[j];
			(*steps)[j] = (*steps)[j - 1];
			(*steps)[j - 1] = tmp;
		}
	return 0;
}

static void remove_step_dir(const char *dir, int64_t step)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/step-%08lld", dir, (long long)step);
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char file[4352];
		snprintf(file, sizeof file, "%s/%s", path, e->d_name);
		unlink(file);
	}
	closedir(d);
	rmdir(path);
}

int trainer_save(struct trainer *t, const char *dir, int keep, struct yard_err *err)
{
	char stepdir[4096], shard[4200];
	snprintf(stepdir, sizeof stepdir, "%s/step-%08lld", dir, (long long)t->step);
	snprintf(shard, sizeof shard, "%s/rank-%05d.shard", stepdir, t->rank);
	struct yard_err local = {0};
	int rc = mkdir_p1(dir, &local);
	if (!rc)
		rc = mkdir_p1(stepdir, &local);
	int count = 0;
	struct ckpt_tensor *ts = NULL;
	if (!rc) {
		ts = tensors_of(t, &count);
		if (!ts)
			rc = yard_err_set(&local, YARD_ENOMEM, "%s: out of memory", shard);
	}
	if (!rc) {
		struct ckpt_meta meta;
		meta_fill(t, &meta);
		rc = ckpt_write(shard, &meta, ts, count, &local);
	}
	free(ts);
	/* every rank learns whether all shards are on disk */
	double ok = rc == 0 ? 1.0 : 0.0;
	int nrc = t->net->ops->allreduce(t->net, TRAINER_WORLD, &ok, 1, YD_F64);
	if (rc)
		return yard_err_set(err, rc, "rank %d: %s", t->rank, local.msg);
	if (nrc)
		return yard_err_set(err, nrc, "rank %d: checkpoint barrier: %s", t->rank,
		                    t->net->ops->last_error(t->net));
	if ((int)ok != t->world)
		return yard_err_set(err, YARD_EIO,
		                    "checkpoint of step %lld: %d of %d ranks failed to write their "
		                    "shard",
		                    (long long)t->step, t->world - (int)ok, t->world);
	/* rank 0 writes the manifest; a second round makes every rank wait for it, so no rank
	 * starts the next step (and can die in it) before the checkpoint is complete */
	double manifest_ok = 1.0;
	if (t->rank == 0) {
		char manifest[4200], text[256];
		snprintf(manifest, sizeof manifest, "%s/MANIFEST", stepdir);
		int len =
		    snprintf(text, sizeof text,
		             "job %s\nstep %lld\nworld %d\nformat %u\nlayout %d %d %d %d %d\n",
		             t->job_id, (long long)t->step, t->world, CKPT_VERSION, t->par.dp,
		             t->par.tp, t->par.pp, t->par.virtual_stages, t->par.micro_batches);
		rc = ckpt_write_file_atomic(manifest, text, (size_t)len, &local);
		manifest_ok = rc == 0 ? 1.0 : 0.0;
		if (rc == 0 && keep > 0) {
			int64_t *steps;
			int n;
			if (complete_steps(dir, &steps, &n) == 0) {
				for (int i = 0; i < n - keep; i++)
					remove_step_dir(dir, steps[i]);
				free(steps);
			}
		}
	} else {
		manifest_ok = 0.0; /* only rank 0's vote counts: the sum is 1 when it succeeded */
	}
	nrc = t->net->ops->allreduce(t->net, TRAINER_WORLD, &manifest_ok, 1, YD_F64);
	if (rc)
		return yard_err_set(err, rc, "rank %d: %s", t->rank, local.msg);
	if (nrc)
		return yard_err_set(err, nrc, "rank %d: checkpoint barrier: %s", t->rank,
		                    t->net->ops->last_error(t->net));
	if ((int)manifest_ok != 1)
		return yard_err_set(err, YARD_EIO,
		                    "checkpoint of step %lld: rank 0 could not write "
		                    "the manifest",
		                    (long long)t->step);
	return 0;
}

/* What the step's MANIFEST records: the world size (-1 when it says none) and the layout
 * (dp, tp, pp, v, m; all -1 when it says none: a manifest of an older build, or the one an
 * agent writes for the controller store's download). */
static int manifest_world(const char *dir, int64_t step, int layout[5])
{
	char path[4200], line[128];
	int world = -1;
	for (int i = 0; i < 5; i++)
		layout[i] = -1;
	snprintf(path, sizeof path, "%s/step-%08lld/MANIFEST", dir, (long long)step);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	for (int n = 0; n < 16 && fgets(line, sizeof line, f); n++) {
		if (sscanf(line, "world %d", &world) == 1 || strncmp(line, "layout ", 7) != 0)
			continue;
		if (sscanf(line, "layout %d %d %d %d %d", &layout[0], &layout[1], &layout[2],
		           &layout[3], &layout[4]) != 5)
			for (int i = 0; i < 5; i++)
				layout[i] = -1;
	}
	fclose(f);
	return world;
}

/* The checkpoint of step was written by another tp, pp, v or m than this run's: the job was
 * planned again. Its manifest says so; without a layout line there, rank 0's shard does. On
 * success *old holds the checkpoint's layout (tp, pp of its shards). */
static int is_relayout(const struct trainer *t, const char *dir, int64_t step, const int layout[5],
                       struct ckpt_meta *old)
{
	memset(old, 0, sizeof *old);
	if (layout[0] > 0) {
		old->dp = layout[0], old->tp = layout[1], old->pp = layout[2];
		old->v = layout[3], old->m = layout[4];
	} else {
		char first[4200];
		struct yard_err ignored = {0};
		snprintf(first, sizeof first, "%s/step-%08lld/rank-%05d.shard", dir,
		         (long long)step, 0);
		if (ckpt_peek(first, old, &ignored) != 0)
			return 0; /* rank 0's restore names what is wrong with it */
	}
	return old->tp != t->par.tp || old->pp != t->par.pp || old->v != t->par.virtual_stages ||
	       old->m != t->par.micro_batches;
}

/* Restores from the shards of the checkpoint's data-parallel replica 0 (ranks 0..tp*pp-1 of
 * its layout: rank = (dp_i x pp + stage) x tp + tp_i), each tensor assembled from the slices
 * that overlap this rank's. */
static int restore_resharded(struct trainer *t, const char *dir, int64_t step,
                             const struct ckpt_meta *old, struct ckpt_tensor *ts, int count,
                             struct ckpt_meta *got, struct yard_err *err)
{
	int64_t n = (int64_t)old->tp * old->pp;
	if (old->tp < 1 || old->pp < 1 || n > 1 << 20)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "%s/step-%08lld: the checkpoint's layout tp %d x pp %d is not "
		                    "one",
		                    dir, (long long)step, old->tp, old->pp);
	char(*names)[4200] = calloc((size_t)n, sizeof *names);
	const char **paths = calloc((size_t)n, sizeof *paths);
	int rc = 0;
	if (!names || !paths)
		rc = yard_err_set(err, YARD_ENOMEM, "out of memory");
	for (int64_t i = 0; rc == 0 && i < n; i++) {
		snprintf(names[i], sizeof names[i], "%s/step-%08lld/rank-%05d.shard", dir,
		         (long long)step, (int)i);
		paths[i] = names[i];
	}
	if (rc == 0) {
		struct ckpt_meta expect;
		meta_fill(t, &expect);
		rc = ckpt_read_resharded(paths, (int)n, &expect, got, ts, count, err);
	}
	if (rc == 0 && t->rank == 0)
		log_info("restoring step %lld of layout dp %d x tp %d x pp %d (v %d, m %d) into dp "
		         "%d x tp %d x pp %d (v %d, m %d): every tensor assembled from the %d "
		         "shards of its replica 0",
		         (long long)step, got->dp, got->tp, got->pp, got->v, got->m, t->par.dp,
		         t->par.tp, t->par.pp, t->par.virtual_stages, t->par.micro_batches, (int)n);
	free(names);
	free(paths);
	return rc;
}

int trainer_restore(struct trainer *t, const char *dir, struct yard_err *err)
{
	int64_t *steps;
	int n;
	if (complete_steps(dir, &steps, &n) != 0)
		return yard_err_set(err, YARD_ENOMEM, "out of memory");
	int64_t step = n > 0 ? steps[n - 1] : -1;
	free(steps);
	double agree[2] = {(double)step, 1.0};
	int rc = t->net->ops->allreduce(t->net, TRAINER_WORLD, agree, 2, YD_F64);
	if (rc)
		return yard_err_set(err, rc, "rank %d: restore barrier: %s", t->rank,
		                    t->net->ops->last_error(t->net));
	if (agree[0] != (double)step * t->world)
		return yard_err_set(
		    err, YARD_EMISMATCH,
		    "rank %d: ranks disagree on the newest complete checkpoint in %s "
		    "(this rank sees step %lld)",
		    t->rank, dir, (long long)step);
	if (step < 0)
		return yard_err_set(err, YARD_ENOTFOUND, "%s: no complete checkpoint", dir);
	/* A checkpoint of a smaller dp (the job had shrunk, failure.allow_shrink_dp) restores
	 * into this one's replicas: rank r reads the shard of rank r mod its world, the same
	 * pipeline stage and tensor slice in replica dp_i mod its dp (replicas are identical). */
	int layout[5];
	int ckpt_world = manifest_world(dir, step, layout), source = t->rank;
	if (ckpt_world > 0 && ckpt_world < t->world && ckpt_world % (t->par.tp * t->par.pp) == 0)
		source = t->rank % ckpt_world;
	char shard[4200];
	snprintf(shard, sizeof shard, "%s/step-%08lld/rank-%05d.shard", dir, (long long)step,
	         source);
	int count;
	struct ckpt_tensor *ts = tensors_of(t, &count);
	if (!ts)
		return yard_err_set(err, YARD_ENOMEM, "out of memory");
	struct ckpt_meta expect, got, old;
	if (is_relayout(t, dir, step, layout, &old)) {
		rc = restore_resharded(t, dir, step, &old, ts, count, &got, err);
	} else {
		meta_fill(t, &expect);
		expect.rank = source;
		rc = ckpt_read(shard, &expect, &got, ts, count, err);
	}
	free(ts);
	/* the step's MANIFEST says it is complete: a shard that cannot be found is a broken
	 * checkpoint, never "nothing to restore" (YARD_ENOTFOUND, on which a worker starts over
	 * from step 0) */
	if (rc == YARD_ENOTFOUND) {
		char msg[sizeof err->msg];
		snprintf(msg, sizeof msg, "%s", err->msg);
		rc = yard_err_set(err, YARD_ECORRUPT,
		                  "%s (step %lld of %s is complete by its MANIFEST)", msg,
		                  (long long)step, dir);
	}
	/* all ranks restore or none does: a rank whose shard is bad must not leave the others
	 * training from their checkpoints alone. The reason is logged before the barrier: once
	 * the others learn of the failure they exit, and the launcher may stop this rank before
	 * it could say what was wrong. */
	if (rc)
		log_error("rank %d: %s", t->rank, err->msg);
	double ok = rc == 0 ? 1.0 : 0.0;
	int nrc = t->net->ops->allreduce(t->net, TRAINER_WORLD, &ok, 1, YD_F64);
	if (rc)
		return rc;
	if (nrc)
		return yard_err_set(err, nrc, "rank %d: restore barrier: %s", t->rank,
		                    t->net->ops->last_error(t->net));
	if ((int)ok != t->world)
		return yard_err_set(err, YARD_EABORTED,
		                    "rank %d: restore of step %lld failed on %d of %d ranks (see "
		                    "their errors)",
		                    t->rank, (long long)step, t->world - (int)ok, t->world);
	if (got.step != step || got.data_position != (uint64_t)step * t->train.batch_size)
		return yard_err_set(
		    err, YARD_ECORRUPT,
		    "%s: records step %lld at data position %llu, expected step %lld", shard,
		    (long long)got.step, (unsigned long long)got.data_position, (long long)step);
	t->step = got.step;
	t->optim.t = got.optim_t;
	return 0;
}
