/* yardd.c: the controller's main: options, data-dir lock, the replicated state machine,
 * consensus and the HTTP API on one libuv loop; leader-time bootstrap of the admin token
 * and the member table; graceful shutdown on SIGTERM/SIGINT (leadership handed over
 * first). `yardd --dev`: one member plus a supervised yard-agent child (raft/dev.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#ifdef HAVE_TCMALLOC
#include <gperftools/tcmalloc.h>
#endif

#include "common/addr.h"
#include "common/clock.h"
#include "common/log.h"
#include "jobs/codec.h"
#include "jobs/fsm.h"
#include "raft/consensus.h"
#include "raft/datadir.h"
#include "raft/dev.h"
#include "raft/fsm_ops.h"
#include "raft/recover.h"
#include "scheduler/leader.h"
#include "web/http.h"

struct initial_member {
	uint64_t id;
	char raft_address[CONSENSUS_ADDR_MAX];
	char api_url[256];
};

static struct {
	uv_loop_t loop;
	struct fsm fsm;
	struct consensus cons;
	struct http_server *http;
	struct sched *sched;
	struct sched_config sched_cfg;
	uv_signal_t sigterm, sigint, sighup;
	struct initial_member members[CONSENSUS_MAX_MEMBERS];
	int n_members;
	char data_dir[4096];
	char admin_hash[SHA256_HEX_LEN + 1];   /* from --admin-token-file */
	char admin_secret[SHA256_HEX_LEN + 1]; /* generated when no file was given */
	int bootstrap_in_flight;
	int exit_code;
	int embargo_max_days;         /* --embargo-max-days, 0 when not given */
	int64_t checkpoint_quota_mb;  /* --checkpoint-quota-mb, 0 when not given */
	int64_t events_max;           /* --events-max, 0 when not given */
	int64_t max_heartbeats_per_s; /* --max-heartbeats-per-s, -1 when not given */
	int64_t job_retention_s;      /* --job-retention-s, -1 when not given */
} yd;

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: yardd --id N --data-dir DIR --raft-address A.B.C.D:PORT --api-address "
	    "A.B.C.D:PORT\n"
	    "             --members 'ID=RAFT_ADDR@API_URL,...' [--join] [--admin-token-file FILE]\n"
	    "             [--election-timeout-ms N] [--heartbeat-ms N] [--snapshot-threshold N]\n"
	    "             [--snapshot-trailing N] [--min-free-mb N] [--raft-batch-max 64]\n"
	    "             [--node-suspect-ms 1500] [--node-down-ms 3000] [--restart-backoff-ms "
	    "500]\n"
	    "             [--auto-grow-pct 80 (an \"auto\" job that could have more devices\n"
	    "             grows to a plan predicted at this %% of its step time or less)]\n"
	    "             [--preempt-after-s 0 (a job that waited this long for devices\n"
	    "             preempts running jobs of lower priority, which save a checkpoint\n"
	    "             and wait; 0: never)]\n"
	    "             [--node-restart-grace-ms 10000 (more silence allowed to a node whose\n"
	    "             agent said it execs a new build, until its next heartbeat; 0: none)]\n"
	    "             [--max-heartbeats-per-s 2000 (heartbeats a second from all agents:\n"
	    "             with more nodes each agent is asked to wait longer, and suspect/down\n"
	    "             grow to 3 and 6 of those intervals; 0: no bound)]\n"
	    "             [--checkpoint-quota-mb 256 (checkpoint bytes one job may store)]\n"
	    "             [--events-max N (keep the newest N events, at least 1000; default all)]\n"
	    "             [--job-retention-s 86400 (ended jobs without a complete checkpoint\n"
	    "             are collected that long after they ended; their events stay; 0: never)]\n"
	    "             [--queue-depth 100 (pending jobs a pass after a change looks at;\n"
	    "             one pass a second looks at all; 0: every pass looks at all)]\n"
	    "             [--max-active-jobs 100000 (active jobs before submissions get 429;\n"
	    "             0: no bound)]\n"
	    "             [--max-state-mb 7168 (replicated state before submissions get 507;\n"
	    "             the state machine stops at 8192; 0: no bound)]\n"
	    "             [--log-rank-bytes N (rank output kept per rank, default 1 MiB)]\n"
	    "             [--log-total-bytes N (rank output kept in all, default 64 MiB)]\n"
	    "             [--topology-label switch (the node label naming a node's switch or\n"
	    "             rack: a gang goes into one such domain when one has room; '': none)]\n"
	    "             [--tls-cert FILE --tls-key FILE (serve the API over TLS: PEM chain,\n"
	    "             leaf first, and its key; this member's API URL is then https://)]\n"
	    "             [--tls-client-ca FILE (every client, agents included, must present a\n"
	    "             certificate signed by a CA in FILE: mutual TLS)]\n"
	    "       yardd --dev [--devices 8] [--data-dir yard-dev] [--api-address "
	    "127.0.0.1:7100]\n"
	    "             [--raft-address 127.0.0.1:7000] [--dev-port-base 29500]: one member\n"
	    "             plus a supervised yard-agent whose ranks listen from that port\n"
	    "       yardd --verify-db FILE: check the event hash chain of a database image\n"
	    "             (GET /v1/debug/database) and name the first broken link\n"
	    "       yardd --log-info --data-dir DIR: a stopped member's raft term and last log\n"
	    "             index (pick the survivor with the highest term, then the longest log)\n"
	    "       yardd --recover --id N --data-dir DIR (--raft-address A.B.C.D:PORT |\n"
	    "             --members 'ID=RAFT_ADDR@API_URL,...'): after losing a majority of the\n"
	    "             members for good, give this stopped member's log a new configuration:\n"
	    "             itself alone, or the members listed (each starts from a copy of DIR);\n"
	    "             the old members must never start again with their old data dirs\n"
	    "       yardd --restore FILE --id N --data-dir DIR --members "
	    "'ID=RAFT_ADDR@API_URL,...':\n"
	    "             a new cluster from a database image (yardctl cluster backup) in an\n"
	    "             empty DIR: this member alone, or the members listed (each starts\n"
	    "             from a copy of DIR)\n"
	    "[--embargo-max-days N] lowers the longest embargo (1..14 days) for the cluster.\n"
	    "All initial members bootstrap with the same --members; a member started with --join\n"
	    "starts empty and is added through POST /v1/cluster/members.\n");
}

/* "1=127.0.0.1:7001@http://127.0.0.1:7101,2=..." */
/* 1 when dir holds raft state (raft_uv's metadata files): this member has started before. */
static int raft_state_exists(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;
	for (int i = 1; i <= 2; i++) {
		snprintf(path, sizeof path, "%s/metadata%d", dir, i);
		if (stat(path, &st) == 0)
			return 1;
	}
	return 0;
}

static int parse_members(const char *spec, struct yard_err *err)
{
	char *copy = strdup(spec), *save = NULL;
	int rc = 0;
	for (char *item = strtok_r(copy, ",", &save); item != NULL;
	     item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '='), *at = eq ? strchr(eq, '@') : NULL;
		if (eq == NULL || at == NULL || yd.n_members == CONSENSUS_MAX_MEMBERS) {
			rc = yard_err_set(err, YARD_EINVAL,
			                  "--members: '%s' is not ID=RAFT_ADDR@API_URL", item);
			break;
		}
		*eq = *at = '\0';
		struct initial_member *m = &yd.members[yd.n_members++];
		char *end;
		m->id = strtoull(item, &end, 10);
		if (*end != '\0' || m->id == 0 || strlen(eq + 1) >= sizeof m->raft_address ||
		    yard_addr_parse(eq + 1, NULL, 0, NULL) != 0 ||
		    strlen(at + 1) >= sizeof m->api_url ||
		    (strncmp(at + 1, "http://", 7) != 0 && strncmp(at + 1, "https://", 8) != 0)) {
			rc = yard_err_set(
			    err, YARD_EINVAL,
			    "--members: bad member '%s=%s@%s': want ID=a.b.c.d:port@URL "
			    "(ID > 0, a port 1-65535, URL http:// or https://)",
			    item, eq + 1, at + 1);
			break;
		}
		snprintf(m->raft_address, sizeof m->raft_address, "%s", eq + 1);
		snprintf(m->api_url, sizeof m->api_url, "%s", at + 1);
	}
	free(copy);
	return rc;
}

static int read_token_file(const char *path, struct yard_err *err)
{
	char buf[512];
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return yard_err_set(err, YARD_EIO, "--admin-token-file %s: %s", path,
		                    strerror(errno));
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	if (n < 16 || n > 256)
		return yard_err_set(err, YARD_EINVAL,
		                    "--admin-token-file %s: token must be 16-256 characters", path);
	sha256_hex(buf, n, yd.admin_hash);
	return 0;
}

/* ---- the scheduler's path to raft ---- */

struct sched_call {
	sched_done_cb done;
	void *cb_data;
};

static void sched_call_done(void *data, int status, const void *result)
{
	struct sched_call *sc = data;
	sc->done(sc->cb_data, status, result);
	free(sc);
}

static int sched_propose(void *data, const char *op, json_t *args, sched_done_cb done,
                         void *cb_data)
{
	struct yard_err err = {0};
	size_t len = 0;
	char *cmd = fsm_command_encode_own(&yd.fsm, op, args, NULL, yard_now_wall_ms(), "scheduler",
	                                   "admin", &len);
	struct sched_call *sc = malloc(sizeof *sc);
	int rc = YARD_ENOMEM;
	if (cmd != NULL && sc != NULL) {
		sc->done = done;
		sc->cb_data = cb_data;
		rc = consensus_submit(&yd.cons, cmd, len, sched_call_done, sc, &err);
		if (rc != 0)
			log_warn("scheduler: %s not submitted: %s", op, err.msg);
	}
	if (rc != 0)
		fsm_command_unsent(&yd.fsm, cmd, len);
	if (rc != 0)
		free(sc);
	free(cmd);
	return rc;
}

static int sched_is_ready(void *data)
{
	return consensus_is_ready(&yd.cons);
}

static uint64_t sched_applied_index(void *data)
{
	return raft_last_applied(&yd.cons.raft);
}

static void sched_flush(void *data)
{
	(void)data;
	consensus_flush(&yd.cons);
}

/* ---- leader-time bootstrap ---- */

static void write_admin_token_file(void)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/admin.token", yd.data_dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, yd.admin_secret, strlen(yd.admin_secret)) < 0 ||
	    write(fd, "\n", 1) < 0) {
		log_error("yardd: cannot write %s: %s", path, strerror(errno));
	} else {
		fchmod(fd, 0600);
		log_info("yardd: generated the admin token; it is in %s (mode 0600)", path);
	}
	if (fd >= 0)
		close(fd);
}

static void bootstrap_done(void *data, int status, const void *result)
{
	const char *what = data;
	yd.bootstrap_in_flight--;
	if (status != 0) {
		log_warn("yardd: bootstrap %s not committed (%s); the next leader retries", what,
		         yard_strerror(status));
		return;
	}
	int code = (int)json_integer_value(json_object_get(result, "status"));
	if (strcmp(what, "admin token") == 0 && code == 201 && yd.admin_secret[0] != '\0')
		write_admin_token_file();
	if (strcmp(what, "admin token") == 0)
		dev_leader_up();
}

static void submit_bootstrap(const char *op, json_t *args, const char *request_id, const char *what)
{
	struct yard_err err = {0};
	size_t len;
	char *cmd =
	    fsm_command_encode(op, args, request_id, yard_now_wall_ms(), "yardd", "admin", &len);
	if (consensus_submit(&yd.cons, cmd, len, bootstrap_done, (void *)what, &err) == 0)
		yd.bootstrap_in_flight++;
	else
		log_warn("yardd: bootstrap %s: %s", what, err.msg);
	free(cmd);
}

/* Commits setting key = value (config.set) unless the state already holds it (dflt: its
 * value when never set). */
static void bootstrap_setting(const char *key, int64_t dflt, int64_t value)
{
	if (fsm_config_get(&yd.fsm, key, dflt) != value)
		submit_bootstrap("config.set",
		                 json_pack("{s:s,s:I}", "key", key, "value", (json_int_t)value),
		                 NULL, key);
}

/* path's bytes, whole (malloc'd), into *data and *size; YARD_EIO naming it when it cannot be
 * read or is empty. */
static int read_whole(const char *flag, const char *path, unsigned char **data, size_t *size,
                      struct yard_err *err)
{
	FILE *in = fopen(path, "rb");
	long n = -1;
	*data = NULL;
	if (in == NULL)
		return yard_err_set(err, YARD_EIO, "%s %s: %s", flag, path, strerror(errno));
	if (fseek(in, 0, SEEK_END) == 0)
		n = ftell(in);
	if (n > 0 && fseek(in, 0, SEEK_SET) == 0 && (*data = malloc((size_t)n)) != NULL &&
	    fread(*data, 1, (size_t)n, in) != (size_t)n) {
		free(*data);
		*data = NULL;
	}
	fclose(in);
	if (*data == NULL)
		return yard_err_set(err, YARD_EIO, "%s %s: cannot read it%s", flag, path,
		                    n == 0 ? " (empty)" : "");
	*size = (size_t)n;
	return 0;
}

/* fsm from the database image in path, its event chain verified; YARD_ECORRUPT (or the
 * error that stopped it) naming what is wrong. */
static int load_image(const char *flag, const char *path, struct fsm *f, struct yard_err *err)
{
	unsigned char *data = NULL;
	size_t size = 0;
	struct yard_err why = {0};
	int rc = fsm_init(f, err);
	if (rc == 0)
		rc = read_whole(flag, path, &data, &size, err);
	if (rc == 0 && fsm_restore(f, data, size, &why) != 0)
		rc = yard_err_set(err, YARD_ECORRUPT, "%s %s: not a trainyard database image (%s)",
		                  flag, path, why.msg);
	free(data);
	if (rc == 0 && fsm_events_verify(f, &why) != 0)
		rc = yard_err_set(err, YARD_ECORRUPT, "%s %s: %s", flag, path, why.msg);
	return rc;
}

/* --verify-db FILE: loads a database image offline and checks its event chain. Exit status
 * 0 when it verifies, 1 when a link is broken or the file is not a database, 2 on usage. */
static int verify_db(const char *path)
{
	struct yard_err err = {0};
	struct fsm f;
	if (access(path, R_OK) != 0) {
		fprintf(stderr, "yardd: --verify-db %s: %s\n", path, strerror(errno));
		return 2;
	}
	int rc = load_image("--verify-db", path, &f, &err);
	fsm_close(&f);
	if (rc != 0) {
		fprintf(stderr, "yardd: %s\n", err.msg);
		return 1;
	}
	printf("%s: event chain verified\n", path);
	return 0;
}

static void on_leader_down(struct consensus *c, void *data)
{
	sched_leader_down(yd.sched);
}

static void on_leader_up(struct consensus *c, void *data)
{
	sched_leader_up(yd.sched);
	dev_leader_up();
	if (fsm_tokens_count(&yd.fsm) == 0) {
		if (yd.admin_hash[0] == '\0') {
			unsigned char raw[32];
			if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
				log_error("yardd: no randomness for the admin token");
				return;
			}
			sha256_to_hex(raw, yd.admin_secret);
			sha256_hex(yd.admin_secret, strlen(yd.admin_secret), yd.admin_hash);
		}
		submit_bootstrap("token.bootstrap",
		                 json_pack("{s:s,s:s}", "name", "admin", "hash", yd.admin_hash),
		                 NULL, "admin token");
	}
	/* the settings the flags name, where given and not already committed */
	if (yd.embargo_max_days > 0)
		bootstrap_setting("embargo_max_days", FSM_EMBARGO_MAX_DAYS, yd.embargo_max_days);
	if (yd.checkpoint_quota_mb > 0)
		bootstrap_setting("checkpoint_job_max_bytes", FSM_CKPT_JOB_MAX_DEFAULT,
		                  yd.checkpoint_quota_mb << 20);
	if (yd.events_max > 0)
		bootstrap_setting("events_max", 0, yd.events_max);
	if (yd.job_retention_s >= 0)
		bootstrap_setting("job_retention_s", FSM_JOB_RETENTION_DEFAULT_S,
		                  yd.job_retention_s);
	if (yd.max_heartbeats_per_s >= 0)
		bootstrap_setting("max_heartbeats_per_s", FSM_MAX_HEARTBEATS_DEFAULT,
		                  yd.max_heartbeats_per_s);
	for (int i = 0; i < yd.n_members; i++) {
		char url[256], rid[40];
		if (fsm_member_api_url(&yd.fsm, yd.members[i].id, url, sizeof url) == 0)
			continue;
		snprintf(rid, sizeof rid, "init-member-%llu", (unsigned long long)yd.members[i].id);
		submit_bootstrap("member.set",
		                 json_pack("{s:I,s:s,s:s,s:s}", "id", (json_int_t)yd.members[i].id,
		                           "raft_address", yd.members[i].raft_address, "api_url",
		                           yd.members[i].api_url, "role", "voter"),
		                 rid, "member table");
	}
}

/* ---- shutdown ---- */

static void consensus_closed(struct consensus *c)
{
	log_info("yardd: stopped");
	uv_stop(&yd.loop);
}

static void on_signal(uv_signal_t *h, int signum)
{
	static int stopping;
	if (stopping++) {
		log_warn("yardd: second signal, exiting now");
		exit(1);
	}
	log_info("yardd: signal %d: shutting down", signum);
	http_server_stop(yd.http);
	dev_stop();
	uv_signal_stop(&yd.sigterm);
	uv_signal_stop(&yd.sigint);
	uv_signal_stop(&yd.sighup);
	consensus_shutdown(&yd.cons, consensus_closed);
}

enum { OPT_TLS_CERT = 256, OPT_TLS_KEY, OPT_TLS_CLIENT_CA, OPT_LOG_INFO, OPT_RECOVER, OPT_RESTORE };

/* ---- the disaster procedure (raft/recover.h; README, "Losing a majority of the
 * controllers") ---- */

static void print_log_info(const char *dir, const struct recover_log_info *li)
{
	printf("yardd: %s: term %llu, last index %llu (term %llu), snapshot at index %llu, "
	       "%llu entries on disk from index %llu, voted for %llu\n",
	       dir, (unsigned long long)li->term, (unsigned long long)li->last_index,
	       (unsigned long long)li->last_term, (unsigned long long)li->snapshot_index,
	       (unsigned long long)li->n_entries, (unsigned long long)li->first_index,
	       (unsigned long long)li->voted_for);
}

/* --log-info and --recover: on a stopped member's data dir (its lock taken here), exit 0
 * when done, 1 on failure, 2 on a usage error. */
static int offline_tool(int recover, uint64_t id, const char *raft_address, const char *members)
{
	const char *dir = yd.data_dir;
	struct yard_err err = {0};
	struct recover_log_info li;
	struct consensus_member conf[CONSENSUS_MAX_MEMBERS];
	int n = 0, lock_fd = -1;

	if (dir[0] == '\0' || (recover && (id == 0 || (raft_address == NULL && members == NULL)))) {
		fprintf(stderr, recover ? "yardd: --recover needs --id, --data-dir and "
		                          "--raft-address or --members\n"
		                        : "yardd: --log-info needs --data-dir\n");
		return 2;
	}
	if (raft_address != NULL && yard_addr_parse(raft_address, NULL, 0, NULL) != 0) {
		fprintf(stderr,
		        "yardd: --raft-address %s: want a.b.c.d:port (an IPv4 address, a port "
		        "1-65535)\n",
		        raft_address);
		return 2;
	}
	if (members != NULL) {
		if (parse_members(members, &err) != 0) {
			fprintf(stderr, "yardd: %s\n", err.msg);
			return 2;
		}
		for (int i = 0; i < yd.n_members; i++) {
			conf[n].id = yd.members[i].id;
			snprintf(conf[n++].raft_address, sizeof conf[0].raft_address, "%s",
			         yd.members[i].raft_address);
			if (yd.members[i].id == id && raft_address != NULL &&
			    strcmp(raft_address, yd.members[i].raft_address) != 0) {
				fprintf(stderr,
				        "yardd: --members gives member %llu the raft address %s, "
				        "--raft-address %s\n",
				        (unsigned long long)id, yd.members[i].raft_address,
				        raft_address);
				return 2;
			}
		}
	} else if (recover) {
		conf[0].id = id;
		snprintf(conf[0].raft_address, sizeof conf[0].raft_address, "%s", raft_address);
		n = 1;
	}
	if (!raft_state_exists(dir)) {
		fprintf(stderr,
		        "yardd: %s holds no raft state (no metadata1 or metadata2): not a "
		        "member's --data-dir, or a member that never started\n",
		        dir);
		return 1;
	}
	if (datadir_lock(dir, &lock_fd, &err) != 0) {
		fprintf(stderr, "yardd: %s (stop that member first)\n", err.msg);
		return 1;
	}
	for (int i = 0; raft_address == NULL && i < n; i++)
		if (conf[i].id == id)
			raft_address = conf[i].raft_address;
	if (raft_address == NULL)
		raft_address = "127.0.0.1:1"; /* --log-info: raft_init wants one, nothing uses it */
	/* the member this dir is (a pair recovered together leaves it unclaimed: each member
	 * claims its copy at its first start) */
	int rc = recover ? datadir_claim(dir, id, &err) : 0;
	if (rc == 0)
		rc = recover_log_info(dir, id ? id : 1, raft_address, &li, &err);
	if (rc == 0)
		print_log_info(dir, &li);
	if (rc == 0 && recover)
		rc = recover_force_configuration(dir, id, raft_address, conf, n, li.term, &err);
	if (rc == 0 && recover && n > 1)
		rc = datadir_unclaim(dir, &err);
	if (rc != 0) {
		fprintf(stderr, "yardd: %s\n", err.msg);
		close(lock_fd);
		return 1;
	}
	if (recover) {
		printf("yardd: %s: the configuration is now", dir);
		for (int i = 0; i < n; i++)
			printf(" %llu=%s", (unsigned long long)conf[i].id, conf[i].raft_address);
		printf(" (%s), the entry at index %llu; term %llu.\n",
		       n == 1 ? "a voter" : "voters", (unsigned long long)li.last_index + 1,
		       (unsigned long long)li.term + 1);
		if (n == 1)
			printf("Start this member as before: it leads alone. Add members back with "
			       "--join and `yardctl cluster add`.\n");
		else
			printf("Copy %s to each other member's data dir, then start them all.\n",
			       dir);
		printf("Never start the old members with their old data dirs: together they "
		       "would still elect a leader of the old configuration.\n");
	}
	close(lock_fd);
	return 0;
}

/* A first start's own API URL (in --members) says whether clients reach it over TLS: it must
 * agree with --tls-cert, or every redirect to this member would name the wrong scheme. */
static int check_own_scheme(uint64_t id, int tls)
{
	for (int i = 0; i < yd.n_members; i++) {
		const char *url = yd.members[i].api_url;
		if (yd.members[i].id != id)
			continue;
		if (tls && strncmp(url, "https://", 8) != 0) {
			log_error("--members: this member's API URL %s must start with https:// "
			          "with --tls-cert",
			          url);
			return -1;
		}
		if (!tls && strncmp(url, "https://", 8) == 0) {
			log_error("--members: this member's API URL %s is https:// but no "
			          "--tls-cert and --tls-key were given",
			          url);
			return -1;
		}
	}
	return 0;
}

/* One member.remove or member.set applied to f offline, as the leader would commit it; 0, or
 * -1 with its error in err. */
static int apply_offline(struct fsm *f, const char *op, json_t *args, struct yard_err *err)
{
	size_t len;
	char *cmd = fsm_command_encode(op, args, NULL, yard_now_wall_ms(), "yardd --restore",
	                               "admin", &len);
	const json_t *res = fsm_apply(f, cmd, len);
	int code = (int)json_integer_value(json_object_get(res, "status"));
	free(cmd);
	if (code >= 200 && code < 300)
		return 0;
	return yard_err_set(err, YARD_EINTERNAL, "%s: %s", op,
	                    json_string_value(json_object_get(res, "error")));
}

/* --restore FILE: a new cluster's first member from a database image (GET /v1/debug/database,
 * yardctl cluster backup): the image must load and its event chain verify; its members
 * table becomes the new configuration's (each change recorded as an event, as any); then it
 * is installed as the first raft snapshot of an empty data dir (raft/recover.h). Exit 0,
 * 1 on failure, 2 on a usage error. */
static int restore_tool(const char *file, uint64_t id, const char *raft_address,
                        const char *members)
{
	const char *dir = yd.data_dir;
	struct yard_err err = {0};
	struct consensus_member conf[CONSENSUS_MAX_MEMBERS];
	struct fsm f;
	unsigned char *image = NULL;
	size_t image_len = 0;
	int lock_fd = -1, rc;

	if (dir[0] == '\0' || id == 0 || members == NULL) {
		fprintf(stderr, "yardd: --restore needs --id, --data-dir and --members "
		                "'ID=RAFT_ADDR@API_URL,...' (the new cluster's API URLs go into "
		                "its state)\n");
		return 2;
	}
	if (parse_members(members, &err) != 0) {
		fprintf(stderr, "yardd: %s\n", err.msg);
		return 2;
	}
	const char *own_address = NULL;
	for (int i = 0; i < yd.n_members; i++) {
		conf[i].id = yd.members[i].id;
		snprintf(conf[i].raft_address, sizeof conf[i].raft_address, "%s",
		         yd.members[i].raft_address);
		if (yd.members[i].id == id)
			own_address = yd.members[i].raft_address;
	}
	if (own_address == NULL) {
		fprintf(stderr, "yardd: --restore: --id %llu is not among --members '%s'\n",
		        (unsigned long long)id, members);
		return 2;
	}
	if (raft_address != NULL && strcmp(raft_address, own_address) != 0) {
		fprintf(
		    stderr,
		    "yardd: --members gives member %llu the raft address %s, --raft-address %s\n",
		    (unsigned long long)id, own_address, raft_address);
		return 2;
	}
	if (raft_state_exists(dir)) {
		fprintf(stderr,
		        "yardd: %s already holds raft state: --restore starts a new cluster in an "
		        "empty data dir\n",
		        dir);
		return 1;
	}
	rc = load_image("--restore", file, &f, &err);
	json_t *old = rc == 0 ? fsm_members_list(&f, &err) : NULL;
	if (rc == 0 && old == NULL)
		rc = -1;
	size_t i;
	json_t *m;
	json_array_foreach(old, i, m)
	{
		uint64_t mid = (uint64_t)json_integer_value(json_object_get(m, "id"));
		int kept = 0;
		for (int k = 0; k < yd.n_members; k++)
			kept |= yd.members[k].id == mid;
		if (rc == 0 && !kept)
			rc = apply_offline(&f, "member.remove",
			                   json_pack("{s:I}", "id", (json_int_t)mid), &err);
	}
	json_decref(old);
	for (int k = 0; rc == 0 && k < yd.n_members; k++)
		rc =
		    apply_offline(&f, "member.set",
		                  json_pack("{s:I,s:s,s:s,s:s}", "id", (json_int_t)yd.members[k].id,
		                            "raft_address", yd.members[k].raft_address, "api_url",
		                            yd.members[k].api_url, "role", "voter"),
		                  &err);
	if (rc == 0)
		rc = fsm_serialize(&f, &image, &image_len, &err);
	fsm_close(&f);
	if (rc == 0 && (rc = datadir_lock(dir, &lock_fd, &err)) == 0)
		rc = recover_install_image(dir, id, own_address, conf, yd.n_members, image,
		                           image_len, &err);
	if (rc == 0 && yd.n_members == 1) /* several: each member claims its copy */
		rc = datadir_claim(dir, id, &err);
	sqlite3_free(image);
	if (rc != 0) {
		fprintf(stderr, "yardd: %s\n", err.msg);
		if (lock_fd >= 0)
			close(lock_fd);
		return 1;
	}
	printf("yardd: %s: a new cluster of", dir);
	for (int k = 0; k < yd.n_members; k++)
		printf(" %llu=%s", (unsigned long long)conf[k].id, conf[k].raft_address);
	printf(" (%s) with the state of %s (%zu bytes).\n",
	       yd.n_members == 1 ? "a voter" : "voters", file, image_len);
	if (yd.n_members == 1)
		printf("Start this member: it leads alone. Add members with --join and `yardctl "
		       "cluster add`.\n");
	else
		printf("Copy %s to each other member's data dir, then start them all.\n", dir);
	close(lock_fd);
	return 0;
}

/* SIGHUP: the API's TLS files are read again (a renewed certificate); nothing else. */
static void on_sighup(uv_signal_t *h, int signum)
{
	struct yard_err err = {0};
	(void)h, (void)signum;
	if (http_server_reload_tls(yd.http, &err) != 0)
		log_error("SIGHUP: TLS files not reloaded, the API keeps its certificate: %s",
		          err.msg);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"id", required_argument, NULL, 'i'},
	    {"data-dir", required_argument, NULL, 'd'},
	    {"raft-address", required_argument, NULL, 'r'},
	    {"api-address", required_argument, NULL, 'a'},
	    {"members", required_argument, NULL, 'm'},
	    {"admin-token-file", required_argument, NULL, 't'},
	    {"join", no_argument, NULL, 'j'},
	    {"election-timeout-ms", required_argument, NULL, 'E'},
	    {"heartbeat-ms", required_argument, NULL, 'H'},
	    {"snapshot-threshold", required_argument, NULL, 'S'},
	    {"snapshot-trailing", required_argument, NULL, 'T'},
	    {"min-free-mb", required_argument, NULL, 'F'},
	    {"raft-batch-max", required_argument, NULL, 'R'},
	    {"node-suspect-ms", required_argument, NULL, 'U'},
	    {"node-down-ms", required_argument, NULL, 'D'},
	    {"node-restart-grace-ms", required_argument, NULL, 'g'},
	    {"restart-backoff-ms", required_argument, NULL, 'B'},
	    {"auto-grow-pct", required_argument, NULL, 'A'},
	    {"preempt-after-s", required_argument, NULL, 'p'},
	    {"topology-label", required_argument, NULL, 'o'},
	    {"checkpoint-quota-mb", required_argument, NULL, 'C'},
	    {"events-max", required_argument, NULL, 'K'},
	    {"job-retention-s", required_argument, NULL, 'O'},
	    {"queue-depth", required_argument, NULL, 'Q'},
	    {"max-active-jobs", required_argument, NULL, 'J'},
	    {"max-state-mb", required_argument, NULL, 'M'},
	    {"max-heartbeats-per-s", required_argument, NULL, 'W'},
	    {"log-rank-bytes", required_argument, NULL, 'L'},
	    {"log-total-bytes", required_argument, NULL, 'G'},
	    {"dev", no_argument, NULL, 'V'},
	    {"devices", required_argument, NULL, 'N'},
	    {"dev-port-base", required_argument, NULL, 'P'},
	    {"embargo-max-days", required_argument, NULL, 'X'},
	    {"verify-db", required_argument, NULL, 'Y'},
	    {"log-info", no_argument, NULL, OPT_LOG_INFO},
	    {"recover", no_argument, NULL, OPT_RECOVER},
	    {"restore", required_argument, NULL, OPT_RESTORE},
	    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
	    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
	    {"tls-client-ca", required_argument, NULL, OPT_TLS_CLIENT_CA},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct consensus_config cfg = {0};
	struct yard_err err = {0};
	const char *members = NULL, *token_file = NULL, *api_address = NULL;
	struct http_tls tls = {NULL, NULL, NULL};
	char component[32], dev_members[600], dev_api_url[128];
	int dev_mode = 0, dev_devices = 8, dev_port_base = 29500;
	int offline = 0; /* OPT_LOG_INFO, OPT_RECOVER or OPT_RESTORE */
	const char *restore_file = NULL;
	int opt;

	consensus_config_defaults(&cfg);
	sched_config_defaults(&yd.sched_cfg);
	yd.max_heartbeats_per_s = -1;
	yd.job_retention_s = -1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *end = NULL;
		unsigned long long v = optarg ? strtoull(optarg, &end, 10) : 0;
		int numeric_ok = optarg && *optarg && end && *end == '\0';
		switch (opt) {
		case 'i':
			if (!numeric_ok || v == 0 || v > INT64_MAX || optarg[0] == '-' ||
			    optarg[0] ==
			        '+') { /* "1x" was member 1, "-1" 2^64-1, "abc" "not given" */
				fprintf(stderr,
				        "yardd: --id: '%s' is not a member id (an integer >= 1)\n",
				        optarg);
				return 2;
			}
			cfg.id = v;
			break;
		case 'd':
			snprintf(yd.data_dir, sizeof yd.data_dir, "%s", optarg);
			break;
		case 'r':
			cfg.raft_address = optarg;
			break;
		case 'a':
			api_address = optarg;
			break;
		case 'm':
			members = optarg;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'j':
			cfg.join = 1;
			break;
		case 'E':
		case 'H':
		case 'S':
		case 'T':
		case 'F':
			if (!numeric_ok || (opt != 'F' && (v == 0 || v > 1000000))) {
				fprintf(stderr, "yardd: --%s: '%s' is not a valid number\n",
				        opt == 'E'   ? "election-timeout-ms"
				        : opt == 'H' ? "heartbeat-ms"
				        : opt == 'S' ? "snapshot-threshold"
				        : opt == 'T' ? "snapshot-trailing"
				                     : "min-free-mb",
				        optarg);
				return 2;
			}
			if (opt == 'E')
				cfg.election_timeout_ms = (unsigned)v;
			else if (opt == 'H')
				cfg.heartbeat_ms = (unsigned)v;
			else if (opt == 'S')
				cfg.snapshot_threshold = (unsigned)v;
			else if (opt == 'T')
				cfg.snapshot_trailing = (unsigned)v;
			else
				cfg.min_free_mb = v;
			break;
		case 'R':
			if (!numeric_ok || v < 1 || v > CODEC_BATCH_MAX) {
				fprintf(stderr,
				        "yardd: --raft-batch-max: '%s' must be 1..%d commands per "
				        "raft entry (1: no batching)\n",
				        optarg, CODEC_BATCH_MAX);
				return 2;
			}
			cfg.batch_max = (unsigned)v;
			break;
		case 'U':
		case 'D':
		case 'B':
			if (!numeric_ok || v > 3600000 || (opt != 'B' && v < 100)) {
				fprintf(stderr, "yardd: --%s: '%s' is not a valid number of ms\n",
				        opt == 'U'   ? "node-suspect-ms"
				        : opt == 'D' ? "node-down-ms"
				                     : "restart-backoff-ms",
				        optarg);
				return 2;
			}
			if (opt == 'U')
				yd.sched_cfg.node_suspect_ms = v;
			else if (opt == 'D')
				yd.sched_cfg.node_down_ms = v;
			else
				yd.sched_cfg.restart_backoff_ms = v;
			break;
		case 'A':
			if (!numeric_ok || v < 1 || v > 100) {
				fprintf(
				    stderr,
				    "yardd: --auto-grow-pct: '%s' is not 1..100 (%% of an auto "
				    "job's step time a larger plan must be predicted at for it to "
				    "grow)\n",
				    optarg);
				return 2;
			}
			yd.sched_cfg.auto_grow_pct = (int)v;
			break;
		case 'g':
			if (!numeric_ok || v > 3600000) {
				fprintf(
				    stderr,
				    "yardd: --node-restart-grace-ms: '%s' must be 0..3600000 ms\n",
				    optarg);
				return 2;
			}
			yd.sched_cfg.node_restart_grace_ms = v;
			break;
		case 'Q':
			if (!numeric_ok || v > 1000000) {
				fprintf(
				    stderr,
				    "yardd: --queue-depth: '%s' is not 0..1000000 (pending jobs a "
				    "pass after a change looks at; 0: all)\n",
				    optarg);
				return 2;
			}
			yd.sched_cfg.queue_depth = (int)v;
			break;
		case 'J':
			if (!numeric_ok || v > 100000000) {
				fprintf(stderr,
				        "yardd: --max-active-jobs: '%s' is not 0..100000000 (jobs "
				        "pending, running or restarting before submissions are "
				        "refused; 0: no bound)\n",
				        optarg);
				return 2;
			}
			yd.sched_cfg.max_active_jobs = (int)v;
			break;
		case 'M':
			if (!numeric_ok || v > (FSM_DB_MAX >> 20)) {
				fprintf(
				    stderr,
				    "yardd: --max-state-mb: '%s' is not 0..%zu (MiB of replicated "
				    "state before submissions are refused; 0: no bound)\n",
				    optarg, FSM_DB_MAX >> 20);
				return 2;
			}
			yd.sched_cfg.max_state_mb = (uint64_t)v;
			break;
		case 'W':
			if (!numeric_ok || v > 10000000) {
				fprintf(
				    stderr,
				    "yardd: --max-heartbeats-per-s: '%s' is not 0..10000000 "
				    "(heartbeats a second from all agents together; 0: no bound)\n",
				    optarg);
				return 2;
			}
			yd.max_heartbeats_per_s = (int64_t)v;
			break;
		case 'L':
		case 'G':
			if (!numeric_ok || v < 4096 || v > (1ULL << 36)) {
				fprintf(stderr,
				        "yardd: --%s: '%s' is not a byte count in 4096..%llu\n",
				        opt == 'L' ? "log-rank-bytes" : "log-total-bytes", optarg,
				        1ULL << 36);
				return 2;
			}
			if (opt == 'L')
				yd.sched_cfg.log_rank_max_bytes = (size_t)v;
			else
				yd.sched_cfg.log_total_max_bytes = (size_t)v;
			break;
		case 'C':
			if (!numeric_ok || v < 1 || v > (1LL << 16)) {
				fprintf(stderr,
				        "yardd: --checkpoint-quota-mb: '%s' is not 1..65536 (MiB of"
				        " checkpoint shards one job may store)\n",
				        optarg);
				return 2;
			}
			yd.checkpoint_quota_mb = v;
			break;
		case 'K':
			if (!numeric_ok || v < 1000 || v > (1ULL << 40)) {
				fprintf(stderr,
				        "yardd: --events-max: '%s' is not 1000..%llu (the newest "
				        "events "
				        "kept)\n",
				        optarg, 1ULL << 40);
				return 2;
			}
			yd.events_max = (int64_t)v;
			break;
		case 'O':
			if (!numeric_ok || v > 10ULL * 366 * 86400) {
				fprintf(stderr,
				        "yardd: --job-retention-s: '%s' is not 0..%llu (seconds an "
				        "ended "
				        "job is kept after it ended; 0: until deleted)\n",
				        optarg, 10ULL * 366 * 86400);
				return 2;
			}
			yd.job_retention_s = (int64_t)v;
			break;
		case 'p':
			if (!numeric_ok || v > 86400) {
				fprintf(
				    stderr,
				    "yardd: --preempt-after-s: '%s' is not 0..86400 (seconds a job "
				    "waits before it preempts jobs of lower priority; 0: never)\n",
				    optarg);
				return 2;
			}
			yd.sched_cfg.preempt_after_ms = v * 1000;
			break;
		case 'o':
			/* the rule for label names (node.register) */
			if (strlen(optarg) > 63 ||
			    optarg[strspn(optarg,
			                  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			                  "0123456789._-")] != '\0') {
				fprintf(stderr,
				        "yardd: --topology-label: '%s' is not a label name (0-63 "
				        "characters of [A-Za-z0-9._-]; '' for none)\n",
				        optarg);
				return 2;
			}
			snprintf(yd.sched_cfg.topology_label, sizeof yd.sched_cfg.topology_label,
			         "%s", optarg);
			break;
		case 'V':
			dev_mode = 1;
			break;
		case 'N':
			if (!numeric_ok || v < 1 || v > 64) {
				fprintf(stderr, "yardd: --devices: '%s' is not 1..64\n", optarg);
				return 2;
			}
			dev_devices = (int)v;
			break;
		case 'P':
			if (!numeric_ok || v < 1024 || v > 65535 - 64) {
				fprintf(stderr, "yardd: --dev-port-base: '%s' is not 1024..65471\n",
				        optarg);
				return 2;
			}
			dev_port_base = (int)v;
			break;
		case 'X':
			if (!numeric_ok || v < 1 || v > FSM_EMBARGO_MAX_DAYS) {
				fprintf(
				    stderr,
				    "yardd: --embargo-max-days: '%s' is not 1..%d (an embargo lasts"
				    " at most 14 days)\n",
				    optarg, FSM_EMBARGO_MAX_DAYS);
				return 2;
			}
			yd.embargo_max_days = (int)v;
			break;
		case 'Y':
			return verify_db(optarg);
		case OPT_LOG_INFO:
		case OPT_RECOVER:
		case OPT_RESTORE:
			if (offline != 0 && offline != opt) {
				fprintf(stderr,
				        "yardd: --log-info, --recover and --restore go alone\n");
				return 2;
			}
			offline = opt;
			if (opt == OPT_RESTORE)
				restore_file = optarg;
			break;
		case OPT_TLS_CERT:
			tls.cert_file = optarg;
			break;
		case OPT_TLS_KEY:
			tls.key_file = optarg;
			break;
		case OPT_TLS_CLIENT_CA:
			tls.client_ca_file = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (offline != 0) {
		if (dev_mode || cfg.join || api_address != NULL) {
			fprintf(stderr,
			        "yardd: --%s works on a stopped member's data dir: no "
			        "--dev, --join or --api-address\n",
			        offline == OPT_RECOVER   ? "recover"
			        : offline == OPT_RESTORE ? "restore"
			                                 : "log-info");
			return 2;
		}
		if (offline == OPT_RESTORE)
			return restore_tool(restore_file, cfg.id, cfg.raft_address, members);
		return offline_tool(offline == OPT_RECOVER, cfg.id, cfg.raft_address, members);
	}
	if (dev_mode) {
		/* one member on loopback; every default can be overridden by the usual flags */
		if (cfg.id == 0)
			cfg.id = 1;
		if (yd.data_dir[0] == '\0')
			snprintf(yd.data_dir, sizeof yd.data_dir, "yard-dev");
		if (cfg.raft_address == NULL)
			cfg.raft_address = "127.0.0.1:7000";
		if (api_address == NULL)
			api_address = "127.0.0.1:7100";
		snprintf(dev_api_url, sizeof dev_api_url, "http://%s", api_address);
		if (members == NULL) {
			snprintf(dev_members, sizeof dev_members, "%llu=%s@%s",
			         (unsigned long long)cfg.id, cfg.raft_address, dev_api_url);
			members = dev_members;
		}
	} else if (dev_devices != 8) {
		fprintf(stderr, "yardd: --devices goes with --dev\n");
		return 2;
	}
	if ((tls.cert_file == NULL) != (tls.key_file == NULL)) {
		fprintf(stderr, "yardd: --tls-cert and --tls-key go together\n");
		return 2;
	}
	if (tls.client_ca_file != NULL && tls.cert_file == NULL) {
		fprintf(stderr, "yardd: --tls-client-ca needs --tls-cert and --tls-key\n");
		return 2;
	}
	if (tls.cert_file != NULL && dev_mode) {
		fprintf(stderr, "yardd: --tls-cert does not go with --dev (its agent would need "
		                "the certificate's CA): start the members and agents yourself, or "
		                "use scripts/cluster up --tls\n");
		return 2;
	}
	if (cfg.id == 0 || yd.data_dir[0] == '\0' || cfg.raft_address == NULL ||
	    api_address == NULL || (members == NULL && !cfg.join)) {
		fprintf(stderr, "yardd: --id, --data-dir, --raft-address, --api-address and "
		                "--members (or --join) are required\n");
		usage(stderr);
		return 2;
	}
	const char *addr_flag[] = {"--raft-address", "--api-address"};
	const char *addr_val[] = {cfg.raft_address, api_address};
	for (int i = 0; i < 2; i++)
		if (yard_addr_parse(addr_val[i], NULL, 0, NULL) != 0) {
			fprintf(
			    stderr,
			    "yardd: %s %s: want a.b.c.d:port (an IPv4 address, a port 1-65535)\n",
			    addr_flag[i], addr_val[i]);
			return 2;
		}
	if (yd.sched_cfg.node_down_ms <= yd.sched_cfg.node_suspect_ms) {
		fprintf(stderr,
		        "yardd: --node-down-ms (%llu) must be above --node-suspect-ms (%llu)\n",
		        (unsigned long long)yd.sched_cfg.node_down_ms,
		        (unsigned long long)yd.sched_cfg.node_suspect_ms);
		return 2;
	}
	if (cfg.heartbeat_ms >= cfg.election_timeout_ms) {
		fprintf(stderr,
		        "yardd: --heartbeat-ms (%u) must be below --election-timeout-ms (%u)\n",
		        cfg.heartbeat_ms, cfg.election_timeout_ms);
		return 2;
	}
	snprintf(component, sizeof component, "yardd[%llu]", (unsigned long long)cfg.id);
	yard_log_init(component);
	signal(SIGPIPE, SIG_IGN);

	if ((members && parse_members(members, &err) != 0) ||
	    (token_file && read_token_file(token_file, &err) != 0)) {
		log_error("%s", err.msg);
		return 2;
	}
	if (check_own_scheme(cfg.id, tls.cert_file != NULL) != 0)
		return 2;
	if (tls.cert_file != NULL && http_tls_check(&tls, &err) != 0) {
		log_error("%s", err.msg);
		return 2;
	}
	/* a first start bootstraps the cluster from --members: without itself among them it
	 * would wait for ever for a configuration that names it (a restart reads the one in
	 * its log, raft_uv's metadata files, and may have been added since with --join) */
	int listed = 0;
	for (int i = 0; i < yd.n_members; i++)
		listed |= yd.members[i].id == cfg.id;
	if (!cfg.join && !listed && !raft_state_exists(yd.data_dir)) {
		log_error(
		    "--id %llu is not among --members '%s': every initial member lists itself "
		    "(a member added later starts with --join)",
		    (unsigned long long)cfg.id, members);
		return 2;
	}
	struct consensus_member raft_members[CONSENSUS_MAX_MEMBERS];
	for (int i = 0; i < yd.n_members; i++) {
		raft_members[i].id = yd.members[i].id;
		snprintf(raft_members[i].raft_address, sizeof raft_members[i].raft_address, "%s",
		         yd.members[i].raft_address);
	}
	cfg.members = raft_members;
	cfg.n_members = cfg.join ? 0 : yd.n_members;
	cfg.data_dir = yd.data_dir;
	cfg.on_leader_up = on_leader_up;
	cfg.on_leader_down = on_leader_down;

	int lock_fd = -1;
	if (datadir_lock(yd.data_dir, &lock_fd, &err) != 0) {
		log_error("%s", err.msg);
		return 1;
	}
	if (datadir_claim(yd.data_dir, cfg.id, &err) != 0) {
		log_error("%s", err.msg);
		return err.code == YARD_EINVAL ? 2 : 1;
	}
	uv_loop_init(&yd.loop);
	if (fsm_init(&yd.fsm, &err) != 0) {
		log_error("%s", err.msg);
		return 1;
	}
	struct sched_io sched_io = {.data = NULL,
	                            .propose = sched_propose,
	                            .is_ready = sched_is_ready,
	                            .applied_index = sched_applied_index,
	                            .flush = sched_flush};
	yd.sched = sched_create(&yd.loop, &yd.fsm, &yd.sched_cfg, &sched_io);
	struct consensus_fsm_ops ops;
	fsm_ops_init(&ops, &yd.fsm);
	if (consensus_init(&yd.cons, &yd.loop, &cfg, &ops, &err) != 0) {
		log_error("%s", err.msg);
		return err.code == YARD_EINVAL ? 2 : 1;
	}
	yd.http = http_server_start(&yd.loop, &yd.cons, &yd.fsm, api_address,
	                            tls.cert_file ? &tls : NULL, &err);
	if (yd.http == NULL) {
		log_error("%s", err.msg);
		return 1;
	}
	http_server_set_sched(yd.http, yd.sched);
#ifdef HAVE_TCMALLOC
	/* configure's choice (--without-tcmalloc): see README, Scheduling at scale */
	log_info("yardd: memory allocator %s", tc_version(NULL, NULL, NULL));
#else
	log_info("yardd: memory allocator: the C library's malloc");
#endif
	if (dev_mode) {
		char admin_path[4200];
		snprintf(admin_path, sizeof admin_path, "%s/admin.token", yd.data_dir);
		struct dev_options dev_opt = {.data_dir = yd.data_dir,
		                              .api_url = dev_api_url,
		                              .devices = dev_devices,
		                              .port_base = dev_port_base,
		                              .admin_token_path =
		                                  token_file ? token_file : admin_path};
		if (dev_init(&yd.loop, &yd.cons, &yd.fsm, &dev_opt, &err) != 0) {
			log_error("%s", err.msg);
			return 1;
		}
	}
	uv_signal_init(&yd.loop, &yd.sigterm);
	uv_signal_init(&yd.loop, &yd.sigint);
	uv_signal_start(&yd.sigterm, on_signal, SIGTERM);
	uv_signal_start(&yd.sigint, on_signal, SIGINT);
	uv_signal_init(&yd.loop, &yd.sighup);
	uv_signal_start(&yd.sighup, on_sighup, SIGHUP);
	uv_unref((uv_handle_t *)&yd.sighup);
	uv_run(&yd.loop, UV_RUN_DEFAULT);
	/* The loop still holds h2o's handles; the process ends here, which releases them. */
	close(lock_fd);
	return yd.exit_code;
}
