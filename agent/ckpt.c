/* ckpt.c: the node's side of the "controller" checkpoint store.
 *
 * Ranks of a job whose store is "controller" write their checkpoints into a node-local
 * directory, DATA_DIR/checkpoints/JOB (YARD_CKPT_DIR; layout of dataplane/trainer_ckpt.c:
 * step-NNNNNNNN/rank-NNNNN.shard, renamed into place when whole). On every heartbeat tick
 * the agent looks for finished shards of the ranks it runs and uploads the oldest one to the
 * leader (declare, chunks of FSM_CHUNK_MAX, commit; web/api_ckpt.c; a shard of one chunk
 * travels with its declaration), then deletes the local
 * copy; a failed upload is retried on a later tick, through whichever controller leads by
 * then. A shard the controller no longer wants (a newer checkpoint is complete, the
 * generation is over) is dropped.
 *
 * Restore: before starting the ranks of a new generation with YARD_RESUME=1, the agent
 * empties the job's local directory, downloads the shards of its ranks for the step the
 * controller named (restore_step of the desired entry; for a checkpoint of a smaller world,
 * restore_world, the shard of rank r mod that world; for a checkpoint of another layout, as
 * the first shard's header says, also the shards of that layout's data-parallel replica 0,
 * which the trainer reshards), checks each one's sha256, and writes the step's MANIFEST
 * (with the layout line when the shards are the trainer's), so the trainer finds exactly
 * that checkpoint. Only then are
 * the ranks started. Transfers run on the thread pool: up to AGENT_CKPT_UPLOADS uploads at a
 * time, or one download alone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/base64.h"
#include "common/common.h"
#include "dataplane/ckpt.h"
#include "jobs/fsm.h"
#include "jobs/sha256.h"

#define UPLOAD_RETRY_MS 500
#define AGENT_CKPT_BACKLOG_STEPS 8 /* a rank's shards waiting for upload, at most */
#define SHARD_MAX_BYTES (1ull << 32)
#define AGENT_CKPT_REPLICA_MAX 65536 /* tp x pp of a checkpoint's layout, at most */

enum transfer_kind { TRANSFER_UPLOAD, TRANSFER_DOWNLOAD };

struct transfer {
	uv_work_t work;
	struct agent *agent;
	enum transfer_kind kind;
	char job[AGENT_JOB_ID_MAX + 1];
	int64_t step, generation;
	int ranks[AGENT_MAX_RANKS];
	int n_ranks;
	int world;
	int layout[4]; /* download: the ranks' tp, pp, virtual stages, micro-batches (0: unknown) */
	char path[PATH_MAX + 64]; /* upload: the shard file */
	char token[256];
	char leader_url[512]; /* this transfer's copy; the agent's is updated when it ends */
	int slot;             /* upload: index in a->ckpt_uploading */
	/* result */
	int ok;   /* done: the shard is stored (upload) or every shard is in place (download) */
	int drop; /* upload: the controller does not want this shard; delete it */
	char why[512];
};

void ckpt_job_dir(const struct agent *a, const char *job, char *out, size_t out_len)
{
	snprintf(out, out_len, "%s/%s", a->ckpt_root, job);
}

int ckpt_init(struct agent *a, struct yard_err *err)
{
	char real[PATH_MAX];
	if (realpath(a->cfg.data_dir, real) == NULL)
		return yard_err_set(err, YARD_EIO, "data dir %s: %s", a->cfg.data_dir,
		                    strerror(errno));
	snprintf(a->ckpt_root, sizeof a->ckpt_root, "%s/checkpoints", real);
	if (mkdir(a->ckpt_root, 0755) != 0 && errno != EEXIST)
		return yard_err_set(err, YARD_EIO, "%s: cannot create: %s", a->ckpt_root,
		                    strerror(errno));
	return 0;
}

int ckpt_is_controller(const json_t *desired)
{
	const char *store =
	    json_string_value(json_object_get(json_object_get(desired, "checkpoint"), "store"));
	return store != NULL && strcmp(store, "controller") == 0;
}

/* ---- local files ---- */

static void remove_dir_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		char path[PATH_MAX + 300];
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

/* Removes every step directory of a job's local checkpoint directory. */
static void clear_job_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		long long step;
		char tail, path[PATH_MAX + 300];
		if (sscanf(e->d_name, "step-%lld%c", &step, &tail) != 1)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		remove_dir_files(path);
	}
	closedir(d);
}

static int write_file_atomic(const char *path, const void *data, size_t len, char *why,
                             size_t why_len)
{
	char tmp[PATH_MAX + 80];
	snprintf(tmp, sizeof tmp, "%s.download", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	size_t off = 0;
	while (fd >= 0 && off < len) {
		ssize_t n = write(fd, (const char *)data + off, len - off);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	int ok = fd >= 0 && off == len && fsync(fd) == 0;
	if (fd >= 0)
		close(fd);
	if (!ok || rename(tmp, path) != 0) {
		snprintf(why, why_len, "%s: cannot write: %s", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* Removes a step directory whose shards are all uploaded: empty, or holding only the
 * MANIFEST rank 0 wrote. Anything else in it keeps it. */
static void step_dir_tidy(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int other = 0;
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL)
		other |= strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
		         strcmp(e->d_name, "MANIFEST") != 0;
	closedir(d);
	if (other)
		return;
	char manifest[PATH_MAX + 200];
	snprintf(manifest, sizeof manifest, "%s/MANIFEST", dir);
	unlink(manifest);
	rmdir(dir);
}

/* ---- transfers (thread pool) ---- */

static const char *answer_error(const struct agent_response *rs)
{
	json_t *j = rs->body != NULL ? json_loadb(rs->body, rs->len, 0, NULL) : NULL;
	static __thread char msg[300];
	const char *e = json_string_value(json_object_get(j, "error"));
	snprintf(msg, sizeof msg, "%s", e != NULL ? e : "(no error message)");
	json_decref(j);
	return msg;
}

/* Status codes after which the controller will never take this shard. */
static int unwanted(long status)
{
	return status == 403 || status == 404 || status == 409 || status == 410 || status == 400;
}

static int request(struct transfer *t, const struct agent_request *rq, struct agent_response *rs)
{
	struct yard_err err = {0};
	if (agent_http_request(t->agent->cfg.controllers, t->leader_url, sizeof t->leader_url, rq,
	                       rs, &err) != 0) {
		snprintf(t->why, sizeof t->why, "%s", err.msg);
		return -1;
	}
	return 0;
}

static void upload_run(struct transfer *t)
{
	/* test hook (tests/integration/train_ckpt_final.sh): every upload starts this late */
	const char *delay = getenv("YARD_TEST_UPLOAD_DELAY_MS");
	if (delay != NULL)
		yard_sleep_ms(strtoull(delay, NULL, 10));
	char path[256], base[200];
	struct agent_response rs;
	unsigned char *data = NULL;
	struct stat st;
	int fd = open(t->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 1 ||
	    (uint64_t)st.st_size > SHARD_MAX_BYTES) {
		snprintf(t->why, sizeof t->why, "%s: cannot read (or empty, or over 4 GiB): %s",
		         t->path, strerror(errno));
		t->drop = fd >= 0 || errno == ENOENT; /* gone: nothing left to upload */
		if (fd >= 0)
			close(fd);
		return;
	}
	size_t len = (size_t)st.st_size, off = 0;
	data = malloc(len);
	while (data != NULL && off < len) {
		ssize_t n = read(fd, data + off, len - off);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	close(fd);
	if (data == NULL || off != len) {
		snprintf(t->why, sizeof t->why, "%s: short read", t->path);
		free(data);
		return;
	}
	char sha[SHA256_HEX_LEN + 1];
	sha256_hex(data, len, sha);
	snprintf(base, sizeof base, "/v1/jobs/%s/checkpoints/%lld/shards/%d", t->job,
	         (long long)t->step, t->ranks[0]);
	json_t *decl = json_pack("{s:I,s:I,s:s}", "generation", (json_int_t)t->generation, "size",
	                         (json_int_t)len, "sha256", sha);
	if (len <= FSM_CHUNK_MAX) { /* one request (and one raft entry) for a small shard */
		char *text = malloc(base64_encoded_len(len) + 1);
		if (text != NULL) {
			base64_encode(data, len, text);
			json_object_set_new(decl, "data", json_string(text));
			free(text);
		}
	}
	char *decl_text = json_dumps(decl, JSON_COMPACT);
	json_decref(decl);
	struct agent_request rq = {.method = "POST",
	                           .path = base,
	                           .token = t->token,
	                           .body = decl_text,
	                           .body_len = decl_text ? strlen(decl_text) : 0};
	int rc = request(t, &rq, &rs);
	free(decl_text);
	if (rc != 0)
		goto out;
	if (rs.status != 200 && rs.status != 201) {
		snprintf(t->why, sizeof t->why, "declare: HTTP %ld: %s", rs.status,
		         answer_error(&rs));
		t->drop = unwanted(rs.status);
		free(rs.body);
		goto out;
	}
	{
		json_t *j = json_loadb(rs.body, rs.len, 0, NULL);
		t->ok = json_is_true(json_object_get(j, "stored"));
		json_decref(j);
		free(rs.body);
		if (t->ok)
			goto out;
	}
	for (size_t index = 0; index * FSM_CHUNK_MAX < len; index++) {
		size_t start = index * FSM_CHUNK_MAX;
		size_t n = len - start < FSM_CHUNK_MAX ? len - start : FSM_CHUNK_MAX;
		snprintf(path, sizeof path, "%s/chunks/%zu", base, index);
		struct agent_request chunk = {.method = "PUT",
		                              .path = path,
		                              .token = t->token,
		                              .content_type = "application/octet-stream",
		                              .body = data + start,
		                              .body_len = n,
		                              .timeout_ms = 30000};
		if (request(t, &chunk, &rs) != 0)
			goto out;
		free(rs.body);
		if (rs.status != 200) {
			snprintf(t->why, sizeof t->why, "chunk %zu: HTTP %ld", index, rs.status);
			t->drop = unwanted(rs.status) && rs.status != 409;
			goto out;
		}
	}
	snprintf(path, sizeof path, "%s/commit", base);
	struct agent_request commit = {
	    .method = "POST", .path = path, .token = t->token, .body = "{}", .body_len = 2};
	if (request(t, &commit, &rs) != 0)
		goto out;
	if (rs.status == 200) {
		json_t *j = json_loadb(rs.body, rs.len, 0, NULL);
		t->ok = json_is_true(json_object_get(j, "stored"));
		json_decref(j);
		if (!t->ok)
			snprintf(t->why, sizeof t->why, "commit: not stored");
	} else {
		snprintf(t->why, sizeof t->why, "commit: HTTP %ld: %s", rs.status,
		         answer_error(&rs));
		t->drop = unwanted(rs.status);
	}
	free(rs.body);
out:
	free(data);
}

/* Fetches the shard of rank into stepdir, its sha256 checked. 0 when it is in place. */
static int fetch_shard(struct transfer *t, const char *stepdir, int rank)
{
	char path[256], file[PATH_MAX + 140], got[SHA256_HEX_LEN + 1];
	struct agent_response rs;
	snprintf(path, sizeof path, "/v1/jobs/%s/checkpoints/%lld/shards/%d", t->job,
	         (long long)t->step, rank);
	struct agent_request rq = {.method = "GET",
	                           .path = path,
	                           .token = t->token,
	                           .max_response = SHARD_MAX_BYTES,
	                           .timeout_ms = 60000};
	if (request(t, &rq, &rs) != 0)
		return -1;
	if (rs.status != 200 || rs.body == NULL) {
		snprintf(t->why, sizeof t->why, "GET %s: HTTP %ld: %s", path, rs.status,
		         answer_error(&rs));
		free(rs.body);
		return -1;
	}
	sha256_hex(rs.body, rs.len, got);
	if (strcmp(got, rs.sha256) != 0) {
		snprintf(t->why, sizeof t->why,
		         "GET %s: the %zu bytes hash to sha256 %s, the controller says %s", path,
		         rs.len, got, rs.sha256[0] ? rs.sha256 : "nothing");
		free(rs.body);
		return -1;
	}
	snprintf(file, sizeof file, "%s/rank-%05d.shard", stepdir, rank);
	int rc = write_file_atomic(file, rs.body, rs.len, t->why, sizeof t->why);
	free(rs.body);
	return rc;
}

static void download_run(struct transfer *t)
{
	char dir[PATH_MAX + 64], stepdir[PATH_MAX + 100];
	ckpt_job_dir(t->agent, t->job, dir, sizeof dir);
	clear_job_dir(dir);
	snprintf(stepdir, sizeof stepdir, "%s/step-%08lld", dir, (long long)t->step);
	if (agent_mkdir_p(stepdir) != 0) {
		snprintf(t->why, sizeof t->why, "%s: cannot create: %s", stepdir, strerror(errno));
		return;
	}
	for (int i = 0; i < t->n_ranks; i++)
		if (fetch_shard(t, stepdir, t->ranks[i]) != 0)
			return;
	/* The layout that wrote the checkpoint, as its shards say (a command job's files are
	 * not shards: nothing is known). When the job was planned again (another tp, pp,
	 * virtual stages or micro-batches), each rank assembles its tensors from the shards of
	 * the checkpoint's data-parallel replica 0, ranks 0..tp*pp-1 of its layout
	 * (dataplane/trainer_ckpt.c): those are fetched too. */
	char first[PATH_MAX + 140];
	struct ckpt_meta old;
	struct yard_err ignored = {0};
	snprintf(first, sizeof first, "%s/rank-%05d.shard", stepdir, t->ranks[0]);
	int known = t->n_ranks > 0 && ckpt_peek(first, &old, &ignored) == 0 && old.tp >= 1 &&
	            old.pp >= 1 && (int64_t)old.tp * old.pp <= AGENT_CKPT_REPLICA_MAX;
	if (known && t->layout[0] > 0 &&
	    (old.tp != t->layout[0] || old.pp != t->layout[1] || old.v != t->layout[2] ||
	     old.m != t->layout[3])) {
		int fetched = t->n_ranks;
		for (int r = 0; r < old.tp * old.pp; r++) {
			int have = 0;
			for (int i = 0; i < t->n_ranks && !have; i++)
				have = t->ranks[i] == r;
			if (!have && fetch_shard(t, stepdir, r) != 0)
				return;
			fetched += !have;
		}
		t->n_ranks = fetched; /* for the log: how many shards came */
	}
	/* the manifest is the controller's record, written here in the trainer's format */
	char manifest[PATH_MAX + 120], text[256];
	snprintf(manifest, sizeof manifest, "%s/MANIFEST", stepdir);
	int len = snprintf(text, sizeof text, "job %s\nstep %lld\nworld %d\nformat %u\n", t->job,
	                   (long long)t->step, t->world, CKPT_VERSION);
	if (known)
		len += snprintf(text + len, sizeof text - (size_t)len, "layout %d %d %d %d %d\n",
		                old.dp, old.tp, old.pp, old.v, old.m);
	if (write_file_atomic(manifest, text, (size_t)len, t->why, sizeof t->why) != 0)
		return;
	t->ok = 1;
}

static void transfer_run(uv_work_t *w)
{
	struct transfer *t = (struct transfer *)w;
	if (t->kind == TRANSFER_UPLOAD)
		upload_run(t);
	else
		download_run(t);
}

static struct agent_restore *restore_find(struct agent *a, const char *job, int64_t generation)
{
	for (int i = 0; i < AGENT_MAX_RESTORES; i++)
		if (a->restores[i].in_use && a->restores[i].generation == generation &&
		    strcmp(a->restores[i].job, job) == 0)
			return &a->restores[i];
	return NULL;
}

static void transfer_done(uv_work_t *w, int status)
{
	struct transfer *t = (struct transfer *)w;
	struct agent *a = t->agent;
	(void)status;
	snprintf(a->ckpt_leader_url, sizeof a->ckpt_leader_url, "%s", t->leader_url);
	if (t->kind == TRANSFER_UPLOAD) {
		a->ckpt_uploads--;
		a->ckpt_uploading[t->slot][0] = '\0';
		if (t->ok || t->drop) {
			if (t->ok)
				log_info("checkpoint shard of rank %d of %s at step %lld uploaded",
				         t->ranks[0], t->job, (long long)t->step);
			else
				log_warn("checkpoint shard %s dropped: %s", t->path, t->why);
			unlink(t->path);
		} else {
			log_warn("upload of %s failed (retrying): %s", t->path, t->why);
			a->ckpt_retry_mono_ms = yard_now_mono_ms() + UPLOAD_RETRY_MS;
		}
		free(t);
		ckpt_tick(a); /* the next shard at once: uploads must keep up with training */
		for (int i = 0; i < AGENT_MAX_RANKS; i++)
			if (a->ranks[i].in_use && a->ranks[i].exit_held == 1) {
				if (a->rank_exited != NULL) /* a held exit may be reported now */
					a->rank_exited(a);
				break;
			}
		return;
	} else {
		a->ckpt_downloading = 0;
		struct agent_restore *r = restore_find(a, t->job, t->generation);
		if (r != NULL) {
			r->state = t->ok ? RESTORE_DONE : RESTORE_FAILED;
			r->failed_mono_ms = yard_now_mono_ms();
		}
		if (t->ok)
			log_info("job %s generation %lld: %d shard(s) of checkpoint step %lld"
			         " downloaded and verified",
			         t->job, (long long)t->generation, t->n_ranks, (long long)t->step);
		else
			log_error("job %s generation %lld: restoring checkpoint step %lld failed"
			          " (retrying): %s",
			          t->job, (long long)t->generation, (long long)t->step, t->why);
	}
	free(t);
}

static int transfer_start(struct agent *a, struct transfer *t)
{
	t->agent = a;
	snprintf(t->token, sizeof t->token, "%s", a->node_token);
	snprintf(t->leader_url, sizeof t->leader_url, "%s", a->ckpt_leader_url);
	if (t->kind == TRANSFER_UPLOAD) {
		a->ckpt_uploads++;
		snprintf(a->ckpt_uploading[t->slot], sizeof a->ckpt_uploading[t->slot], "%s",
		         t->path);
	} else {
		a->ckpt_downloading = 1;
	}
	if (uv_queue_work(a->loop, &t->work, transfer_run, transfer_done) != 0) {
		if (t->kind == TRANSFER_UPLOAD) {
			a->ckpt_uploads--;
			a->ckpt_uploading[t->slot][0] = '\0';
		} else {
			a->ckpt_downloading = 0;
		}
		free(t);
		return -1;
	}
	return 0;
}

/* ---- restore ---- */

int ckpt_ready(struct agent *a, const json_t *desired_all, const json_t *d)
{
	const char *job = json_string_value(json_object_get(d, "job"));
	const char *resume =
	    json_string_value(json_object_get(json_object_get(d, "env"), "YARD_RESUME"));
	int64_t generation = json_integer_value(json_object_get(d, "generation"));
	if (!ckpt_is_controller(d) || resume == NULL || strcmp(resume, "1") != 0)
		return 1;
	int64_t step =
	    json_integer_value(json_object_get(json_object_get(d, "checkpoint"), "restore_step"));
	struct agent_restore *r = restore_find(a, job, generation);
	if (r != NULL && r->state == RESTORE_DONE)
		return 1;
	if (r != NULL && (r->state == RESTORE_RUNNING ||
	                  yard_now_mono_ms() - r->failed_mono_ms < UPLOAD_RETRY_MS))
		return 0;
	if (r == NULL) {
		for (int i = 0; i < AGENT_MAX_RESTORES && r == NULL; i++)
			if (!a->restores[i].in_use)
				r = &a->restores[i];
		if (r == NULL) { /* forget the oldest-looking entry: a restore is short-lived */
			r = &a->restores[a->restore_next++ % AGENT_MAX_RESTORES];
		}
		memset(r, 0, sizeof *r);
		r->in_use = 1;
		snprintf(r->job, sizeof r->job, "%s", job);
		r->generation = generation;
		r->step = step;
	}
	if (step < 0) { /* nothing complete to restore: start clean */
		char dir[PATH_MAX + 64];
		ckpt_job_dir(a, job, dir, sizeof dir);
		clear_job_dir(dir);
		r->state = RESTORE_DONE;
		log_info("job %s generation %lld: no complete checkpoint to restore", job,
		         (long long)generation);
		return 1;
	}
	if (a->ckpt_downloading || a->ckpt_uploads > 0) /* it empties the job's directory */
		return 0;
	struct transfer *t = calloc(1, sizeof *t);
	if (t == NULL)
		return 0;
	t->kind = TRANSFER_DOWNLOAD;
	snprintf(t->job, sizeof t->job, "%s", job);
	t->step = step;
	t->generation = generation;
	t->world = (int)json_integer_value(json_object_get(d, "world_size"));
	/* a checkpoint of a smaller dp (the job had shrunk, failure.allow_shrink_dp): rank r
	 * restores the shard of rank r mod its world (dataplane/trainer.h), fetched once */
	int ckpt_world = (int)json_integer_value(
	    json_object_get(json_object_get(d, "checkpoint"), "restore_world"));
	if (ckpt_world > 0 && ckpt_world < t->world)
		t->world = ckpt_world;
	/* the layout the ranks run, to tell a checkpoint of another one (download_run) */
	const json_t *par = json_object_get(json_object_get(d, "spec"), "parallel");
	static const char *const fields[4] = {"tp", "pp", "virtual_stages", "micro_batches"};
	for (int k = 0; k < 4 && json_is_object(par); k++)
		t->layout[k] = (int)json_integer_value(json_object_get(par, fields[k]));
	size_t i;
	json_t *other;
	json_array_foreach(desired_all, i, other)
	{
		const char *ojob = json_string_value(json_object_get(other, "job"));
		if (ojob == NULL || strcmp(ojob, job) != 0 ||
		    json_integer_value(json_object_get(other, "generation")) != generation ||
		    t->n_ranks == AGENT_MAX_RANKS)
			continue;
		int source = (int)json_integer_value(json_object_get(other, "rank")) % t->world;
		int seen = 0;
		for (int k = 0; k < t->n_ranks && !seen; k++)
			seen = t->ranks[k] == source;
		if (!seen)
			t->ranks[t->n_ranks++] = source;
	}
	r->state = RESTORE_RUNNING;
	log_info("job %s generation %lld: downloading checkpoint step %lld for %d rank(s)", job,
	         (long long)generation, (long long)step, t->n_ranks);
	if (transfer_start(a, t) != 0)
		r->state = RESTORE_FAILED;
	return 0;
}

/* ---- upload ---- */

static int uploading(const struct agent *a, const char *path)
{
	for (int i = 0; i < AGENT_CKPT_UPLOADS; i++)
		if (strcmp(a->ckpt_uploading[i], path) == 0)
			return 1;
	return 0;
}

/* Whether a newer generation of r's job is on this node (a rank or a restore of it). The
 * shards under the job's directory are then that generation's: the checkpoint it restored
 * (downloaded) and those its ranks write, at the same paths; an exited rank of an older
 * generation (kept until its log is sent, re-read after an agent restart) must not upload
 * them: the controller refuses an older generation's shard (409) and the file would be
 * dropped under the new generation's rank. */
static int superseded(const struct agent *a, const struct agent_rank *r)
{
	for (int i = 0; i < AGENT_MAX_RANKS; i++)
		if (a->ranks[i].in_use && a->ranks[i].generation > r->generation &&
		    strcmp(a->ranks[i].job, r->job) == 0)
			return 1;
	for (int i = 0; i < AGENT_MAX_RESTORES; i++)
		if (a->restores[i].in_use && a->restores[i].generation > r->generation &&
		    strcmp(a->restores[i].job, r->job) == 0)
			return 1;
	return 0;
}

/* The oldest finished shard of a rank this node runs (a controller-store job), skipping
 * steps at or before the checkpoint its generation restored, and ranks of a generation
 * that a newer one superseded here. */
static int next_shard(struct agent *a, struct transfer *t)
{
	int found = 0;
	for (int k = 0; k < AGENT_MAX_RANKS; k++) {
		const struct agent_rank *r = &a->ranks[k];
		char dir[PATH_MAX + 64];
		if (!r->in_use || !r->ckpt_controller || superseded(a, r))
			continue;
		const struct agent_restore *rs = restore_find(a, r->job, r->generation);
		int64_t floor = rs != NULL ? rs->step : -1;
		int64_t newest_dir = -1, oldest_pending = -1;
		int pending = 0;
		ckpt_job_dir(a, r->job, dir, sizeof dir);
		DIR *d = opendir(dir);
		struct dirent *e;
		if (d == NULL)
			continue;
		while ((e = readdir(d)) != NULL) {
			long long step;
			char tail, file[PATH_MAX + 140];
			struct stat st;
			if (sscanf(e->d_name, "step-%lld%c", &step, &tail) != 1)
				continue;
			if (step > newest_dir)
				newest_dir = step;
			if (step <= floor)
				continue;
			snprintf(file, sizeof file, "%s/%s/rank-%05d.shard", dir, e->d_name,
			         r->rank);
			if (stat(file, &st) != 0 || uploading(a, file))
				continue;
			pending++;
			if (oldest_pending < 0 || step < oldest_pending)
				oldest_pending = step;
			if (found && step >= t->step)
				continue;
			found = 1;
			t->step = step;
			t->generation = r->generation;
			t->ranks[0] = r->rank;
			t->n_ranks = 1;
			snprintf(t->job, sizeof t->job, "%s", r->job);
			snprintf(t->path, sizeof t->path, "%s", file);
		}
		/* uploads that fall behind training drop their oldest shard rather than fill the
		 * disk; the controller keeps its newest complete checkpoint meanwhile */
		if (pending > AGENT_CKPT_BACKLOG_STEPS) {
			char old[PATH_MAX + 140];
			snprintf(old, sizeof old, "%s/step-%08lld/rank-%05d.shard", dir,
			         (long long)oldest_pending, r->rank);
			log_warn(
			    "rank %d of %s: %d checkpoints wait for upload; dropping step %lld",
			    r->rank, r->job, pending, (long long)oldest_pending);
			unlink(old);
			if (found && strcmp(t->path, old) == 0)
				found = 0; /* the next scan picks the next one */
		}
		/* step directories emptied by uploads, older than the newest one: every rank has
		 * finished writing them (a checkpoint is collective), so they can go */
		rewinddir(d);
		while ((e = readdir(d)) != NULL) {
			long long step;
			char tail, sub[PATH_MAX + 140];
			if (sscanf(e->d_name, "step-%lld%c", &step, &tail) != 1 ||
			    step >= newest_dir || step == floor)
				continue;
			snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
			step_dir_tidy(sub);
		}
		closedir(d);
	}
	return found;
}

/* Shards of rank r on this node that the controller store has not taken yet: written and
 * waiting, or uploading, at steps after the checkpoint its generation restored. */
static int shards_left(struct agent *a, const struct agent_rank *r)
{
	char dir[PATH_MAX + 64];
	const struct agent_restore *rs = restore_find(a, r->job, r->generation);
	int64_t floor = rs != NULL ? rs->step : -1;
	int n = 0;
	ckpt_job_dir(a, r->job, dir, sizeof dir);
	DIR *d = opendir(dir);
	struct dirent *e;
	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		long long step;
		char tail, file[PATH_MAX + 140];
		struct stat st;
		if (sscanf(e->d_name, "step-%lld%c", &step, &tail) != 1 || step <= floor)
			continue;
		snprintf(file, sizeof file, "%s/%s/rank-%05d.shard", dir, e->d_name, r->rank);
		n += stat(file, &st) == 0;
	}
	closedir(d);
	return n;
}

void ckpt_hold_exits(struct agent *a)
{
	uint64_t now = yard_now_mono_ms();
	for (int i = 0; i < AGENT_MAX_RANKS; i++) {
		struct agent_rank *r = &a->ranks[i];
		if (!r->in_use || !r->exited || r->exit_held == 2)
			continue;
		if (r->exit_held == 0) {
			r->exit_seen_mono_ms = now;
			if (!r->ckpt_controller || r->exit_code != 0 || r->term_signal != 0 ||
			    r->stopping || a->cfg.upload_wait_ms <= 0 || superseded(a, r)) {
				r->exit_held = 2;
				continue;
			}
		}
		int left = shards_left(a, r);
		if (left == 0) {
			if (r->exit_held == 1)
				log_info(
				    "rank %d of %s: its checkpoint shards are stored; reporting "
				    "its exit",
				    r->rank, r->job);
			r->exit_held = 2;
		} else if (now - r->exit_seen_mono_ms >= (uint64_t)a->cfg.upload_wait_ms) {
			log_warn(
			    "rank %d of %s: %d checkpoint shard(s) not uploaded %d ms after it "
			    "exited; reporting its exit (its job may end without them)",
			    r->rank, r->job, left, a->cfg.upload_wait_ms);
			r->exit_held = 2;
		} else {
			if (r->exit_held == 0)
				log_info(
				    "rank %d of %s exited with code 0; its exit is reported once "
				    "its %d checkpoint shard(s) are uploaded (at most %d ms)",
				    r->rank, r->job, left, a->cfg.upload_wait_ms);
			r->exit_held = 1;
		}
	}
}

void ckpt_tick(struct agent *a)
{
	if (a->ckpt_downloading || a->stopping || !a->registered ||
	    yard_now_mono_ms() < a->ckpt_retry_mono_ms)
		return;
	for (int slot = 0; slot < AGENT_CKPT_UPLOADS; slot++) {
		if (a->ckpt_uploading[slot][0] != '\0')
			continue;
		struct transfer *t = calloc(1, sizeof *t);
		if (t == NULL)
			return;
		t->kind = TRANSFER_UPLOAD;
		t->slot = slot;
		if (!next_shard(a, t)) {
			free(t);
			return;
		}
		if (transfer_start(a, t) != 0)
			return;
	}
}
