/* recover.c: a stopped member's raft log, read and given a new configuration (recover.h). */
#include "raft/recover.h"

#include <raft.h>
#include <raft/uv.h>
#include <string.h>
#include <uv.h>

/* raft over raft_uv on a private loop, never started: only its log is touched. */
struct offline {
	uv_loop_t loop;
	struct raft_uv_transport transport;
	struct raft_io io;
	struct raft_fsm fsm;
	struct raft raft;
	int loop_up, transport_up, io_up, raft_up;
};

/* The message of the last failure: raft's, raft_uv's, or the code's name. */
static const char *offline_reason(struct offline *o, int rv)
{
	if (o->raft_up && raft_errmsg(&o->raft)[0] != '\0')
		return raft_errmsg(&o->raft);
	if (o->io_up && o->io.errmsg[0] != '\0')
		return o->io.errmsg;
	return raft_strerror(rv);
}

static int offline_open(struct offline *o, const char *data_dir, uint64_t id,
                        const char *raft_address, struct yard_err *err)
{
	int rv;
	memset(o, 0, sizeof *o);
	if ((rv = uv_loop_init(&o->loop)) != 0)
		return yard_err_set(err, YARD_EIO, "event loop: %s", uv_strerror(rv));
	o->loop_up = 1;
	if ((rv = raft_uv_tcp_init(&o->transport, &o->loop)) != 0)
		return yard_err_set(err, YARD_EIO, "raft transport: %s", raft_strerror(rv));
	o->transport_up = 1;
	if ((rv = raft_uv_init(&o->io, &o->loop, data_dir, &o->transport)) != 0)
		return yard_err_set(err, YARD_EIO, "raft storage in %s: %s", data_dir,
		                    o->io.errmsg[0] ? o->io.errmsg : raft_strerror(rv));
	o->io_up = 1;
	o->fsm.version = 2;
	if ((rv = raft_init(&o->raft, &o->io, &o->fsm, id, raft_address)) != 0)
		return yard_err_set(err, YARD_EIO, "raft init in %s: %s", data_dir,
		                    offline_reason(o, rv));
	o->raft_up = 1;
	return 0;
}

static void offline_raft_closed(struct raft *r)
{
	(void)r;
}

/* Closes what offline_open set up, in its reverse order, running the loop until every
 * handle has closed. */
static void offline_close(struct offline *o)
{
	if (!o->loop_up)
		return;
	if (o->raft_up)
		raft_close(&o->raft, offline_raft_closed);
	uv_run(&o->loop, UV_RUN_DEFAULT);
	if (o->io_up)
		raft_uv_close(&o->io);
	if (o->transport_up)
		raft_uv_tcp_close(&o->transport);
	uv_run(&o->loop, UV_RUN_DEFAULT);
	uv_loop_close(&o->loop);
}

/* Frees what raft_io's load handed over: consecutive entries share one batch. */
static void loaded_free(struct raft_snapshot *snapshot, struct raft_entry *entries, size_t n)
{
	void *batch = NULL;
	for (size_t i = 0; i < n; i++)
		if (entries[i].batch != batch) {
			batch = entries[i].batch;
			raft_free(batch);
		}
	raft_free(entries);
	if (snapshot != NULL) {
		raft_configuration_close(&snapshot->configuration);
		for (unsigned i = 0; i < snapshot->n_bufs; i++)
			raft_free(snapshot->bufs[i].base);
		raft_free(snapshot->bufs);
		raft_free(snapshot);
	}
}

/* Loads data_dir's log as raft_start would and fills *out (when not NULL) with what it
 * holds. */
static int offline_load(struct offline *o, const char *data_dir, struct recover_log_info *out,
                        struct yard_err *err)
{
	struct raft_snapshot *snapshot = NULL;
	struct raft_entry *entries = NULL;
	raft_term term = 0;
	raft_id voted_for = 0;
	raft_index start = 0;
	size_t n = 0;
	int rv = o->io.load(&o->io, &term, &voted_for, &snapshot, &start, &entries, &n);
	if (rv != 0)
		return yard_err_set(err, YARD_EIO, "raft log in %s: %s", data_dir,
		                    offline_reason(o, rv));
	if (out != NULL) {
		out->term = term;
		out->voted_for = voted_for;
		if (snapshot != NULL) {
			out->snapshot_index = out->last_index = snapshot->index;
			out->snapshot_term = out->last_term = snapshot->term;
		}
		out->first_index = start;
		out->n_entries = n;
		if (n > 0) {
			out->last_index = start + n - 1;
			out->last_term = entries[n - 1].term;
		}
	}
	loaded_free(snapshot, entries, n);
	return 0;
}

int recover_log_info(const char *data_dir, uint64_t id, const char *raft_address,
                     struct recover_log_info *out, struct yard_err *err)
{
	struct offline o;
	int rc = offline_open(&o, data_dir, id, raft_address, err);
	memset(out, 0, sizeof *out);
	if (rc == 0)
		rc = offline_load(&o, data_dir, out, err);
	offline_close(&o);
	return rc;
}

/* conf: the members, every one a voter; YARD_EINVAL (and nothing to close) when the list is
 * empty, repeats an id or leaves out id. */
static int configuration_of(const struct consensus_member *members, int n_members, uint64_t id,
                            struct raft_configuration *conf, struct yard_err *err)
{
	int listed = 0;
	if (n_members < 1)
		return yard_err_set(err, YARD_EINVAL, "the new configuration names no member");
	raft_configuration_init(conf);
	for (int i = 0; i < n_members; i++) {
		int rv = raft_configuration_add(conf, members[i].id, members[i].raft_address,
		                                RAFT_VOTER);
		if (rv != 0) {
			raft_configuration_close(conf);
			return yard_err_set(err, YARD_EINVAL, "member %llu (%s): %s",
			                    (unsigned long long)members[i].id,
			                    members[i].raft_address, raft_strerror(rv));
		}
		listed |= members[i].id == id;
	}
	if (!listed) {
		raft_configuration_close(conf);
		return yard_err_set(err, YARD_EINVAL,
		                    "the new configuration leaves out this member (%llu)",
		                    (unsigned long long)id);
	}
	return 0;
}

/* What to do with a stopped member's log once it is open, given the new configuration. */
typedef int (*offline_action)(struct offline *o, struct raft_configuration *conf,
                              const char *data_dir, const void *arg, struct yard_err *err);

/* Builds the configuration of members, opens data_dir's log, runs act, and closes both. */
static int with_configuration(const char *data_dir, uint64_t id, const char *raft_address,
                              const struct consensus_member *members, int n_members,
                              offline_action act, const void *arg, struct yard_err *err)
{
	struct raft_configuration conf;
	struct offline o;
	int rc = configuration_of(members, n_members, id, &conf, err);
	if (rc != 0)
		return rc; /* nothing to close */
	rc = offline_open(&o, data_dir, id, raft_address, err);
	if (rc == 0)
		rc = act(&o, &conf, data_dir, arg, err);
	raft_configuration_close(&conf);
	offline_close(&o);
	return rc;
}

/* raft_recover with conf, then the term after *(const uint64_t *)arg. */
static int force_configuration(struct offline *o, struct raft_configuration *conf,
                               const char *data_dir, const void *arg, struct yard_err *err)
{
	uint64_t term = *(const uint64_t *)arg + 1;
	int rv = raft_recover(&o->raft, conf);
	if (rv != 0)
		return yard_err_set(err, YARD_EIO, "new configuration in %s: %s", data_dir,
		                    offline_reason(o, rv));
	if ((rv = o->io.set_term(&o->io, term)) != 0)
		return yard_err_set(err, YARD_EIO, "term %llu in %s: %s", (unsigned long long)term,
		                    data_dir, offline_reason(o, rv));
	return 0;
}

int recover_force_configuration(const char *data_dir, uint64_t id, const char *raft_address,
                                const struct consensus_member *members, int n_members,
                                uint64_t term, struct yard_err *err)
{
	return with_configuration(data_dir, id, raft_address, members, n_members,
	                          force_configuration, &term, err);
}

struct put_wait {
	int done, status;
};

static void put_done(struct raft_io_snapshot_put *req, int status)
{
	struct put_wait *w = req->data;
	w->done = 1;
	w->status = status;
}

/* raft_bootstrap with conf, then the image (a struct raft_buffer at arg) put as the
 * snapshot at index 1, the log before it dropped. */
static int install_image(struct offline *o, struct raft_configuration *conf, const char *data_dir,
                         const void *arg, struct yard_err *err)
{
	int rv = raft_bootstrap(&o->raft, conf);
	if (rv != 0)
		return yard_err_set(err, YARD_EIO, "raft bootstrap in %s: %s", data_dir,
		                    offline_reason(o, rv));
	int rc = offline_load(o, data_dir, NULL, err);
	if (rc != 0)
		return rc;
	struct raft_buffer buf = *(const struct raft_buffer *)arg;
	struct raft_snapshot snap = {.index = 1,
	                             .term = 1,
	                             .configuration = *conf,
	                             .configuration_index = 1,
	                             .bufs = &buf,
	                             .n_bufs = 1};
	struct put_wait w = {0, 0};
	struct raft_io_snapshot_put req = {.data = &w};
	rv = o->io.snapshot_put(&o->io, 0, &req, &snap, put_done);
	while (rv == 0 && !w.done && uv_run(&o->loop, UV_RUN_ONCE) != 0)
		;
	if (rv == 0 && !w.done)
		rv = RAFT_IOERR;
	if (rv == 0)
		rv = w.status;
	if (rv != 0)
		return yard_err_set(err, YARD_EIO, "snapshot in %s: %s", data_dir,
		                    offline_reason(o, rv));
	return 0;
}

int recover_install_image(const char *data_dir, uint64_t id, const char *raft_address,
                          const struct consensus_member *members, int n_members, const void *image,
                          size_t len, struct yard_err *err)
{
	struct raft_buffer buf = {.base = (void *)image, .len = len};
	return with_configuration(data_dir, id, raft_address, members, n_members, install_image,
	                          &buf, err);
}
