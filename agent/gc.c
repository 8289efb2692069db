/* gc.c: the node's job directories do not pile up. Each job that ran here leaves
 * DATA_DIR/jobs/JOB (its spec, every rank's output and exit files) and, with the controller
 * checkpoint store, DATA_DIR/checkpoints/JOB (shards staged for upload); nothing else removes
 * them, so a node that runs jobs for months fills its disk. Every --job-gc-interval-ms the
 * agent removes those of a job that has nothing left on this node (no rank slot, no entry
 * in the desired set, no restore running, no upload of its shards in flight) and under which
 * nothing was written for --job-dir-keep-s seconds (default a day; 0 keeps them forever).
 * Age is the newest modification time under the directory, so an agent restart forgets
 * nothing, and a rank that prints nothing for a long time is protected by its slot, not its
 * files. Symbolic links are removed, never followed. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "agent/agent.h"
#include "common/log.h"

#define GC_DEPTH 4 /* JOB/step-N/files is the deepest the agent writes */

static int job_busy(const struct agent *a, const char *job)
{
	for (int i = 0; i < AGENT_MAX_RANKS; i++)
		if (a->ranks[i].in_use && strcmp(a->ranks[i].job, job) == 0)
			return 1;
	size_t i;
	json_t *d;
	json_array_foreach(a->desired, i, d)
	{
		const char *j = json_string_value(json_object_get(d, "job"));
		if (j != NULL && strcmp(j, job) == 0)
			return 1;
	}
	for (int k = 0; k < AGENT_MAX_RESTORES; k++)
		if (a->restores[k].in_use && a->restores[k].state == RESTORE_RUNNING &&
		    strcmp(a->restores[k].job, job) == 0)
			return 1;
	char prefix[PATH_MAX + 80];
	int n = snprintf(prefix, sizeof prefix, "%s/%s/", a->ckpt_root, job);
	for (int k = 0; k < AGENT_CKPT_UPLOADS; k++)
		if (strncmp(a->ckpt_uploading[k], prefix, (size_t)n) == 0)
			return 1;
	return 0;
}

/* The newest modification time of path and of everything under it (GC_DEPTH levels). */
static time_t newest_mtime(const char *path, int depth)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return 0;
	time_t newest = st.st_mtime;
	DIR *dir;
	if (!S_ISDIR(st.st_mode) || depth >= GC_DEPTH || (dir = opendir(path)) == NULL)
		return newest;
	struct dirent *e;
	while ((e = readdir(dir)) != NULL) {
		char sub[PATH_MAX];
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub)
			continue;
		time_t t = newest_mtime(sub, depth + 1);
		if (t > newest)
			newest = t;
	}
	closedir(dir);
	return newest;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (remove(path) != 0 && errno != ENOENT) {
		log_warn("job directory cleanup: cannot remove %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

static int job_name_ok(const char *s)
{
	if (s[0] == '\0' || s[0] == '.' || strlen(s) > AGENT_JOB_ID_MAX)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
			return 0;
	return 1;
}

/* One pass over root (DATA_DIR/jobs or DATA_DIR/checkpoints); the directories removed. */
static int gc_root(struct agent *a, const char *root, time_t now)
{
	DIR *dir = opendir(root);
	if (dir == NULL)
		return 0;
	int removed = 0;
	struct dirent *e;
	while ((e = readdir(dir)) != NULL) {
		char path[PATH_MAX];
		struct stat st;
		if (!job_name_ok(e->d_name) || job_busy(a, e->d_name) ||
		    snprintf(path, sizeof path, "%s/%s", root, e->d_name) >= (int)sizeof path ||
		    lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		time_t age = now - newest_mtime(path, 0);
		if (age < a->cfg.job_dir_keep_s)
			continue;
		if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0) {
			removed++;
			log_info("removed %s: job %s has nothing on this node and nothing was "
			         "written there for %lld s (--job-dir-keep-s %lld)",
			         path, e->d_name, (long long)age, (long long)a->cfg.job_dir_keep_s);
		}
	}
	closedir(dir);
	return removed;
}

int gc_pass(struct agent *a)
{
	char jobs[PATH_MAX];
	time_t now = time(NULL);
	snprintf(jobs, sizeof jobs, "%s/jobs", a->cfg.data_dir);
	return gc_root(a, jobs, now) + gc_root(a, a->ckpt_root, now);
}

static void on_gc(uv_timer_t *t)
{
	struct agent *a = t->data;
	if (!a->stopping)
		gc_pass(a);
}

void gc_start(struct agent *a)
{
	if (a->cfg.job_dir_keep_s <= 0)
		return;
	uv_timer_init(a->loop, &a->gc_timer);
	a->gc_timer.data = a;
	uv_timer_start(&a->gc_timer, on_gc, (uint64_t)a->cfg.gc_interval_ms,
	               (uint64_t)a->cfg.gc_interval_ms);
}
