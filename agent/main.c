/* main.c: yard-agent's command line, config file and start-up.
 *
 *   yard-agent --controllers URLS --join-token T --data-dir DIR --devices cpu:N|cuda:auto
 *              --name NAME [--host ADDR] [--port-base P] [--heartbeat-ms MS] [--worker PATH]
 *              [--log-max-bytes N] [--log-ship-bytes N] [--log-resend-bytes N]
 *              [--link-gbps G] [--probe-port P] [--config FILE]
 *   yard-agent --self-test      the data-plane check a new build passes before it is run
 *
 * A config file holds the same settings as "key = value" lines (keys are the flag names
 * without dashes, e.g. "heartbeat-ms = 500"); flags given on the command line win.
 * SIGTERM/SIGINT stop the agent and leave its ranks running: a restarted agent re-adopts
 * them from DATA_DIR/ranks.json (see ranks.c).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/common.h"
#include "config.h"

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: yard-agent --controllers URL[,URL...] --join-token TOKEN --data-dir DIR\n"
	    "                  --devices cpu:N|cuda:auto --name NAME [--host ADDR]\n"
	    "                  [--port-base PORT] [--worker PATH]\n"
	    "                  [--heartbeat-ms MS] (default 500; the leader of a large cluster\n"
	    "                                   asks for longer: heartbeat_min_ms)\n"
	    "                  [--watch-ms MS] (long-poll for new work; 0: heartbeats only;\n"
	    "                                   default 25000)\n"
	    "                  [--join-token-file FILE] [--config FILE]\n"
	    "                  [--cacert FILE] (CA certificates, PEM, that https://\n"
	    "                                   controllers are verified against; default:\n"
	    "                                   the system's)\n"
	    "                  [--cert FILE --key FILE] (client certificate and key, PEM, for\n"
	    "                                   controllers that require one)\n"
	    "                  [--log-max-bytes N] (rotate a rank's log past N; default 16 MiB)\n"
	    "                  [--log-ship-bytes N] (per rank per heartbeat; default 64 KiB)\n"
	    "                  [--log-resend-bytes N] (tail resent to a new leader; 256 KiB)\n"
	    "                  [--label NAME=VALUE]... (the node's labels, at most 16: e.g.\n"
	    "                                   switch=leaf3, the topology label placement\n"
	    "                                   keeps a gang within; a change registers the\n"
	    "                                   node again, which needs the join token)\n"
	    "                  [--link-gbps G] (inter-node bandwidth for the planner; default:\n"
	    "                                   measured to a peer the leader names)\n"
	    "                  [--probe-port P] (where peers measure their link to this node;\n"
	    "                                    default: port-base - 1)\n"
	    "                  [--probe-timeout-ms MS] (a node probe's first attempt is\n"
	    "                                           killed after MS, the next two after\n"
	    "                                           2x and 4x; default 5000)\n"
	    "                  [--probe-retry-ms MS] (a node probe that failed 3 times runs\n"
	    "                                         again this often; while ranks run, only\n"
	    "                                         if the leader has no rates for the node;\n"
	    "                                         default 60000)\n"
	    "                  [--reprobe-s S] (measure the node again when its rates are S s\n"
	    "                                   old and no rank runs; default 3600, 0: never;\n"
	    "                                   rates measured while a rank started are\n"
	    "                                   measured again once no rank runs, whatever S,\n"
	    "                                   at most once per --probe-retry-ms)\n"
	    "                  [--upload-wait-s S] (a rank of a job with the controller\n"
	    "                                     checkpoint store that exits with code 0 is\n"
	    "                                     reported once its shards are uploaded,\n"
	    "                                     waiting at most S s; default 30, 0: at once)\n"
	    "                  [--job-dir-keep-s S] (the directories of a job with nothing left\n"
	    "                                        on this node go after S s without a write;\n"
	    "                                        default 86400, 0: kept forever)\n"
	    "                  [--job-gc-interval-ms MS] (how often they are looked at;\n"
	    "                                             default 60000)\n");
}

/* Counts CUDA devices through the runtime library, loaded only when asked for, so the
 * agent runs on machines without the CUDA libraries. */
static int cuda_device_count(struct yard_err *err)
{
	void *lib = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
	int (*get_count)(int *);
	int count = 0;
	if (lib == NULL)
		lib = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL)
		return yard_err_set(
		    err, YARD_EUNSUPPORTED,
		    "devices: cuda:auto: the CUDA runtime (libcudart) is not installed");
	get_count = (int (*)(int *))dlsym(lib, "cudaGetDeviceCount");
	int rc = get_count ? get_count(&count) : -1;
	if (rc != 0 || count == 0) {
		dlclose(lib);
		return yard_err_set(err, YARD_EUNSUPPORTED,
		                    "devices: cuda:auto: no CUDA device found (cudaGetDeviceCount: "
		                    "error %d, %d devices)",
		                    rc, count);
	}
	dlclose(lib);
	return count;
}

/* value as a whole number in lo..hi into *out: 0, or -1 (empty, trailing text, out of range) */
static int parse_long(const char *value, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long n = strtol(value, &end, 10);
	if (end == value || *end != '\0' || errno == ERANGE || n < lo || n > hi)
		return -1;
	*out = n;
	return 0;
}

/* Copies an option's text value into its field; one that does not fit is refused, not cut
 * short (a shortened --data-dir or --name would name something else). */
static int set_text(char *dst, size_t cap, const char *key, const char *value, struct yard_err *err)
{
	if (strlen(value) >= cap)
		return yard_err_set(err, YARD_EINVAL,
		                    "%s: '%.40s...' is longer than %zu characters", key, value,
		                    cap - 1);
	memcpy(dst, value, strlen(value) + 1);
	return 0;
}

/* NAME=VALUE, checked by the controllers' rule (node.register): a name of 1-63 characters
 * of [A-Za-z0-9._-], a value of at most 63 bytes; a name given again takes the new value. */
static int set_label(struct agent_config *cfg, const char *value, struct yard_err *err)
{
	const char *eq = strchr(value, '=');
	size_t name_len = eq == NULL ? 0 : (size_t)(eq - value);
	if (eq == NULL || name_len == 0 || name_len > 63 ||
	    strspn(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") <
	        name_len ||
	    strlen(eq + 1) > 63)
		return yard_err_set(err, YARD_EINVAL,
		                    "label: '%s' is not NAME=VALUE (a name of 1-63 characters of "
		                    "[A-Za-z0-9._-], a value of at most 63 bytes)",
		                    value);
	int i = 0;
	while (i < cfg->n_labels && (strlen(cfg->labels[i][0]) != name_len ||
	                             strncmp(cfg->labels[i][0], value, name_len) != 0))
		i++;
	if (i == AGENT_MAX_LABELS)
		return yard_err_set(err, YARD_EINVAL, "label: more than %d labels",
		                    AGENT_MAX_LABELS);
	snprintf(cfg->labels[i][0], sizeof cfg->labels[i][0], "%.*s", (int)name_len, value);
	snprintf(cfg->labels[i][1], sizeof cfg->labels[i][1], "%s", eq + 1);
	cfg->n_labels += i == cfg->n_labels;
	return 0;
}

json_t *agent_labels(const struct agent *a)
{
	json_t *labels = json_object();
	for (int i = 0; i < a->cfg.n_labels; i++)
		json_object_set_new(labels, a->cfg.labels[i][0], json_string(a->cfg.labels[i][1]));
	return labels;
}

static int set_option(struct agent_config *cfg, const char *key, const char *value,
                      struct yard_err *err)
{
	char *end;
	if (strcmp(key, "controllers") == 0)
		return set_text(cfg->controllers, sizeof cfg->controllers, key, value, err);
	else if (strcmp(key, "cacert") == 0 || strcmp(key, "cert") == 0 ||
	         strcmp(key, "key") == 0) {
		FILE *f = fopen(value, "r");
		if (f == NULL)
			return yard_err_set(err, YARD_EINVAL, "%s %s: %s", key, value,
			                    strerror(errno));
		fclose(f);
		char *to = strcmp(key, "cacert") == 0 ? cfg->cacert
		           : strcmp(key, "cert") == 0 ? cfg->cert
		                                      : cfg->key;
		return set_text(to, PATH_MAX, key, value, err);
	} else if (strcmp(key, "join-token") == 0)
		return set_text(cfg->join_token, sizeof cfg->join_token, key, value, err);
	else if (strcmp(key, "join-token-file") == 0) {
		FILE *f = fopen(value, "r");
		if (f == NULL || fgets(cfg->join_token, sizeof cfg->join_token, f) == NULL) {
			if (f != NULL)
				fclose(f);
			return yard_err_set(err, YARD_EINVAL, "join-token-file %s: cannot read",
			                    value);
		}
		fclose(f);
		cfg->join_token[strcspn(cfg->join_token, "\r\n")] = '\0';
	} else if (strcmp(key, "data-dir") == 0)
		return set_text(cfg->data_dir, sizeof cfg->data_dir, key, value, err);
	else if (strcmp(key, "name") == 0) /* its characters are checked after parsing */
		return set_text(cfg->name, sizeof cfg->name, key, value, err);
	else if (strcmp(key, "host") == 0)
		return set_text(cfg->host, sizeof cfg->host, key, value, err);
	else if (strcmp(key, "worker") == 0)
		return set_text(cfg->worker_path, sizeof cfg->worker_path, key, value, err);
	else if (strcmp(key, "devices") == 0) {
		if (strncmp(value, "cpu:", 4) == 0) {
			long n;
			if (parse_long(value + 4, 1, 64, &n) != 0)
				return yard_err_set(err, YARD_EINVAL,
				                    "devices: '%s': want cpu:N with N in 1..64",
				                    value);
			cfg->n_devices = (int)n;
			cfg->cuda = 0;
		} else if (strcmp(value, "cuda:auto") == 0) {
			int n = cuda_device_count(err);
			if (n < 0)
				return n;
			cfg->n_devices = n;
			cfg->cuda = 1;
		} else {
			return yard_err_set(err, YARD_EINVAL,
			                    "devices: '%s': want cpu:N or cuda:auto", value);
		}
	} else if (strcmp(key, "label") == 0) {
		return set_label(cfg, value, err);
	} else if (strcmp(key, "link-gbps") == 0) {
		double g = strtod(value, &end);
		if (*end != '\0' || !(g > 0 && g <= 1e5))
			return yard_err_set(
			    err, YARD_EINVAL,
			    "link-gbps: '%s' is not a bandwidth in Gbit/s (0..100000]", value);
		cfg->link_gbps = g;
	} else if (strcmp(key, "probe-port") == 0) {
		long n;
		if (parse_long(value, 1, 65535, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "probe-port: '%s' is not a port in 1..65535", value);
		cfg->probe_port = (int)n;
	} else if (strcmp(key, "probe-timeout-ms") == 0) {
		long n;
		if (parse_long(value, 1000, 600000, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "probe-timeout-ms: '%s' is not 1000 .. 600000 ms",
			                    value);
		cfg->probe_timeout_ms = (int)n;
	} else if (strcmp(key, "probe-retry-ms") == 0) {
		long n;
		if (parse_long(value, 100, 3600000, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "probe-retry-ms: '%s' is not 100 .. 3600000 ms", value);
		cfg->probe_retry_ms = (int)n;
	} else if (strcmp(key, "job-dir-keep-s") == 0) {
		long n;
		if (parse_long(value, 0, 10L * 365 * 86400, &n) != 0)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "job-dir-keep-s: '%s' is not 0 (keep forever) .. 315360000 s", value);
		cfg->job_dir_keep_s = n;
	} else if (strcmp(key, "reprobe-s") == 0) {
		long n;
		if (parse_long(value, 0, 31536000, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "reprobe-s: '%s' is not 0 (never) .. 31536000 s",
			                    value);
		cfg->reprobe_s = n;
	} else if (strcmp(key, "job-gc-interval-ms") == 0) {
		long n;
		if (parse_long(value, 100, 3600000, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "job-gc-interval-ms: '%s' is not 100 .. 3600000 ms",
			                    value);
		cfg->gc_interval_ms = (int)n;
	} else if (strcmp(key, "watch-ms") == 0) {
		long n;
		if (parse_long(value, 0, 60000, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "watch-ms: '%s' is not 0 (no watch) .. 60000 ms",
			                    value);
		cfg->watch_ms = (int)n;
	} else if (strcmp(key, "upload-wait-s") == 0) {
		long n;
		if (parse_long(value, 0, 3600, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "upload-wait-s: '%s' is not 0..3600 s", value);
		cfg->upload_wait_ms = (int)n * 1000;
	} else if (strcmp(key, "port-base") == 0 || strcmp(key, "heartbeat-ms") == 0 ||
	           strcmp(key, "stop-grace-ms") == 0) {
		long n;
		if (parse_long(value, 1, 65535 * 1000L, &n) != 0)
			return yard_err_set(err, YARD_EINVAL, "%s: '%s' is not a positive integer",
			                    key, value);
		if (strcmp(key, "port-base") == 0) {
			if (n > 65535 - 64)
				return yard_err_set(err, YARD_EINVAL,
				                    "port-base: %ld leaves no room for 64 ports",
				                    n);
			cfg->port_base = (int)n;
		} else if (strcmp(key, "heartbeat-ms") == 0)
			cfg->heartbeat_ms = (int)n;
		else
			cfg->stop_grace_ms = (int)n;
	} else if (strcmp(key, "log-max-bytes") == 0 || strcmp(key, "log-ship-bytes") == 0 ||
	           strcmp(key, "log-resend-bytes") == 0) {
		/* limits: a rotation needs room to be worth it; a piece must fit a heartbeat */
		long long min = strcmp(key, "log-resend-bytes") == 0 ? 0 : 1024;
		long long max = strcmp(key, "log-max-bytes") == 0    ? 1LL << 40
		                : strcmp(key, "log-ship-bytes") == 0 ? 256LL << 10
		                                                     : 64LL << 20;
		long long n = strtoll(value, &end, 10);
		if (*end != '\0' || end == value || n < min || n > max)
			return yard_err_set(err, YARD_EINVAL,
			                    "%s: '%s' is not a byte count in %lld..%lld", key,
			                    value, min, max);
		if (strcmp(key, "log-max-bytes") == 0)
			cfg->log_max_bytes = n;
		else if (strcmp(key, "log-ship-bytes") == 0)
			cfg->log_ship_bytes = n;
		else
			cfg->log_resend_bytes = n;
	} else
		return yard_err_set(err, YARD_EINVAL, "unknown setting '%s'", key);
	return 0;
}

static int load_config_file(struct agent_config *cfg, const char *path, struct yard_err *err)
{
	char line[2048];
	int lineno = 0;
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return yard_err_set(err, YARD_EIO, "config %s: %s", path, strerror(errno));
	while (fgets(line, sizeof line, f) != NULL) {
		char *key = line, *eq, *value, *end;
		lineno++;
		while (*key == ' ' || *key == '\t')
			key++;
		if (*key == '#' || *key == '\n' || *key == '\0')
			continue;
		eq = strchr(key, '=');
		if (eq == NULL) {
			fclose(f);
			return yard_err_set(err, YARD_EINVAL, "config %s:%d: expected key = value",
			                    path, lineno);
		}
		value = eq + 1;
		for (end = eq; end > key && (end[-1] == ' ' || end[-1] == '\t'); end--)
			;
		*end = '\0';
		while (*value == ' ' || *value == '\t')
			value++;
		value[strcspn(value, "\r\n")] = '\0';
		if (set_option(cfg, key, value, err) != 0) {
			char msg[sizeof err->msg];
			snprintf(msg, sizeof msg, "%s", err->msg);
			fclose(f);
			return yard_err_set(err, YARD_EINVAL, "config %s:%d: %s", path, lineno,
			                    msg);
		}
	}
	fclose(f);
	return 0;
}

static void default_worker_path(struct agent_config *cfg)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		char *slash;
		self[n] = '\0';
		snprintf(cfg->self_path, sizeof cfg->self_path, "%s", self);
		slash = strrchr(self, '/');
		if (slash != NULL) {
			*slash = '\0';
			snprintf(cfg->worker_path, sizeof cfg->worker_path, "%s/yard-worker", self);
			return;
		}
	}
	snprintf(cfg->worker_path, sizeof cfg->worker_path, "yard-worker");
}

static int lock_data_dir(const char *dir, struct yard_err *err)
{
	char path[PATH_MAX + 16];
	int fd;
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return yard_err_set(err, YARD_EIO, "data dir %s: %s", dir, strerror(errno));
	snprintf(path, sizeof path, "%s/agent.lock", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return yard_err_set(err, YARD_EIO, "%s: %s", path, strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
		return yard_err_set(err, YARD_EBUSY,
		                    "data dir %s is in use by another yard-agent (lock %s held)",
		                    dir, path);
	return 0; /* the descriptor stays open (and locked) for the life of the process */
}

static void load_node_token(struct agent *a)
{
	char path[PATH_MAX + 16];
	FILE *f;
	snprintf(path, sizeof path, "%s/node.token", a->cfg.data_dir);
	f = fopen(path, "r");
	if (f == NULL)
		return;
	if (fgets(a->node_token, sizeof a->node_token, f) != NULL) {
		a->node_token[strcspn(a->node_token, "\r\n")] = '\0';
		a->registered = a->node_token[0] != '\0';
	}
	fclose(f);
}

/* DATA_DIR/agent.pid: the agent's pid, which changes when a guardian rolls a node back. */
static void write_pid_file(const struct agent *a)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/agent.pid", a->cfg.data_dir);
	FILE *f = fopen(path, "we");
	if (f == NULL) {
		log_warn("cannot write %s: %s", path, strerror(errno));
		return;
	}
	fprintf(f, "%d\n", (int)getpid());
	fclose(f);
}

static void on_signal(uv_signal_t *s, int signum)
{
	struct agent *a = s->data;
	log_info("signal %d: stopping the agent; %d rank(s) keep running and are re-adopted on "
	         "restart",
	         signum, ranks_running(a));
	a->stopping = 1;
	a->watch_abort = 1; /* a waiting watch must not hold up the exit */
	/* a stop is not a crash: an upgrade's guardian must not bring the agent back */
	if (a->up.guardian_pid > 0 && kill(a->up.guardian_pid, SIGKILL) == 0)
		log_info("upgrade guardian pid %d stopped with the agent", (int)a->up.guardian_pid);
	ranks_save_state(a);
	uv_stop(a->loop);
}

int main(int argc, char **argv)
{
	static const struct option long_opts[] = {
	    {"controllers", required_argument, NULL, 0},
	    {"cacert", required_argument, NULL, 0},
	    {"cert", required_argument, NULL, 0},
	    {"key", required_argument, NULL, 0},
	    {"join-token", required_argument, NULL, 0},
	    {"join-token-file", required_argument, NULL, 0},
	    {"data-dir", required_argument, NULL, 0},
	    {"devices", required_argument, NULL, 0},
	    {"name", required_argument, NULL, 0},
	    {"host", required_argument, NULL, 0},
	    {"port-base", required_argument, NULL, 0},
	    {"heartbeat-ms", required_argument, NULL, 0},
	    {"watch-ms", required_argument, NULL, 0},
	    {"stop-grace-ms", required_argument, NULL, 0},
	    {"upload-wait-s", required_argument, NULL, 0},
	    {"worker", required_argument, NULL, 0},
	    {"log-max-bytes", required_argument, NULL, 0},
	    {"log-ship-bytes", required_argument, NULL, 0},
	    {"log-resend-bytes", required_argument, NULL, 0},
	    {"label", required_argument, NULL, 0},
	    {"link-gbps", required_argument, NULL, 0},
	    {"probe-port", required_argument, NULL, 0},
	    {"probe-retry-ms", required_argument, NULL, 0},
	    {"probe-timeout-ms", required_argument, NULL, 0},
	    {"job-dir-keep-s", required_argument, NULL, 0},
	    {"reprobe-s", required_argument, NULL, 0},
	    {"job-gc-interval-ms", required_argument, NULL, 0},
	    {"config", required_argument, NULL, 0},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0}};
	static struct agent agent;
	struct agent *a = &agent;
	struct yard_err err = {0};
	int idx, c;

	if (argc >= 2 && strcmp(argv[1], "--rank-shim") == 0)
		return shim_main(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "--self-test") == 0)
		return selftest_main(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "--upgrade-guardian") == 0)
		return guardian_main(argc, argv);
	a->argc = argc;
	a->argv = argv;

	a->metrics_fd = -1;
	snprintf(a->cfg.host, sizeof a->cfg.host, "127.0.0.1");
	buildinfo_version(a->cfg.version, sizeof a->cfg.version);
	a->cfg.port_base = 29500;
	a->cfg.n_devices = 0;
	a->cfg.heartbeat_ms = 500;
	a->cfg.watch_ms = 25000;
	a->cfg.probe_retry_ms = 60000;
	a->cfg.probe_timeout_ms = 5000;
	a->cfg.job_dir_keep_s = 86400;
	a->cfg.reprobe_s = 3600;
	a->cfg.gc_interval_ms = 60000;
	a->watch_version = -1;
	a->desired_version = -1;
	a->leader_has_perf = -1;
	a->last_ok_mono_ms = yard_now_mono_ms(); /* the fencing clock starts with the agent */
	a->cfg.stop_grace_ms = 5000;
	a->cfg.upload_wait_ms = 30000;
	a->cfg.log_max_bytes = 16 << 20;
	a->cfg.log_ship_bytes = 64 << 10;
	a->cfg.log_resend_bytes = 256 << 10;
	default_worker_path(&a->cfg);

	/* the config file first, so that flags override it */
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--config") == 0 &&
		    load_config_file(&a->cfg, argv[i + 1], &err) != 0) {
			fprintf(stderr, "yard-agent: %s\n", err.msg);
			return 2;
		}
	while ((c = getopt_long(argc, argv, "h", long_opts, &idx)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c != 0) {
			usage(stderr);
			return 2;
		}
		if (strcmp(long_opts[idx].name, "config") == 0)
			continue;
		if (set_option(&a->cfg, long_opts[idx].name, optarg, &err) != 0) {
			fprintf(stderr, "yard-agent: --%s\n", err.msg);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "yard-agent: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (a->cfg.controllers[0] == '\0' || a->cfg.data_dir[0] == '\0' || a->cfg.name[0] == '\0' ||
	    a->cfg.n_devices == 0) {
		fprintf(
		    stderr,
		    "yard-agent: --controllers, --data-dir, --name and --devices are required\n");
		usage(stderr);
		return 2;
	}
	/* the controllers' rule for node names (node.register): refused here, at once, rather
	 * than by every registration the agent would send */
	size_t name_len = strspn(a->cfg.name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	                                      "0123456789._-");
	if (a->cfg.name[name_len] != '\0' || name_len > 63) {
		fprintf(stderr,
		        "yard-agent: --name: '%s' must be 1-63 characters of [A-Za-z0-9._-]\n",
		        a->cfg.name);
		return 2;
	}
	/* and for hosts: letters, digits, '.', '-' and ':' (a name, IPv4 or IPv6 address) */
	size_t host_len = strspn(a->cfg.host, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	                                      "0123456789.-:");
	if (a->cfg.host[host_len] != '\0' || host_len == 0 || host_len > 63) {
		fprintf(
		    stderr,
		    "yard-agent: --host: '%s' is not a host name or address (1-63 characters of "
		    "[A-Za-z0-9.:-])\n",
		    a->cfg.host);
		return 2;
	}
	if ((a->cfg.cert[0] == '\0') != (a->cfg.key[0] == '\0')) {
		fprintf(stderr, "yard-agent: --cert and --key go together\n");
		return 2;
	}
	agent_http_set_ca_file(a->cfg.cacert);
	agent_http_set_client_cert(a->cfg.cert, a->cfg.key);
	if (a->cfg.probe_port == 0) /* below the rank ports (port-base 1: above them) */
		a->cfg.probe_port =
		    a->cfg.port_base > 1 ? a->cfg.port_base - 1 : a->cfg.port_base + 64;
	{
		char component[96];
		snprintf(component, sizeof component, "yard-agent[%s]", a->cfg.name);
		yard_log_init(component);
	}
	if (lock_data_dir(a->cfg.data_dir, &err) != 0) {
		log_error("%s", err.msg);
		return 1;
	}
	load_node_token(a);
	if (ckpt_init(a, &err) != 0) {
		log_error("%s", err.msg);
		return 1;
	}
	if (!a->registered && a->cfg.join_token[0] == '\0') {
		log_error("not registered yet and no --join-token given");
		return 2;
	}
	if (a->registered) {
		/* labels changed since the node registered: only a registration carries them */
		json_t *now = agent_labels(a);
		char *now_text = json_dumps(now, JSON_COMPACT | JSON_SORT_KEYS);
		char *saved = agent_registered_labels(a);
		if (now_text != NULL && saved != NULL && strcmp(now_text, saved) != 0) {
			if (a->cfg.join_token[0] == '\0') {
				log_error(
				    "labels %s differ from %s, those of the node's registration; "
				    "registering again needs --join-token",
				    now_text, saved);
				return 2;
			}
			log_info("labels %s differ from %s, those of the node's registration: "
			         "registering again",
			         now_text, saved);
			a->registered = 0;
		}
		free(now_text);
		free(saved);
		json_decref(now);
	}

	write_pid_file(a);
	upgrade_init(a);
	workerup_init(a);
	if (buildinfo_fault(a->cfg.name) == BUILD_FAULT_CRASH) {
		log_error("version %s: crashing on purpose (a build marked with the crash fault "
		          "by scripts/mark-build)",
		          a->cfg.version);
		abort();
	}
	if (buildinfo_fault(a->cfg.name) == BUILD_FAULT_SLOW_START) {
		log_warn("version %s: starting %d ms late on purpose (a build marked with the "
		         "slow-start fault by scripts/mark-build)",
		         a->cfg.version, BUILD_SLOW_START_MS);
		yard_sleep_ms(BUILD_SLOW_START_MS);
	}

	/* the thread pool (4 threads by default) carries heartbeats, transfers, probes and a
	 * watch that waits most of the time: room for all of them */
	setenv("UV_THREADPOOL_SIZE", "8", 0);
	a->loop = uv_default_loop();
	a->loop->data = a;
	if (metrics_open(a) != 0)
		return 1;
	int adopted = ranks_load_state(a);
	ranks_save_state(a);
	uv_signal_init(a->loop, &a->sigterm);
	uv_signal_init(a->loop, &a->sigint);
	a->sigterm.data = a->sigint.data = a;
	uv_signal_start(&a->sigterm, on_signal, SIGTERM);
	uv_signal_start(&a->sigint, on_signal, SIGINT);
	log_info("node %s: version %s, %d %s device(s), ranks listen from port %d, link probes on "
	         "port %d, controllers %s",
	         a->cfg.name, a->cfg.version, a->cfg.n_devices, a->cfg.cuda ? "CUDA" : "CPU",
	         a->cfg.port_base, a->cfg.probe_port, a->cfg.controllers);
	if (linkprobe_listen(a, &err) != 0)
		log_warn("%s", err.msg);
	perf_begin(a, adopted);
	gc_start(a);
	heartbeat_start(a);
	uv_run(a->loop, UV_RUN_DEFAULT);
	metrics_close(a);
	return 0;
}
