/* agent.h: yard-agent, the node daemon. One libuv loop owns the rank table, the metrics
 * socket and the heartbeat timer; the blocking HTTP calls to the controllers run on libuv's
 * thread pool so the loop never waits on the network.
 *
 * Files: main.c (flags, config file, start-up), client.c (HTTP to the leader), ranks.c (rank
 * processes: start, stop, reap, adopt, logs), shim.c (the parent of each rank that records
 * its exit status), heartbeat.c (register, heartbeat, reconcile), metrics.c (per-step lines
 * from the trainer over YARD_AGENT_SOCK), ranklog.c (a rank's log file: rotation, the pieces
 * heartbeats carry to the leader), ckpt.c (the controller checkpoint store: shard uploads and
 * restores), upgrade.c (in-place upgrade to a new build), guardian.c (rolls a node back when a
 * new build does not come up), selftest.c (the data-plane self-test a build must pass),
 * workerup.c (the yard-worker build new ranks run, installed by worker rollouts), perf.c (the
 * node probe for the planner), linkprobe.c (the link to another node: probe port and
 * measurement).
 */
#ifndef YARD_AGENT_H
#define YARD_AGENT_H

#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "agent/ranklog.h"
#include "common/buildinfo.h"
#include "common/err.h"

#define AGENT_NAME_MAX 63
#define AGENT_MAX_LABELS 16 /* the controllers' limit (node.register) */
#define AGENT_MAX_RANKS 256
#define AGENT_JOB_ID_MAX 31
#define AGENT_MAX_RESTORES 16
#define AGENT_CKPT_UPLOADS 3 /* shard uploads in flight at once */
/* Straggler windows (failure.straggler.window_steps = W): the per-step samples of the window
 * being filled that are kept for its medians (the last ones when W is larger), and how many
 * completed windows every heartbeat repeats (a window is never lost to one failed call). */
#define AGENT_WINDOW_SAMPLES 64
#define AGENT_WINDOWS_KEPT 4
#define AGENT_WINDOW_REPORTS_MAX 1000000 /* reports counted per window, as the leader bounds */

/* One completed window of W steps: window index w covers steps w*W+1 .. (w+1)*W. */
struct agent_window {
	int64_t index;
	int steps;                       /* step reports received in it (W when none was lost) */
	double compute_ms, comm_wait_ms; /* medians over its steps */
};

struct agent_config {
	char controllers[1024]; /* comma-separated API URLs */
	char cacert[PATH_MAX];  /* CA certificates for https:// controllers, "" for the system's */
	char cert[PATH_MAX], key[PATH_MAX]; /* client certificate and key (mutual TLS), or "" */
	char join_token[256];
	char data_dir[PATH_MAX];
	char name[AGENT_NAME_MAX + 1];
	char host[64];  /* address peers use to reach this node's ranks */
	int port_base;  /* rank on device d listens on port_base + d */
	int probe_port; /* the link probe port (linkprobe.c); 0: port_base - 1 */
	int n_devices;
	int cuda; /* devices are CUDA GPUs */
	int64_t device_memory_mb;
	double link_gbps; /* inter-node bandwidth for the planner, 0 = measure TCP loopback */
	int heartbeat_ms;
	int watch_ms;               /* a watch waits this long for news (0: no watches) */
	int probe_retry_ms; /* a node probe that failed its first attempts runs again this often */
	int probe_timeout_ms; /* a node probe's first attempt is killed after this (then 2x, 4x) */
	int64_t reprobe_s;  /* measured rates older than this are measured again while no rank
	                     * runs (perf_tick); 0: never */
	int64_t job_dir_keep_s; /* an idle ended job's directories go after this (0: never; gc.c) */
	int gc_interval_ms;     /* how often gc.c looks */
	int stop_grace_ms;          /* SIGTERM → SIGKILL */
	int upload_wait_ms; /* an exited rank's exit waits this long at most for its uploads */
	int64_t log_max_bytes;      /* a rank's log is rotated past this (FILE + FILE.1 kept) */
	int64_t log_ship_bytes;     /* at most this much of one rank's log per heartbeat */
	int64_t log_resend_bytes;   /* the tail of each log sent again to a new leader */
	/* --label NAME=VALUE: sent at registration (a topology label names the node's switch
	 * or rack for placement, yardd --topology-label; rollouts select nodes by them) */
	char labels[AGENT_MAX_LABELS][2][64];
	int n_labels;
	char worker_path[PATH_MAX]; /* yard-worker */
	char self_path[PATH_MAX];   /* this binary, which runs as every rank's shim */
	char version[32];
};

enum upgrade_state {
	UPGRADE_IDLE,
	UPGRADE_DOWNLOADING,
	UPGRADE_SELF_TEST,
	UPGRADE_RESTARTING, /* exec'd the new build, no healthy heartbeat yet */
	UPGRADE_DONE,
	UPGRADE_FAILED,      /* the new build was never exec'd */
	UPGRADE_ROLLED_BACK, /* it was, and the node went back to the previous build */
};

#define UPGRADE_REFUSED_MAX 16

/* The latest upgrade (upgrade.c), persisted in DATA_DIR/upgrade.json. */
struct agent_upgrade {
	enum upgrade_state state;
	char version[32]; /* the build offered */
	char rollout[32];
	char error[400];
	char previous_version[32]; /* the build kept to go back to */
	char previous_path[PATH_MAX];
	char new_path[PATH_MAX];
	pid_t guardian_pid;
	char refused[UPGRADE_REFUSED_MAX][72]; /* "ROLLOUT/VERSION" not to take again */
	int n_refused;
	int busy;            /* a download or self-test is on the thread pool */
	int pending_healthy; /* started as the new build: healthy after a heartbeat */
	/* self-tested, state "restarting": the exec waits until a heartbeat saying so was
	 * answered (the leader then allows the restart's silence) or until this time
	 * (monotonic ms; 0: not waiting) */
	uint64_t announce_until_ms;
	int announce_gate_s; /* the offer's gate_s, for the guardian */
};

/* The yard-worker new ranks run (workerup.c), persisted in DATA_DIR/worker.json: the one given
 * with --worker until a rollout installs another build. */
struct agent_worker {
	char version[32]; /* what path says with --version ("unknown" when it cannot say) */
	char path[PATH_MAX];
	char configured_version[32]; /* of --worker (cfg.worker_path) */
	/* the latest worker upgrade: version offered, rollout, state (never "restarting"),
	 * error, the build kept to go back to (previous_*), refused builds */
	struct agent_upgrade up;
};

/* One rank process this node runs (or ran). */
struct agent_rank {
	int in_use;
	char job[AGENT_JOB_ID_MAX + 1];
	int rank;
	int64_t generation;
	int device; /* on this node; -1: not known (a state file from before devices were kept) */
	/* its job's failure.stop_on_disconnect_s in ms (0: none): stopped once the agent has
	 * had no heartbeat accepted for this long (ranks_tick) */
	int64_t stop_on_disconnect_ms;
	pid_t pid;
	uint64_t start_ticks;    /* /proc/PID/stat start time: guards against pid reuse */
	int adopted;             /* not our child (agent restarted): liveness by polling */
	char worker_version[32]; /* the yard-worker build it runs; "" for a command rank */
	int exited;
	int exit_code; /* -1 when unknown (exited while adopted) */
	int term_signal;
	int stopping; /* SIGTERM sent */
	uint64_t stop_sent_ms;
	uv_process_t *process;    /* our child: libuv reports its exit */
	struct rank_log log;      /* DATA_DIR/jobs/JOB/rank-R.gen-G.log */
	int forget_deferred;      /* heartbeats an exited rank was kept to finish sending its log */
	char exit_path[PATH_MAX]; /* where the rank's shim records how it ended */
	/* latest metrics line from the rank */
	int64_t step;
	double loss, step_ms, compute_ms, comm_wait_ms;
	uint64_t last_step_mono_ms;
	uint64_t started_mono_ms;
	int bad_reports; /* lines dropped: what the controller would refuse (metrics.c) */
	/* window summaries (metrics.c); window_steps 0: the job asks for none */
	int window_steps;
	int64_t window_index; /* of the window being filled, -1: none */
	int window_seen;      /* step reports in it */
	double window_compute_ms[AGENT_WINDOW_SAMPLES], window_comm_wait_ms[AGENT_WINDOW_SAMPLES];
	struct agent_window windows[AGENT_WINDOWS_KEPT]; /* ring, oldest first from windows_next */
	int n_windows, windows_next;
	int ckpt_controller; /* the job's store is "controller": upload its shards (ckpt.c) */
	/* an exit with code 0 is reported once the rank's shards are uploaded (ckpt_hold_exits):
	 * 0 not looked at yet, 1 held (reported as running), 2 reported */
	int exit_held;
	uint64_t exit_seen_mono_ms; /* when ckpt_hold_exits first saw it exited */
};

/* A restore of the controller store for one generation of a job on this node (ckpt.c). */
enum restore_state { RESTORE_RUNNING = 1, RESTORE_DONE, RESTORE_FAILED };
struct agent_restore {
	int in_use;
	char job[AGENT_JOB_ID_MAX + 1];
	int64_t generation, step;
	enum restore_state state;
	uint64_t failed_mono_ms;
};

struct agent {
	struct agent_config cfg;
	uv_loop_t *loop;
	uv_timer_t heartbeat_timer;
	uv_signal_t sigterm, sigint;
	char node_token[256];
	char leader_url[512]; /* last URL that answered as leader */
	char leader_id[64];   /* the leader's "leader_id": a change means it holds no logs */
	/* the desired set of the last answer that carried one (owned, NULL: none) and its
	 * "desired_tag" ("": none): heartbeats send the tag, and an answer that says
	 * "desired_unchanged" is reconciled against this set */
	json_t *desired;
	char desired_tag[24];
	/* the leader ("leader_id") and news version the applied desired set is as of (-1:
	 * unknown): heartbeat answers ("desired_version") and watch answers ("version") both
	 * carry sets, and one computed before the other may arrive after it (desired_stale) */
	char desired_leader[64];
	int64_t desired_version;
	int log_cursor;       /* rank slot the next heartbeat's logs start from (fairness) */
	int heartbeat_in_flight;
	/* while a heartbeat was in flight: 1 a rank exited (heartbeat_soon after it), 2 the
	 * watch brought news (heartbeat_now after it) */
	int heartbeat_again;
	uint64_t heartbeat_sent_mono_ms; /* when the latest heartbeat went out */
	/* heartbeats are this far apart: cfg.heartbeat_ms, or the longer interval the leader
	 * asks of every agent at its cluster's size (heartbeat_min_ms); the timer still ticks
	 * every cfg.heartbeat_ms for the rest (ranks, checkpoints, the watch), and the next
	 * heartbeat goes at the first tick from heartbeat_due_mono_ms on */
	uint64_t heartbeat_every_ms;
	uint64_t heartbeat_due_mono_ms;
	int heartbeat_min_refused; /* the last answer's heartbeat_min_ms was refused (logged) */
	/* called when a rank exits (heartbeat_soon once heartbeats started; NULL before) */
	void (*rank_exited)(struct agent *a);
	int registered;
	/* registrations refused in a row (a 4xx: a wrong join token, a name the controllers
	 * refuse) and when the next may go: each waits twice as long, up to 5 s */
	int register_refusals;
	uint64_t register_retry_mono_ms;
	/* the watch (watch.c): one long-poll on the thread pool at a time for news of this
	 * node's desired set; a new version triggers a heartbeat */
	int watch_in_flight;
	int64_t watch_version;         /* the last one answered, -1: none */
	uint64_t watch_retry_mono_ms;  /* no watch before this (after a failure) */
	volatile sig_atomic_t watch_abort; /* the agent is stopping */
	uint64_t watch_news;           /* answers that brought a new version */
	struct agent_rank ranks[AGENT_MAX_RANKS];
	int metrics_fd;
	uv_poll_t metrics_poll;
	char metrics_path[PATH_MAX];
	int draining;
	int stopping;
	/* the last "waits for device" line logged (heartbeat.c): logged once, not per heartbeat */
	char device_wait_note[160];
	uint64_t last_ok_mono_ms; /* the last heartbeat or registration accepted; the start */
	/* registrations and heartbeats in a row that reached no controller or no leader
	 * (heartbeat.c: the first is logged, then a line a minute, and the end) */
	unsigned unavailable_calls;
	uint64_t unavailable_since_mono_ms, unavailable_logged_mono_ms;
	unsigned watch_unreachable; /* watches in a row that reached no controller or got 503 */
	/* the controller checkpoint store (ckpt.c) */
	char ckpt_root[PATH_MAX];  /* absolute DATA_DIR/checkpoints */
	char ckpt_leader_url[512]; /* the leader as the latest transfer found it */
	int ckpt_uploads;          /* uploads on the thread pool (at most AGENT_CKPT_UPLOADS) */
	int ckpt_downloading;      /* a restore's download is on the thread pool (alone) */
	char ckpt_uploading[AGENT_CKPT_UPLOADS][PATH_MAX + 64]; /* their files, "" when free */
	uint64_t ckpt_retry_mono_ms; /* no upload before this (after a failure) */
	struct agent_restore restores[AGENT_MAX_RESTORES];
	unsigned restore_next;
	int argc; /* as started, for an exec into another build */
	char **argv;
	struct agent_upgrade up;
	struct agent_worker worker;
	json_t *perf;      /* measured rates (perf.c), NULL until the probe has answered */
	int perf_unwanted; /* the leader said it has them (want_perf false): not sent */
	/* counts changes to perf (perf_changed): the answer to a heartbeat sent before the last
	 * change speaks of older rates, and neither stops nor refuses the new ones */
	unsigned perf_version;
	/* the last answer said the leader sends shared parts (offers_shared): heartbeats ask for
	 * them (desired_shared); a refused heartbeat (400) clears it, so an older leader, which
	 * would refuse the field, gets heartbeats it knows */
	int leader_offers_shared;
	/* the last heartbeat answer said the leader answers watches with the desired set
	 * (offers_watch_desired): watches ask for it ("desired": true) and a new version is
	 * applied from the watch's answer, without a heartbeat; a refused watch (400) clears
	 * it, for an older leader */
	int leader_offers_watch_desired;
	/* a heartbeat was answered since the registration: the first watch waits for it, so
	 * that it asks for what the leader offers */
	int heartbeat_answered;
	int perf_attempts; /* probes started */
	uv_timer_t perf_retry;
	int perf_timer_ready;          /* perf_retry initialised */
	int64_t perf_measured_wall_ms; /* when the rates kept were measured (perf.json) */
	int perf_running;            /* a probe process runs */
	int perf_reprobe;            /* the running probe re-measures (perf_tick) */
	uint64_t perf_at_mono_ms;    /* when the last probe ended (a failed re-probe included) */
	uint64_t ranks_started;      /* ranks started since the agent started (ranks.c) */
	uint64_t perf_ranks_started; /* ranks_started when the running probe began */
	int perf_disturbed;  /* the rates kept were measured while a rank started: measured again
	                      * as soon as no rank runs, whatever --reprobe-s says (perf_tick) */
	int perf_idle_wait;  /* no rates: a probe was due while ranks ran, it starts once none does
	                      * or the leader has none either (perf_tick) */
	/* the leader asked for the rates to be measured again (yardctl node probe): the newest
	 * request number taken, and whether its probe waits for no rank to run (perf_tick) */
	int64_t perf_request;
	int perf_asked;
	int perf_answering; /* the running probe is the one asked for */
	/* whether the leader has rates for this node (its last heartbeat answer's want_perf):
	 * -1 not known yet (no leader answered since the agent started), 0, 1 */
	int leader_has_perf;
	uv_timer_t gc_timer; /* gc.c */
	/* the link to another node (linkprobe.c) */
	uv_tcp_t probe_server;
	int probe_listening;                /* heartbeats name cfg.probe_port */
	int probe_conns;                    /* served now */
	int probe_running;                  /* a measurement is on the thread pool */
	char link_peer[AGENT_NAME_MAX + 1]; /* measured against this node, "" not yet */
	double link_bw_bytes_per_s, link_latency_s;
};

/* client.c: one request to the leader. body may hold any bytes (content_type defaults to
 * application/json); max_response (0: 8 MiB) bounds the answer; timeout_ms 0 is 5 s. */
struct agent_request {
	const char *method, *path, *token, *content_type;
	const void *body;
	size_t body_len;
	size_t max_response;
	long timeout_ms;
	/* non-NULL: the transfer is given up (an error) within about a second of it becoming
	 * non-zero (a long-poll that must not hold up the agent's exit) */
	const volatile sig_atomic_t *abort;
};
struct agent_response {
	long status;
	char *body; /* malloc'd, NUL-terminated, NULL when empty; caller frees */
	size_t len;
	char sha256[72]; /* X-Yard-Sha256 of the answer, "" when absent */
};
/* Sends rq to the leader, following 307 redirects and trying every controller in turn.
 * Blocking (thread pool). 0 when some controller answered (any status). Thread-safe as long
 * as each thread passes its own leader_url. */
int agent_http_request(const char *controllers, char *leader_url, size_t leader_url_len,
                       const struct agent_request *rq, struct agent_response *rs,
                       struct yard_err *err);
/* client.c: POSTs body (not consumed) to path on the leader, following 307 redirects and
 * trying every controller in turn. Blocking: call it from the thread pool. On success
 * returns 0 with *status the HTTP code and *resp the parsed JSON (may be NULL for an empty
 * body; caller owns it). Fails only when no controller answered. Thread-safe. */
int agent_http_post(const char *controllers, char *leader_url, size_t leader_url_len,
                    const char *token, const char *path, const json_t *body, long *status,
                    json_t **resp, struct yard_err *err);

/* ranks.c */
int ranks_load_state(struct agent *a);       /* re-adopt ranks that survived an agent restart */
int ranks_save_state(const struct agent *a); /* atomically rewrites DATA_DIR/ranks.json */
int ranks_start(struct agent *a, const json_t *desired, struct yard_err *err);
void ranks_stop(struct agent *a, struct agent_rank *r, const char *why);
void ranks_tick(struct agent *a); /* escalate stops, poll adopted pids, rotate logs */
struct agent_rank *ranks_find(struct agent *a, const char *job, int rank);
/* Hands checkpoint request number request to this node's running ranks of the job's
 * generation (their YARD_CHECKPOINT_REQUEST file, when it holds a lower one), with after, the
 * step a checkpoint must be newer than to answer it (INT64_MAX: not known); returns how many
 * ranks it has here (0: none, nothing written), -1 when the file could not be written. */
int ranks_request_checkpoint(struct agent *a, const char *job, int64_t generation, int64_t request,
                             int64_t after);
int agent_mkdir_p(const char *dir); /* mkdir -p: 0, or -1 with errno */
struct agent_rank *ranks_find_pid(struct agent *a, pid_t pid);
json_t *ranks_report(const struct agent *a); /* the "ranks" array of a heartbeat */
/* The "logs" array of a heartbeat: the next piece of each rank's log, bounded per rank and
 * in total; marks what it took as in flight. */
json_t *ranks_logs(struct agent *a);
/* The heartbeat carrying the pieces in flight was answered (ok) or not. */
void ranks_logs_done(struct agent *a, int ok);
/* A new leader: every rank's log tail goes again. */
void ranks_logs_rewind(struct agent *a);
void ranks_forget_exited(struct agent *a, const json_t *desired);
int ranks_running(const struct agent *a);
/* The rank not yet exited (running, or stopping within its grace) that holds device
 * `device` of this node, or NULL: a rank placed on that device waits for it to exit. */
struct agent_rank *ranks_on_device(struct agent *a, int device);
/* What a rank takes from its job's spec (failure.stop_on_disconnect_s). */
void ranks_set_spec(struct agent_rank *r, const json_t *spec);

/* shim.c: `yard-agent --rank-shim EXIT_FILE -- ARGV` (every rank's parent), and reading
 * what it recorded. */
int shim_main(int argc, char **argv);
int shim_read_exit(const char *exit_file, int *code, int *sig);

/* heartbeat.c */
void heartbeat_start(struct agent *a);
/* A rank exited: the next heartbeat goes out soon (heartbeat.c) instead of up to a whole
 * interval later. */
void heartbeat_soon(struct agent *a);
/* A heartbeat now (at most one in flight; none more often than every 20 ms), whatever the
 * spacing heartbeat_soon keeps: the controller said this node has news. */
void heartbeat_now(struct agent *a);
/* main.c: the --label pairs as the JSON object registration sends (new reference). */
json_t *agent_labels(const struct agent *a);
/* heartbeat.c: DATA_DIR/node.labels, the labels of the last registration that succeeded
 * (malloc'd JSON text; "{}" when none was saved). */
char *agent_registered_labels(const struct agent *a);

/* watch.c: keeps a watch waiting at the leader while registered (called from every
 * heartbeat tick and after each answer). */
void watch_tick(struct agent *a);
/* Applies a desired set: starts missing ranks, stops unlisted or outdated ones. */
void heartbeat_reconcile(struct agent *a, const json_t *desired);
/* Applies the desired set of an answer (a heartbeat's, version_key "desired_version", or a
 * watch's, "version") unless it is older than the one applied (desired_stale): then it
 * changes nothing and returns 0; 1 when applied. */
int heartbeat_apply_answer(struct agent *a, const json_t *resp, const char *version_key);

/* ckpt.c: the "controller" checkpoint store on this node (see the file's comment). */
int ckpt_init(struct agent *a, struct yard_err *err);
/* A job's node-local checkpoint directory (YARD_CKPT_DIR of its ranks). */
void ckpt_job_dir(const struct agent *a, const char *job, char *out, size_t out_len);
/* 1 when desired entry d is of a job with the controller store. */
int ckpt_is_controller(const json_t *desired);
/* 1 when rank d may start now; 0 while its checkpoint is being restored (started here). */
int ckpt_ready(struct agent *a, const json_t *desired_all, const json_t *d);
/* Starts the upload of one finished shard when none is in flight. */
void ckpt_tick(struct agent *a);
/* Before a heartbeat: a rank of a controller-store job that exited with code 0 while shards
 * of its were still waiting for upload is reported as running until they are uploaded (or
 * dropped), at most --upload-wait-s, so that its job does not end (and refuse them) before
 * its last checkpoint is stored. Sets exit_held. */
void ckpt_hold_exits(struct agent *a);
/* upgrade.c */
void upgrade_init(struct agent *a); /* reads DATA_DIR/upgrade.json at start */
void upgrade_tick(struct agent *a);
/* An "upgrade" object from a heartbeat answer: starts, or keeps reporting, an upgrade. */
void upgrade_offer(struct agent *a, const json_t *offer);
/* The leader answered a heartbeat with 200: a new build is healthy. */
void upgrade_heartbeat_ok(struct agent *a);
/* 1 while the agent waits to tell the leader it execs a new build next (a heartbeat built
 * now says so); upgrade_announced: such a heartbeat was answered with 200, exec now. */
int upgrade_announcing(const struct agent *a);
void upgrade_announced(struct agent *a);
/* The "upgrade" object of a heartbeat (new reference), or NULL when there is none. */
json_t *upgrade_report(const struct agent *a);
const char *upgrade_state_name(enum upgrade_state s);
int upgrade_version_valid(const char *v);
int upgrade_state_load(const char *data_dir, struct agent_upgrade *u);
int upgrade_state_save(const char *data_dir, const struct agent_upgrade *u);
void upgrade_refuse(struct agent_upgrade *u);

json_t *upgrade_report_of(const struct agent_upgrade *u);
int upgrade_is_refused(const struct agent_upgrade *u, const char *rollout, const char *version);
/* An offer of a heartbeat answer ("upgrade" or "worker_upgrade", named by what). */
struct upgrade_offer {
	char version[32], rollout[32];
	char sha256[72];
	char url[1024]; /* a /v1/ path on the leader */
	int64_t size;
	int gate_s;
	int rollback; /* go back to version, the build kept */
};
int upgrade_offer_parse(const json_t *offer, const char *what, struct upgrade_offer *o,
                        struct yard_err *err);
/* Blocking (thread pool): GET url with token into part, size and sha256 checked, then made
 * executable and renamed to path. 0, or an error with why. */
int upgrade_fetch(const char *url, const char *token, const char *part, const char *path,
                  int64_t size, const char *sha256, char *why, size_t why_len);
/* Blocking: runs argv with stdout and stderr into log, killed after timeout_ms. 0 when it
 * exited 0; else why names the step (argv[1]) and the log's last line. */
int upgrade_run_check(char *const argv[], const char *log, int timeout_ms, char *why,
                      size_t why_len);
void upgrade_last_line(const char *path, char *out, size_t len);

/* workerup.c: the yard-worker build of new ranks, and worker rollouts. */
void workerup_init(struct agent *a); /* reads DATA_DIR/worker.json, else asks --worker */
/* A "worker_upgrade" object from a heartbeat answer: install, or go back to, a build. */
void workerup_offer(struct agent *a, const json_t *offer);
/* The "worker_upgrade" object of a heartbeat (new reference), or NULL. */
json_t *workerup_report(const struct agent *a);

/* guardian.c: `yard-agent --upgrade-guardian ...` */
int guardian_main(int argc, char **argv);

/* selftest.c: `yard-agent --self-test` */
int selftest_main(int argc, char **argv);

/* client.c: every later request verifies https:// controllers against the CA certificates
 * in path (PEM) instead of the system's (--cacert). Call before any request. */
void agent_http_set_ca_file(const char *path);
/* client.c: every later request presents this client certificate and key (PEM) to
 * controllers that require one (yardd --tls-client-ca). "": none. */
void agent_http_set_client_cert(const char *cert, const char *key);
/* client.c: GET url with a bearer token into path, at most max_bytes; the sha256 of what
 * was written and its length. Blocking: call it from the thread pool. */
int agent_http_download(const char *url, const char *token, const char *path, int64_t max_bytes,
                        char sha256_hex[65], int64_t *bytes, struct yard_err *err);
/* gc.c: removes the directories of jobs that have nothing on this node and were idle for
 * --job-dir-keep-s (gc_pass: one pass now, the number removed; gc_start: every
 * --job-gc-interval-ms). */
int gc_pass(struct agent *a);
void gc_start(struct agent *a);
/* perf.c: starts the node probe on the loop; a->perf is set when it answers. */
void perf_start(struct agent *a);
/* At start: the node probe, or, when `adopted` ranks were re-adopted (they train), the rates
 * saved in the data dir, if they fit (else the probe: once no rank runs while the leader has
 * rates for the node, at once when it has none). */
void perf_begin(struct agent *a, int adopted);
/* Saves a->perf in the data dir (perf.json) for a restart while ranks run. */
void perf_save(struct agent *a);
/* Measures the node again when no rank runs and its rates are --reprobe-s old, or were
 * measured while a rank started; starts a probe that waited for the ranks to end. */
void perf_tick(struct agent *a);
/* The leader's "probe" command, request number `request` (repeated in a few answers: a number
 * already taken is ignored): the node is measured again as soon as no rank runs. */
void perf_ask(struct agent *a, int64_t request);
/* perf was replaced or changed: the next heartbeat carries it, whatever the answers to
 * heartbeats already on their way say (perf_version). */
void perf_changed(struct agent *a);
/* The leader refused a heartbeat over the perf it carried (why: its error): the figures are
 * dropped, heartbeats go without them, and the node is probed again later. */
void perf_refused(struct agent *a, const char *why);
/* linkprobe.c: serves the probe port on the loop (0, or an error naming the port). */
int linkprobe_listen(struct agent *a, struct yard_err *err);
/* A "link_probe" object from a heartbeat answer: measures the link to that node. */
void linkprobe_offer(struct agent *a, const json_t *offer);
/* Puts a measured link into a->perf, to be sent with the next heartbeat. */
void linkprobe_apply(struct agent *a);
/* Memory of one device: configured, else the host's memory shared by the CPU devices. */
int64_t agent_device_memory_mb(const struct agent_config *cfg);

/* metrics.c */
int metrics_open(struct agent *a);
void metrics_close(struct agent *a);
/* Lets the metrics socket survive the next exec (and reach the guardian forked before it):
 * clears its close-on-exec flag and names it in the environment. Loop thread only. */
int metrics_handover(const struct agent *a);
/* Attributes one line to the rank of the sender's pid or session and applies it (exposed for
 * tests): 0, YARD_ENOTFOUND (no rank of ours) or YARD_EINVAL (a line a heartbeat could not
 * carry), with why in WHY when it is not NULL. */
int metrics_apply_line(struct agent *a, pid_t sender, const char *line, size_t len, char *why,
                       size_t why_len);
/* Sets W from a desired entry's spec (failure.straggler.window_steps; 0 when the policy is
 * "off" or the spec has none) and starts the window summaries over when it changes. */
void metrics_set_window(struct agent_rank *r, const json_t *spec);
/* The completed windows as a JSON array, oldest first (new reference). */
json_t *metrics_windows_json(const struct agent_rank *r);

#endif
