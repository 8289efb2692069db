/* agent.h: yard-agent, the node daemon. One libuv loop owns the rank table, the metrics
 * socket and the heartbeat timer; the blocking HTTP calls to the controllers run on libuv's
 * thread pool so the loop never waits on the network.
 *
 * Files: main.c (flags, config file, start-up), client.c (HTTP to the leader), ranks.c (rank
 * processes: start, stop, reap, adopt, logs), shim.c (the parent of each rank that records
 * its exit status), heartbeat.c (register, heartbeat, reconcile), metrics.c (per-step lines
 * from the trainer over YARD_AGENT_SOCK), ranklog.c (a rank's log file: rotation, the pieces
 * heartbeats carry to the leader), perf.c (the node probe for the planner).
 */
#ifndef YARD_AGENT_H
#define YARD_AGENT_H

#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "agent/ranklog.h"
#include "common/err.h"

#define AGENT_NAME_MAX 63
#define AGENT_MAX_RANKS 256
#define AGENT_JOB_ID_MAX 31

struct agent_config {
	char controllers[1024]; /* comma-separated API URLs */
	char join_token[256];
	char data_dir[PATH_MAX];
	char name[AGENT_NAME_MAX + 1];
	char host[64]; /* address peers use to reach this node's ranks */
	int port_base; /* rank on device d listens on port_base + d */
	int n_devices;
	int cuda; /* devices are CUDA GPUs */
	int64_t device_memory_mb;
	double link_gbps; /* inter-node bandwidth for the planner, 0 = measure TCP loopback */
	int heartbeat_ms;
	int stop_grace_ms;          /* SIGTERM → SIGKILL */
	int64_t log_max_bytes;      /* a rank's log is rotated past this (FILE + FILE.1 kept) */
	int64_t log_ship_bytes;     /* at most this much of one rank's log per heartbeat */
	int64_t log_resend_bytes;   /* the tail of each log sent again to a new leader */
	char worker_path[PATH_MAX]; /* yard-worker */
	char self_path[PATH_MAX];   /* this binary, which runs as every rank's shim */
	char version[32];
};

/* One rank process this node runs (or ran). */
struct agent_rank {
	int in_use;
	char job[AGENT_JOB_ID_MAX + 1];
	int rank;
	int64_t generation;
	pid_t pid;
	uint64_t start_ticks; /* /proc/PID/stat start time: guards against pid reuse */
	int adopted;          /* not our child (agent restarted): liveness by polling */
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
};

struct agent {
	struct agent_config cfg;
	uv_loop_t *loop;
	uv_timer_t heartbeat_timer;
	uv_signal_t sigterm, sigint;
	char node_token[256];
	char leader_url[512]; /* last URL that answered as leader */
	char leader_id[64];   /* the leader's "leader_id": a change means it holds no logs */
	int log_cursor;       /* rank slot the next heartbeat's logs start from (fairness) */
	int heartbeat_in_flight;
	int registered;
	struct agent_rank ranks[AGENT_MAX_RANKS];
	int metrics_fd;
	uv_poll_t metrics_poll;
	char metrics_path[PATH_MAX];
	int draining;
	int stopping;
	uint64_t last_ok_mono_ms;
	json_t *perf;      /* measured rates (perf.c), NULL until the probe has answered */
	int perf_unwanted; /* the leader said it has them (want_perf false): not sent */
	int perf_attempts; /* probes started */
	uv_timer_t perf_retry;
};

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

/* shim.c: `yard-agent --rank-shim EXIT_FILE -- ARGV` (every rank's parent), and reading
 * what it recorded. */
int shim_main(int argc, char **argv);
int shim_read_exit(const char *exit_file, int *code, int *sig);

/* heartbeat.c */
void heartbeat_start(struct agent *a);
/* Applies a desired set: starts missing ranks, stops unlisted or outdated ones. */
void heartbeat_reconcile(struct agent *a, const json_t *desired);

/* perf.c: starts the node probe on the loop; a->perf is set when it answers. */
void perf_start(struct agent *a);
/* Memory of one device: configured, else the host's memory shared by the CPU devices. */
int64_t agent_device_memory_mb(const struct agent_config *cfg);

/* metrics.c */
int metrics_open(struct agent *a);
void metrics_close(struct agent *a);
/* Parses one line from a rank (exposed for tests). */
int metrics_apply_line(struct agent *a, pid_t sender, const char *line, size_t len);

#endif
