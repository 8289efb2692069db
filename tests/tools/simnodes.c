/* simnodes.c: yard-simnodes, many simulated agents in one process for the scheduling-at-scale
 * benchmark (scripts/bench/scale; not a test). Each simulated node registers with the join
 * token like yard-agent and then speaks the real heartbeat protocol (docs/api.md) with its
 * own node token: it "runs" every rank the controller lists in `desired` (reported running)
 * for --hold-ms, then reports it exited with code 0, so gangs finish and free their devices.
 * Like yard-agent (heartbeat_soon), a node whose rank exits heartbeats 20 ms later rather
 * than at its next regular heartbeat, at most every quarter interval. With --watch-ms W each
 * node also keeps a watch (POST /v1/agents/watch, W ms) waiting at the leader, as yard-agent
 * does, and heartbeats at once (20 ms after its previous one at the earliest) when it
 * answers with a new version.
 * Heartbeats go over keep-alive connections of the simulator's own (tests/tools/hconn.h, one
 * per heartbeat in flight): through libcurl they cost it 2.4 times the CPU, which the
 * controllers share on one machine. Watches too, one connection per node (through
 * libcurl, 10,000 waiting watches cost it 500 µs of CPU per heartbeat). Registrations and
 * submissions use libcurl.
 * Optionally it also submits a stream of command jobs of 8..64 ranks, as a client of its own:
 * --inflight bounds the heartbeats under way, --submit-inflight the submissions (each waits for
 * its commit), so that submissions waiting on the leader never hold back the nodes' heartbeats.
 *
 *   yard-simnodes --endpoint URL --join-token T --nodes N [--devices 8] [--prefix sim]
 *                 [--heartbeat-ms 1000] [--hold-ms 2000] [--inflight 64]
 *                 [--quiet-seconds 10] [--seconds 30] [--submit-token T --jobs-per-s R
 *                 [--submit-inflight 1024]] [--leader-pid PID] [--watch-ms W]
 *                 [--nodes-per-switch K] (node i labelled switch=sw-<i / K>: topology)
 *
 * After registering, it heartbeats alone for --quiet-seconds, then heartbeats and submits
 * for --seconds. With --leader-pid (same machine) it reads the leader's CPU time and memory
 * from /proc at each phase boundary. Prints one JSON line: registration time, heartbeats
 * sent and their latency, leader CPU per heartbeat (quiet phase) and leader CPU share and
 * RSS (job phase), ranks started, jobs submitted. What it does not do: spawn processes, open rank
 * ports, report steps. SIM_TRACE_NODE=NAME prints every answer that node applies (stderr).
 */
#include <curl/curl.h>
#include <jansson.h>
#include <sys/epoll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/jsonx.h"
#include "hconn.h"
#include "scheduler/desired.h"

#define RANKS_PER_NODE_MAX 64
#define LAT_MAX 2000000

struct sim_rank {
	char job[32];
	int rank, generation;
	double started_ms;
	int seen; /* listed in the latest desired set */
};

struct sim_node {
	char name[64];
	char token[96];
	double next_ms;
	double sent_ms;       /* the latest heartbeat went out then */
	double every_ms;      /* the interval it keeps (every_ms below, once it heard of it) */
	uint64_t answer_hash; /* of the latest answer applied: an equal one is not parsed */
	char desired_tag[24]; /* of the latest desired set, sent back as yard-agent does */
	int busy;
	int watching;          /* a watch is waiting */
	int hb_again;          /* news came while a heartbeat was in flight */
	long long watch_version; /* the last one answered, -1: none */
	/* the leader and news version of the desired set applied (desired_stale) */
	char desired_leader[24];
	long long desired_version;
	double watch_retry_ms; /* no watch before this (after a failure) */
	struct sim_rank ranks[RANKS_PER_NODE_MAX];
	int n_ranks;
};

/* heartbeats go over hconn (hb_pool), everything else over libcurl */
enum req_kind { REQ_REGISTER, REQ_SUBMIT };

struct req {
	CURL *easy;
	CURLM *multi;
	enum req_kind kind;
	struct sim_node *node;
	struct curl_slist *headers;
	char *body;
	char *resp;
	size_t resp_len;
	double started_ms;
};

static struct {
	const char *endpoint, *join_token, *submit_token, *prefix;
	const char *metrics_out; /* the leader's /metrics as the job phase starts, saved here */
	int nodes, devices, heartbeat_ms, hold_ms, seconds, quiet_seconds, inflight, leader_pid;
	int submit_inflight;
	int watch_ms;
	int nodes_per_switch; /* > 0: node i registers with the label switch=sw-<i / this> */
	double jobs_per_s;
} opt = {.prefix = "sim",
         .devices = 8,
         .heartbeat_ms = 1000,
         .hold_ms = 2000,
         .seconds = 30,
         .quiet_seconds = 10,
         .inflight = 64,
         .submit_inflight = 1024};

/* utime + stime of pid in clock ticks, and its resident set in KiB; -1 when unknown. */
static void proc_sample(int pid, long long *ticks, long long *rss_kib)
{
	char path[64], buf[4096];
	FILE *f;
	*ticks = *rss_kib = -1;
	if (pid <= 0)
		return;
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) != NULL) {
		if (fgets(buf, sizeof buf, f) != NULL) {
			const char *p = strrchr(buf, ')');
			unsigned long long ut = 0, st = 0;
			if (p != NULL &&
			    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			           &ut, &st) == 2)
				*ticks = (long long)(ut + st);
		}
		fclose(f);
	}
	snprintf(path, sizeof path, "/proc/%d/status", pid);
	if ((f = fopen(path, "r")) != NULL) {
		while (fgets(buf, sizeof buf, f) != NULL)
			if (strncmp(buf, "VmRSS:", 6) == 0)
				*rss_kib = atoll(buf + 6);
		fclose(f);
	}
}

static char endpoint[512]; /* where requests go; follows 307s to the leader */
/* the heartbeats' keep-alive connections (one per heartbeat in flight) on the epoll set, with
 * this tag in their events' upper half (curl's sockets carry their multi handle's index) */
#define HB_TAG 0xffffu
#define HB_TIMEOUT_MS 30000
static struct hconn_pool *hb_pool;
/* the watches' (--watch-ms): connection i is node i's, so a watch finds its own at once */
#define WATCH_TAG 0xfffeu
static struct hconn_pool *watch_pool;
static int hb_inflight;
static long redirects;
static struct sim_node *nodes;
static double *hb_lat;
static long n_hb, hb_errors, reg_errors, submits, submit_errors, ranks_started, hb_late;
static long watch_answers, watch_news, watch_errors;
static int *need_watch, n_need_watch; /* nodes (indices) without a watch waiting */
static double hb_late_max_ms;
static unsigned rng = 12345;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static size_t collect(char *p, size_t s, size_t n, void *u)
{
	struct req *r = u;
	char *grown = realloc(r->resp, r->resp_len + s * n + 1);
	if (grown == NULL)
		return 0;
	r->resp = grown;
	memcpy(r->resp + r->resp_len, p, s * n);
	r->resp_len += s * n;
	r->resp[r->resp_len] = '\0';
	return s * n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* A multi handle each for registrations and submissions (heartbeats and watches go over
 * hconn pools). */
#define REGISTER_MULTI 0
#define SUBMIT_MULTI 1
#define N_MULTIS 2
static CURLM *multis[N_MULTIS];

static struct req *req_new(enum req_kind kind, const char *path, const char *token, char *body)
{
	CURLM *multi = kind == REQ_SUBMIT ? multis[SUBMIT_MULTI] : multis[REGISTER_MULTI];
	char url[1024], auth[256];
	struct req *r = calloc(1, sizeof *r);
	r->kind = kind;
	r->body = body;
	r->easy = curl_easy_init();
	snprintf(url, sizeof url, "%s%s", endpoint, path);
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
	r->headers = curl_slist_append(r->headers, auth);
	r->headers = curl_slist_append(r->headers, "Content-Type: application/json");
	curl_easy_setopt(r->easy, CURLOPT_URL, url);
	curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->headers);
	curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, 30000L);
	curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(r->easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
	r->started_ms = now_ms();
	r->multi = multi;
	curl_multi_add_handle(multi, r->easy);
	return r;
}

static void req_free(struct req *r)
{
	curl_multi_remove_handle(r->multi, r->easy);
	curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->headers);
	free(r->body);
	free(r->resp);
	free(r);
}

/* A 307 names the leader's API URL (docs/api.md): go there from now on, as agents do. */
static int follow_leader(const char *resp)
{
	json_t *root = resp ? jsonx_loads(resp) : NULL;
	const char *url = json_string_value(json_object_get(root, "leader_url"));
	int ok = url != NULL && strlen(url) < sizeof endpoint;
	if (ok) {
		char err[256];
		snprintf(endpoint, sizeof endpoint, "%s", url);
		redirects++;
		if (hconn_set_endpoint(hb_pool, endpoint, err, sizeof err) != 0 ||
		    (watch_pool != NULL &&
		     hconn_set_endpoint(watch_pool, endpoint, err, sizeof err) != 0)) {
			fprintf(stderr, "yard-simnodes: the leader's URL: %s\n", err);
			ok = 0;
		}
	}
	json_decref(root);
	return ok;
}

static char *register_body(const struct sim_node *n)
{
	json_t *devices = json_array();
	for (int d = 0; d < opt.devices; d++)
		json_array_append_new(devices, json_pack("{s:i,s:s,s:i}", "index", d, "kind", "cpu",
		                                         "memory_mb", 16384));
	json_t *b = json_pack("{s:s,s:s,s:i,s:s,s:o}", "name", n->name, "host", "127.0.0.1",
	                      "port_base", 40000, "version", "sim", "devices", devices);
	if (opt.nodes_per_switch > 0) {
		char sw[32];
		snprintf(sw, sizeof sw, "sw-%ld", (long)(n - nodes) / opt.nodes_per_switch);
		json_object_set_new(b, "labels", json_pack("{s:s}", "switch", sw));
	}
	char *text = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	return text;
}

/* The heartbeat body, written directly (jansson building and printing it for every
 * heartbeat was a good part of the simulator's CPU, which it shares with the controllers).
 * Job ids and node names are [A-Za-z0-9._-]: nothing to escape. */
static char *heartbeat_body(const struct sim_node *n, double now)
{
	size_t cap = 300 + (size_t)n->n_ranks * 160, len = 0; /* a rank takes under 120 */
	char *text = malloc(cap);
	if (text == NULL)
		return NULL;
	len += (size_t)snprintf(text + len, cap - len,
	                        "{\"node\":\"%s\",\"version\":\"sim\",\"free_disk_mb\":100000,"
	                        "\"ranks\":[",
	                        n->name);
	for (int i = 0; i < n->n_ranks; i++) {
		const struct sim_rank *r = &n->ranks[i];
		int done = now - r->started_ms >= opt.hold_ms;
		len += (size_t)snprintf(text + len, cap - len,
		                        "%s{\"job\":\"%s\",\"rank\":%d,\"generation\":%d,\"pid\":%d,"
		                        "\"state\":\"%s\"%s}",
		                        i ? "," : "", r->job, r->rank, r->generation, 1000 + i,
		                        done ? "exited" : "running", done ? ",\"exit_code\":0" : "");
	}
	/* each job's shared part once per answer, as yard-agent takes it */
	if (n->desired_tag[0] != '\0')
		snprintf(text + len, cap - len, "],\"desired_shared\":true,\"desired_tag\":\"%s\"}",
		         n->desired_tag);
	else
		snprintf(text + len, cap - len, "],\"desired_shared\":true}");
	return text;
}

/* A small reader of the answer's "desired" entries: each entry's job, rank and generation,
 * every other value skipped (the entries carry specs and peer lists: parsing whole answers
 * with jansson was most of the simulator's CPU). */
static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

static const char *skip_string(const char *p) /* p at the opening quote */
{
	for (p++; *p != '\0' && *p != '"'; p++)
		if (*p == '\\' && p[1] != '\0')
			p++;
	return *p == '"' ? p + 1 : p;
}

static const char *skip_value(const char *p)
{
	p = skip_ws(p);
	if (*p == '"')
		return skip_string(p);
	if (*p == '{' || *p == '[') {
		int depth = 0;
		while (*p != '\0') {
			if (*p == '"') {
				p = skip_string(p);
				continue;
			}
			if (*p == '{' || *p == '[')
				depth++;
			else if ((*p == '}' || *p == ']') && --depth == 0)
				return p + 1;
			p++;
		}
		return p;
	}
	while (*p != '\0' && *p != ',' && *p != '}' && *p != ']')
		p++;
	return p;
}

/* Calls fn for each desired entry; -1 when the answer has no "desired" array. */
static int each_desired(const char *resp, void (*fn)(void *, const char *, int, int), void *arg)
{
	const char *p = strstr(resp, "\"desired\":");
	if (p == NULL)
		return -1;
	p = skip_ws(p + 10);
	if (*p++ != '[')
		return -1;
	for (;;) {
		p = skip_ws(p);
		if (*p == ',') {
			p++;
			continue;
		}
		if (*p != '{')
			return 0; /* ']' or the end */
		char job[32] = "";
		int rank = -1, gen = -1;
		p++;
		for (;;) {
			p = skip_ws(p);
			if (*p == ',') {
				p++;
				continue;
			}
			if (*p != '"')
				break; /* '}' */
			const char *key = p + 1, *key_end = skip_string(p) - 1;
			size_t key_len = (size_t)(key_end - key);
			p = skip_ws(key_end + 1);
			if (*p == ':')
				p = skip_ws(p + 1);
			if (key_len == 3 && memcmp(key, "job", 3) == 0 && *p == '"') {
				const char *v = p + 1, *end = skip_string(p) - 1;
				size_t n = (size_t)(end - v) < sizeof job - 1 ? (size_t)(end - v) : sizeof job - 1;
				memcpy(job, v, n);
				job[n] = '\0';
				p = end + 1;
			} else if (key_len == 4 && memcmp(key, "rank", 4) == 0) {
				rank = atoi(p);
				p = skip_value(p);
			} else if (key_len == 10 && memcmp(key, "generation", 10) == 0) {
				gen = atoi(p);
				p = skip_value(p);
			} else {
				p = skip_value(p);
			}
		}
		if (*p == '}')
			p++;
		if (job[0] != '\0' && rank >= 0)
			fn(arg, job, rank, gen);
		if (*p == '\0')
			return 0;
	}
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static void exit_brings_heartbeat_forward(struct sim_node *n);

/* When each node heartbeats next: a min-heap of (time, node); an entry whose time is no
 * longer its node's next_ms is stale and skipped (a full scan of the nodes on every turn of
 * the loop was a fifth of the simulator's CPU at 10,000 nodes). */
struct due {
	double at;
	int node;
};
static struct due *dues;
static size_t n_dues, cap_dues;

static void due_push(int node, double at)
{
	if (n_dues == cap_dues) {
		cap_dues = cap_dues ? 2 * cap_dues : 1024;
		dues = realloc(dues, cap_dues * sizeof *dues);
	}
	size_t i = n_dues++;
	while (i > 0 && dues[(i - 1) / 2].at > at) {
		dues[i] = dues[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	dues[i] = (struct due){at, node};
}

static struct due due_pop(void)
{
	struct due top = dues[0], last = dues[--n_dues];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n_dues)
			break;
		if (c + 1 < n_dues && dues[c + 1].at < dues[c].at)
			c++;
		if (dues[c].at >= last.at)
			break;
		dues[i] = dues[c];
		i = c;
	}
	if (n_dues > 0)
		dues[i] = last;
	return top;
}

static void set_next(struct sim_node *n, double at)
{
	n->next_ms = at;
	due_push((int)(n - nodes), at);
}

struct desired_ctx {
	struct sim_node *n;
	double now;
};

/* One desired entry: a rank the node runs already stays, a new one starts now. */
static void desired_one(void *arg, const char *job, int rank, int gen)
{
	struct desired_ctx *ctx = arg;
	struct sim_node *n = ctx->n;
	int k;
	for (k = 0; k < n->n_ranks; k++)
		if (strcmp(n->ranks[k].job, job) == 0 && n->ranks[k].rank == rank &&
		    n->ranks[k].generation == gen)
			break;
	if (k == n->n_ranks) {
		if (n->n_ranks == RANKS_PER_NODE_MAX)
			return;
		struct sim_rank *r = &n->ranks[n->n_ranks++];
		snprintf(r->job, sizeof r->job, "%s", job);
		r->rank = rank;
		r->generation = gen;
		r->started_ms = ctx->now;
		ranks_started++;
	}
	n->ranks[k].seen = 1;
}

/* Heartbeats go every_ms apart: --heartbeat-ms, or the longer interval the leader asks of
 * every agent ("heartbeat_min_ms", grown with the cluster; yard-agent does the same). */
static double every_ms;
static long every_changes; /* how often it changed (printed) */

static void follow_leader_interval(const char *resp)
{
	const char *at = strstr(resp, "\"heartbeat_min_ms\":");
	double want = opt.heartbeat_ms;
	if (at != NULL) {
		long asked = strtol(at + 19, NULL, 10);
		if (asked > want && asked <= 60000)
			want = (double)asked;
	}
	if (want != every_ms) {
		every_ms = want;
		every_changes++;
	}
}

/* The gap to the node's next heartbeat: every_ms, except that a node going over to a longer
 * interval waits a random part of the difference once, as yard-agent does, so that nodes
 * whose heartbeats were spread over the shorter interval spread over the longer one. */
static double node_gap(struct sim_node *n)
{
	static unsigned jitter = 54321; /* not rng: the job sizes stay the same sequence */
	if (n->every_ms == every_ms)
		return every_ms;
	double gap = every_ms;
	if (every_ms > n->every_ms) {
		jitter = jitter * 1103515245u + 12345u;
		gap = n->every_ms + (every_ms - n->every_ms) * ((jitter >> 8) % 65536) / 65536.0;
	}
	n->every_ms = every_ms;
	return gap;
}

/* The leader's watches put the desired set in their answers when asked (a heartbeat answer
 * says "offers_watch_desired"), as yard-agent asks once offered. */
static int offers_watch_desired;
static long watch_sets; /* watch answers that carried the set */

/* The integer after key (e.g. "\"desired_version\":") in an answer, -1 when none. */
static long long answer_number(const char *resp, const char *key)
{
	const char *at = strstr(resp, key);
	return at != NULL ? strtoll(at + strlen(key), NULL, 10) : -1;
}

/* The desired set replaces what the node runs: new ranks start now, missing ones go. An
 * answer equal to the last one changes nothing and is not parsed (the simulator would
 * otherwise spend half its CPU in jansson and fall further behind its schedule). A set
 * older than the one applied (a heartbeat's answer computed before a watch's, arriving
 * after it: desired_stale, yard-agent's rule) changes nothing either. version_key: the
 * answer's news version ("\"desired_version\":" in a heartbeat's, "\"version\":" in a
 * watch's, which says nothing of the heartbeat interval). */
static void apply_desired(struct sim_node *n, const char *resp, double now, const char *version_key)
{
	char leader[24] = "";
	const char *lid = strstr(resp, "\"leader_id\":\"");
	if (lid != NULL && sscanf(lid + 13, "%23[^\"]", leader) != 1)
		leader[0] = '\0';
	long long version = answer_number(resp, version_key);
	if (desired_stale(n->desired_leader, n->desired_version, lid ? leader : NULL, version))
		return;
	int from_watch = strcmp(version_key, "\"version\":") == 0;
	uint64_t h = fnv1a(resp);
	static const char *trace;
	if (trace == NULL)
		trace = getenv("SIM_TRACE_NODE") ? getenv("SIM_TRACE_NODE") : "";
	if (trace[0] != '\0' && strcmp(trace, n->name) == 0)
		fprintf(stderr, "TRACE %.0f %s hash %s ranks %d answer %.300s\n", now, n->name,
		        h == n->answer_hash ? "same" : "new", n->n_ranks, resp);
	if (h != n->answer_hash && !from_watch) {
		follow_leader_interval(resp);
		offers_watch_desired = strstr(resp, "\"offers_watch_desired\":true") != NULL;
	}
	snprintf(n->desired_leader, sizeof n->desired_leader, "%s", leader);
	n->desired_version = version;
	/* "desired_unchanged": the set it holds, named by its tag (docs/api.md) */
	if (h == n->answer_hash || strstr(resp, "\"desired_unchanged\":true") != NULL) {
		exit_brings_heartbeat_forward(n);
		return;
	}
	n->answer_hash = h;
	const char *tag = strstr(resp, "\"desired_tag\":\"");
	n->desired_tag[0] = '\0';
	if (tag != NULL && sscanf(tag + 15, "%23[0-9a-f]", n->desired_tag) != 1)
		n->desired_tag[0] = '\0';
	for (int k = 0; k < n->n_ranks; k++)
		n->ranks[k].seen = 0;
	struct desired_ctx ctx = {n, now};
	each_desired(resp, desired_one, &ctx);
	for (int k = 0; k < n->n_ranks;)
		if (!n->ranks[k].seen)
			n->ranks[k] = n->ranks[--n->n_ranks];
		else
			k++;
	exit_brings_heartbeat_forward(n);
}

/* The first exit not reported yet brings the next heartbeat forward (heartbeat_soon). */
static void exit_brings_heartbeat_forward(struct sim_node *n)
{
	for (int k = 0; k < n->n_ranks; k++) {
		double exit_ms = n->ranks[k].started_ms + opt.hold_ms;
		if (exit_ms <= n->sent_ms)
			continue; /* the heartbeat in flight at its exit reported it */
		double at = exit_ms + 20;
		if (at < n->sent_ms + every_ms / 4.0)
			at = n->sent_ms + every_ms / 4.0;
		if (at < n->next_ms)
			set_next(n, at);
	}
}

/* A watch's answer (hconn's callback for watch_pool; user is the node): a new version brings
 * the node's heartbeat forward, as yard-agent's does; the node watches again either way. */
static void watch_done(void *user, int status, const char *body, size_t len, const char *err)
{
	struct sim_node *n = user;
	double t = now_ms();
	(void)len;
	/* {"version": V, ...}: read without jansson (the answer may carry the desired set) */
	long long v = status == 200 && strncmp(body, "{\"version\":", 11) == 0
	                  ? strtoll(body + 11, NULL, 10)
	                  : -1;
	n->watching = 0;
	if (v >= 0) {
		watch_answers++;
		if (v != n->watch_version) {
			n->watch_version = v;
			watch_news++;
			if (strstr(body, "\"desired\":[") != NULL ||
			    strstr(body, "\"desired_unchanged\":true") != NULL) {
				watch_sets++;
				apply_desired(n, body, t, "\"version\":");
			} else {
				double at = n->sent_ms + 20;
				set_next(n, at > t ? at : t); /* heartbeat now */
				if (n->busy)
					n->hb_again = 1;
			}
		}
	} else {
		if (status == 307)
			follow_leader(body);
		else if (watch_errors++ < 5)
			fprintf(stderr, "yard-simnodes: watch of %s: HTTP %d: %.200s\n", n->name,
			        status, status > 0 ? body : err);
		n->watch_retry_ms = t + opt.heartbeat_ms;
		if (status == 400)
			offers_watch_desired = 0; /* an older leader: watches without the set */
	}
	need_watch[n_need_watch++] = (int)(n - nodes);
}

/* A heartbeat's answer (hconn's callback; user is the node). */
static void heartbeat_done(void *user, int status, const char *body, size_t len, const char *err)
{
	struct sim_node *n = user;
	double t = now_ms();
	(void)len;
	hb_inflight--;
	n->busy = 0;
	due_push((int)(n - nodes), n->next_ms); /* due meanwhile? */
	if (status == 200) {
		if (n_hb < LAT_MAX)
			hb_lat[n_hb] = t - n->sent_ms;
		n_hb++;
		apply_desired(n, body, t, "\"desired_version\":");
		if (n->hb_again) { /* its answer may predate the news */
			n->hb_again = 0;
			set_next(n, t);
		}
	} else if (status == 307 && follow_leader(body)) {
		set_next(n, t); /* again at once, to the leader */
	} else if (hb_errors++ < 5) {
		fprintf(stderr, "yard-simnodes: heartbeat of %s: HTTP %d: %.200s\n", n->name,
		        status, status > 0 ? body : err);
	}
}

static char *submit_body(long seq)
{
	static const int sizes[] = {8, 16, 24, 32, 40, 48, 56, 64};
	rng = rng * 1103515245u + 12345u;
	char text[512];
	snprintf(text, sizeof text,
	         "{\"name\":\"gang-%ld\",\"command\":[\"true\"],\"ranks\":%d,"
	         "\"resources\":{\"device\":\"cpu\"},\"failure\":{\"max_restarts\":0}}",
	         seq, sizes[(rng >> 16) % 8]);
	return strdup(text);
}

/* The multi handles are driven by their sockets (curl_multi_socket_action over epoll), so
 * that ten thousand connections held by watches cost nothing while they wait:
 * curl_multi_perform would visit every one of them on every turn of the loop. */
static int epfd = -1;
static long curl_timeout_ms[N_MULTIS]; /* what each timer callback last asked; -1: none */
static double curl_timeout_at[N_MULTIS];

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct epoll_event ev = {.data.u64 = (uint64_t)fd | (uint64_t)(uintptr_t)userp << 32};
	if (what == CURL_POLL_REMOVE) {
		epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
		return 0;
	}
	ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
		epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
	return 0;
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp)
{
	int k = (int)(uintptr_t)userp;
	curl_timeout_ms[k] = timeout_ms;
	curl_timeout_at[k] = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	return 0;
}

/* Waits up to wait_ms for socket events or a timeout of curl's and lets curl act on them. */
static void drive(int wait_ms)
{
	struct epoll_event evs[256];
	int running;
	for (int k = 0; k < N_MULTIS; k++)
		if (curl_timeout_ms[k] >= 0) {
			double left = curl_timeout_at[k] - now_ms();
			if (left < wait_ms)
				wait_ms = left > 0 ? (int)left : 0;
		}
	int n = epoll_wait(epfd, evs, 256, wait_ms);
	for (int i = 0; i < n; i++) {
		if (evs[i].data.u64 >> 32 == HB_TAG) {
			hconn_event(hb_pool, (uint32_t)evs[i].data.u64, evs[i].events);
			continue;
		}
		if (evs[i].data.u64 >> 32 == WATCH_TAG) {
			hconn_event(watch_pool, (uint32_t)evs[i].data.u64, evs[i].events);
			continue;
		}
		int flags = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
		            (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
		            (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
		curl_multi_socket_action(multis[evs[i].data.u64 >> 32],
		                         (curl_socket_t)(evs[i].data.u64 & 0xffffffffu), flags,
		                         &running);
	}
	for (int k = 0; k < N_MULTIS; k++)
		if (curl_timeout_ms[k] >= 0 && now_ms() >= curl_timeout_at[k]) {
			curl_timeout_ms[k] = -1;
			curl_multi_socket_action(multis[k], CURL_SOCKET_TIMEOUT, 0, &running);
		}
	hconn_expire(hb_pool, HB_TIMEOUT_MS);
	static double watches_expired_ms; /* a look at 10,000 connections once a second */
	if (watch_pool != NULL && now_ms() - watches_expired_ms >= 1000) {
		watches_expired_ms = now_ms();
		hconn_expire(watch_pool, HB_TIMEOUT_MS + (uint64_t)opt.watch_ms);
	}
}

/* The next finished transfer of any multi handle, NULL when none. */
static CURLMsg *next_done(void)
{
	int left;
	for (int k = 0; k < N_MULTIS; k++) {
		CURLMsg *m = curl_multi_info_read(multis[k], &left);
		if (m != NULL)
			return m;
	}
	return NULL;
}

/* The leader's /metrics into path (the benchmark subtracts it from the end's), with the
 * submitter's token; a blocking request, once. */
static void save_metrics(const char *path)
{
	FILE *f = fopen(path, "w");
	CURL *easy = curl_easy_init();
	char url[600], auth[600];
	if (f == NULL || easy == NULL) {
		fprintf(stderr, "yard-simnodes: cannot save metrics to %s\n", path);
		if (f != NULL)
			fclose(f);
		curl_easy_cleanup(easy);
		return;
	}
	snprintf(url, sizeof url, "%s/metrics", endpoint);
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", opt.submit_token);
	struct curl_slist *headers = curl_slist_append(NULL, auth);
	curl_easy_setopt(easy, CURLOPT_URL, url);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 10000L);
	CURLcode rc = curl_easy_perform(easy);
	if (rc != CURLE_OK)
		fprintf(stderr, "yard-simnodes: GET %s: %s\n", url, curl_easy_strerror(rc));
	curl_slist_free_all(headers);
	curl_easy_cleanup(easy);
	fclose(f);
}

static int arg_int(const char *v)
{
	return atoi(v);
}

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (strcmp(k, "--endpoint") == 0)
			opt.endpoint = v;
		else if (strcmp(k, "--join-token") == 0)
			opt.join_token = v;
		else if (strcmp(k, "--submit-token") == 0)
			opt.submit_token = v;
		else if (strcmp(k, "--prefix") == 0)
			opt.prefix = v;
		else if (strcmp(k, "--nodes") == 0)
			opt.nodes = arg_int(v);
		else if (strcmp(k, "--devices") == 0)
			opt.devices = arg_int(v);
		else if (strcmp(k, "--heartbeat-ms") == 0)
			opt.heartbeat_ms = arg_int(v);
		else if (strcmp(k, "--hold-ms") == 0)
			opt.hold_ms = arg_int(v);
		else if (strcmp(k, "--seconds") == 0)
			opt.seconds = arg_int(v);
		else if (strcmp(k, "--quiet-seconds") == 0)
			opt.quiet_seconds = arg_int(v);
		else if (strcmp(k, "--leader-pid") == 0)
			opt.leader_pid = arg_int(v);
		else if (strcmp(k, "--inflight") == 0)
			opt.inflight = arg_int(v);
		else if (strcmp(k, "--submit-inflight") == 0)
			opt.submit_inflight = arg_int(v);
		else if (strcmp(k, "--jobs-per-s") == 0)
			opt.jobs_per_s = atof(v);
		else if (strcmp(k, "--watch-ms") == 0)
			opt.watch_ms = arg_int(v);
		else if (strcmp(k, "--metrics-out") == 0)
			opt.metrics_out = v;
		else if (strcmp(k, "--nodes-per-switch") == 0)
			opt.nodes_per_switch = arg_int(v);
		else {
			fprintf(stderr, "yard-simnodes: unknown option %s\n", k);
			return 2;
		}
	}
	if (opt.endpoint == NULL || opt.join_token == NULL || opt.nodes < 1 || opt.devices < 1 ||
	    opt.devices > 64 || opt.heartbeat_ms < 10 || opt.inflight < 1 ||
	    opt.submit_inflight < 1 || opt.watch_ms < 0 || opt.watch_ms > 60000 ||
	    ((opt.jobs_per_s > 0 || opt.metrics_out != NULL) && opt.submit_token == NULL)) {
		fprintf(stderr,
		        "usage: yard-simnodes --endpoint URL --join-token T --nodes N "
		        "[--devices 8] [--prefix sim] [--heartbeat-ms 1000] [--hold-ms 2000] "
		        "[--seconds 30] [--inflight 64] [--submit-token T --jobs-per-s R "
		        "[--submit-inflight 1024] [--metrics-out FILE]] [--watch-ms W]\n");
		return 2;
	}
	every_ms = opt.heartbeat_ms;
	snprintf(endpoint, sizeof endpoint, "%s", opt.endpoint);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	epfd = epoll_create1(EPOLL_CLOEXEC);
	char hb_err[256];
	hb_pool = hconn_pool_new(epfd, HB_TAG, opt.inflight, heartbeat_done);
	if (opt.watch_ms > 0 &&
	    ((watch_pool = hconn_pool_new(epfd, WATCH_TAG, opt.nodes, watch_done)) == NULL ||
	     hconn_set_endpoint(watch_pool, endpoint, hb_err, sizeof hb_err) != 0)) {
		fprintf(stderr, "yard-simnodes: watches: %s\n",
		        watch_pool == NULL ? "out of memory" : hb_err);
		return 1;
	}
	if (hb_pool == NULL || hconn_set_endpoint(hb_pool, endpoint, hb_err, sizeof hb_err) != 0) {
		fprintf(stderr, "yard-simnodes: %s\n", hb_pool == NULL ? "out of memory" : hb_err);
		return 2;
	}
	for (int k = 0; k < N_MULTIS; k++) {
		curl_timeout_ms[k] = -1;
		multis[k] = curl_multi_init();
		curl_multi_setopt(multis[k], CURLMOPT_SOCKETFUNCTION, on_socket);
		curl_multi_setopt(multis[k], CURLMOPT_SOCKETDATA, (void *)(uintptr_t)k);
		curl_multi_setopt(multis[k], CURLMOPT_TIMERFUNCTION, on_timer);
		curl_multi_setopt(multis[k], CURLMOPT_TIMERDATA, (void *)(uintptr_t)k);
	}
	/* the connections stay open between requests, as yard-agent's do: curl's cache would
	 * otherwise shrink with the transfers in flight and close the rest */
	curl_multi_setopt(multis[REGISTER_MULTI], CURLMOPT_MAX_HOST_CONNECTIONS,
	                  (long)opt.inflight + 8);
	curl_multi_setopt(multis[REGISTER_MULTI], CURLMOPT_MAXCONNECTS, (long)opt.inflight + 8);
	curl_multi_setopt(multis[SUBMIT_MULTI], CURLMOPT_MAX_HOST_CONNECTIONS,
	                  (long)opt.submit_inflight + 8);
	curl_multi_setopt(multis[SUBMIT_MULTI], CURLMOPT_MAXCONNECTS,
	                  (long)opt.submit_inflight + 8);
	nodes = calloc((size_t)opt.nodes, sizeof *nodes);
	hb_lat = calloc(LAT_MAX, sizeof *hb_lat);
	for (int i = 0; i < opt.nodes; i++) {
		snprintf(nodes[i].name, sizeof nodes[i].name, "%s-%05d", opt.prefix, i + 1);
		nodes[i].watch_version = -1;
		nodes[i].desired_version = -1;
	}

	/* 1. registration: a raft write per node */
	double t0 = now_ms();
	int next = 0, done = 0, inflight = 0;
	while (done < opt.nodes) {
		while (next < opt.nodes && inflight < opt.inflight) {
			struct req *r = req_new(REQ_REGISTER, "/v1/agents/register",
			                        opt.join_token, register_body(&nodes[next]));
			r->node = &nodes[next++];
			inflight++;
		}
		CURLMsg *m;
		drive(0);
		while ((m = next_done()) != NULL) {
			struct req *r;
			long code = 0;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
			curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
			json_t *resp = r->resp ? jsonx_loads(r->resp) : NULL;
			const char *tok = json_string_value(json_object_get(resp, "node_token"));
			if (code == 200 && tok != NULL)
				snprintf(r->node->token, sizeof r->node->token, "%s", tok);
			else
				reg_errors++;
			json_decref(resp);
			req_free(r);
			inflight--;
			done++;
		}
		if (done < opt.nodes)
			drive(50);
	}
	double reg_s = (now_ms() - t0) / 1e3;

	/* 2. heartbeats (each node every heartbeat_ms, spread evenly), alone for quiet_seconds,
	 * then with submissions for seconds */
	double start = now_ms(), jobs_from = start + opt.quiet_seconds * 1e3,
	       end = jobs_from + opt.seconds * 1e3;
	long long cpu0, cpu1 = -1, cpu2, rss0, rss1 = -1, rss2;
	long long own0, own1 = -1, own2, own_rss; /* the simulator's own CPU, beside the leader's */
	long hb_at_jobs = -1;
	double jobs_started_ms = 0;
	proc_sample(opt.leader_pid, &cpu0, &rss0);
	proc_sample(getpid(), &own0, &own_rss);
	for (int i = 0; i < opt.nodes; i++) {
		nodes[i].every_ms = every_ms;
		set_next(&nodes[i], start + every_ms * i / opt.nodes);
	}
	need_watch = calloc((size_t)opt.nodes, sizeof *need_watch);
	for (int i = 0; opt.watch_ms > 0 && i < opt.nodes; i++)
		need_watch[n_need_watch++] = opt.nodes - 1 - i;
	int submit_inflight = 0;
	double submit_credit = 0, last_ms = start;
	long submit_seq = 0;
	while (now_ms() < end || hb_inflight > 0 || submit_inflight > 0) {
		double now = now_ms();
		if (now < end) {
			/* heartbeats due, earliest first, within the in-flight budget (a busy node's
			 * is scheduled again when its heartbeat in flight ends) */
			while (n_dues > 0 && dues[0].at <= now && hb_inflight < opt.inflight) {
				struct due d = due_pop();
				struct sim_node *n = &nodes[d.node];
				if (d.at != n->next_ms || n->busy || n->token[0] == '\0')
					continue;
				double late = now - n->next_ms;
				if (late > every_ms / 2.0)
					hb_late++;
				if (late > hb_late_max_ms)
					hb_late_max_ms = late;
				double gap = node_gap(n);
				set_next(n, n->next_ms + gap < now ? now + gap : n->next_ms + gap);
				n->sent_ms = now;
				char *body = heartbeat_body(n, now), err[256];
				if (body != NULL &&
				    hconn_post(hb_pool, "/v1/agents/heartbeat", n->token, body,
				               strlen(body), n, err, sizeof err) == 0) {
					n->busy = 1;
					hb_inflight++;
				} else if (hb_errors++ < 5) {
					fprintf(stderr, "yard-simnodes: heartbeat of %s: %s\n",
					        n->name, body != NULL ? err : "out of memory");
				}
				free(body);
			}
			/* watches: one waiting per node (outside the heartbeats' in-flight budget);
			 * a node whose watch failed waits, and so do the nodes behind it */
			while (n_need_watch > 0) {
				struct sim_node *n = &nodes[need_watch[n_need_watch - 1]];
				if (n->watch_retry_ms > now)
					break;
				n_need_watch--;
				if (n->watching || n->token[0] == '\0')
					continue;
				char body[192], err[256];
				int len =
				    snprintf(body, sizeof body, "{\"version\":%lld,\"wait_ms\":%d",
				             n->watch_version, opt.watch_ms);
				/* the set in the answer, as yard-agent asks once offered */
				if (offers_watch_desired)
					len += snprintf(
					    body + len, sizeof body - (size_t)len,
					    ",\"desired\":true,\"desired_shared\":true%s%s%s",
					    n->desired_tag[0] ? ",\"desired_tag\":\"" : "",
					    n->desired_tag, n->desired_tag[0] ? "\"" : "");
				len += snprintf(body + len, sizeof body - (size_t)len, "}");
				if (hconn_post_on(watch_pool, (int)(n - nodes), "/v1/agents/watch",
				                  n->token, body, (size_t)len, n, err,
				                  sizeof err) == 0) {
					n->watching = 1;
				} else {
					if (watch_errors++ < 5)
						fprintf(stderr, "yard-simnodes: watch of %s: %s\n",
						        n->name, err);
					n->watch_retry_ms = now + opt.heartbeat_ms;
					need_watch[n_need_watch++] = (int)(n - nodes);
					break; /* it waits, and so do the nodes behind it */
				}
			}
			if (now >= jobs_from && hb_at_jobs < 0) {
				hb_at_jobs = n_hb;
				jobs_started_ms = now;
				last_ms = now;
				proc_sample(opt.leader_pid, &cpu1, &rss1);
				proc_sample(getpid(), &own1, &own_rss);
				if (opt.metrics_out != NULL)
					save_metrics(opt.metrics_out);
			}
			if (now >= jobs_from)
				submit_credit += (now - last_ms) / 1e3 * opt.jobs_per_s;
			last_ms = now;
			/* the submitter is a client of its own: its requests waiting for their
			 * commit do not hold back the nodes' heartbeats */
			while (submit_credit >= 1 && submit_inflight < opt.submit_inflight) {
				submit_credit -= 1;
				req_new(REQ_SUBMIT, "/v1/jobs", opt.submit_token,
				        submit_body(++submit_seq));
				submit_inflight++;
			}
		}
		CURLMsg *m;
		drive(0);
		while ((m = next_done()) != NULL) {
			struct req *r;
			long code = 0;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
			curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
			submit_inflight--;
			if (code == 201)
				submits++;
			else if (!(code == 307 && follow_leader(r->resp)) && submit_errors++ < 5)
				fprintf(stderr, "yard-simnodes: submit: HTTP %ld: %.200s\n", code,
				        r->resp ? r->resp : curl_easy_strerror(m->data.result));
			req_free(r); /* in flight on the submitter's own budget */
		}
		drive(2);
	}
	double end_ms = now_ms(), secs = (end_ms - start) / 1e3;
	proc_sample(opt.leader_pid, &cpu2, &rss2);
	proc_sample(getpid(), &own2, &own_rss);
	double hz = (double)sysconf(_SC_CLK_TCK);
	long quiet_hb = hb_at_jobs > 0 ? hb_at_jobs : n_hb;
	double quiet_s = (jobs_started_ms > 0 ? jobs_started_ms - start : end_ms - start) / 1e3;
	double job_s = jobs_started_ms > 0 ? (end_ms - jobs_started_ms) / 1e3 : 0;
	long n_lat = n_hb < LAT_MAX ? n_hb : LAT_MAX;
	qsort(hb_lat, (size_t)n_lat, sizeof *hb_lat, cmp_double);
	printf("{\"nodes\":%d,\"devices_per_node\":%d,\"register_s\":%.2f,\"register_errors\":%ld,"
	       "\"seconds\":%.2f,\"heartbeat_ms\":%d,\"heartbeat_every_ms\":%.0f,"
	       "\"heartbeat_every_changes\":%ld,\"heartbeats\":%ld,\"heartbeats_per_s\":%.1f,"
	       "\"heartbeat_p50_ms\":%.2f,\"heartbeat_p99_ms\":%.2f,\"heartbeat_errors\":%ld,"
	       "\"heartbeats_late\":%ld,\"heartbeat_late_max_ms\":%.0f,\"ranks_started\":%ld,"
	       "\"jobs_submitted\":%ld,\"submit_errors\":%ld,\"job_phase_s\":%.2f,"
	       "\"leader_us_per_heartbeat_quiet\":%.1f,\"leader_cpu_pct_quiet\":%.1f,"
	       "\"leader_cpu_pct_jobs\":%.1f,\"leader_rss_mib_start\":%.1f,"
	       "\"leader_rss_mib_end\":%.1f,\"redirects\":%ld,\"watch_ms\":%d,"
	       "\"watch_answers\":%ld,\"watch_news\":%ld,\"watch_sets\":%ld,\"watch_errors\":%ld,"
	       "\"sim_us_per_heartbeat_quiet\":%.1f,\"sim_cpu_pct_jobs\":%.1f}\n",
	       opt.nodes, opt.devices, reg_s, reg_errors, secs, opt.heartbeat_ms, every_ms,
	       every_changes, n_hb, n_hb / secs, n_lat ? hb_lat[n_lat / 2] : 0,
	       n_lat ? hb_lat[(long)(n_lat * 0.99)] : 0, hb_errors, hb_late, hb_late_max_ms,
	       ranks_started, submits, submit_errors, job_s,
	       cpu1 >= 0 && quiet_hb > 0 ? (cpu1 - cpu0) / hz * 1e6 / quiet_hb : -1,
	       cpu1 >= 0 && quiet_s > 0 ? (cpu1 - cpu0) / hz / quiet_s * 100 : -1,
	       cpu2 >= 0 && cpu1 >= 0 && job_s > 0 ? (cpu2 - cpu1) / hz / job_s * 100 : -1,
	       rss0 / 1024.0, rss2 / 1024.0, redirects, opt.watch_ms, watch_answers, watch_news,
	       watch_sets, watch_errors,
	       own1 >= 0 && quiet_hb > 0 ? (own1 - own0) / hz * 1e6 / quiet_hb : -1,
	       own2 >= 0 && own1 >= 0 && job_s > 0 ? (own2 - own1) / hz / job_s * 100 : -1);
	for (int k = 0; k < N_MULTIS; k++)
		curl_multi_cleanup(multis[k]);
	hconn_pool_free(hb_pool);
	if (watch_pool != NULL)
		hconn_pool_free(watch_pool);
	close(epfd);
	free(nodes);
	free(hb_lat);
	free(need_watch);
	free(dues);
	return reg_errors || hb_errors || submit_errors ? 1 : 0;
}
