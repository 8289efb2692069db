/* yardctl.c: the trainyard CLI: one function per command over the HTTP API (docs/api.md).
 * The grammar is in args.c, the transport (leader redirects, retries) in http.c and the
 * table layout in output.c; this file maps commands to requests and answers to output.
 * Exit status: 0 success, 1 error, 2 usage error. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "ctl/args.h"
#include "ctl/http.h"
#include "ctl/output.h"
#include "jobs/fsm.h"
#include "jobs/sha256.h"
#include "jobs/spec.h"

#define EXIT_USAGE 2
#define JOB_LIST_PAGES_MAX 1000
#define WAIT_POLL_MS 1000
#define WAIT_TRANSPORT_FAILURES_MAX 5
#define BUILD_CHUNK_BYTES FSM_CHUNK_MAX /* the server's chunk size (jobs/fsm.h) */

struct ctl {
	struct ctl_args args;
	struct ctl_client client;
};

static int fail(const struct ctl *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "yardctl: COMMAND: message" and returns the error exit status. */
static int fail(const struct ctl *x, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "yardctl: %s: ", x->args.name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_FAILURE;
}

/* One logical request. Non-2xx answers and transport failures are reported here; on 0 the
 * caller owns *r. request_id: NULL for reads, one id for all attempts of a write. */
static int call(struct ctl *x, const char *method, const char *path, const char *body,
                const char *request_id, struct ctl_response *r)
{
	struct yard_err err = {0};
	char what[1024];
	if (ctl_client_request(&x->client, method, path, body, request_id, r, &err) != 0)
		return fail(x, "%s", err.msg);
	if (r->status >= 200 && r->status < 300)
		return 0;
	ctl_response_describe(r, what, sizeof what);
	fail(x, "%s%s", what, r->status == 401 ? " (check --token or YARD_TOKEN)" : "");
	ctl_response_free(r);
	return EXIT_FAILURE;
}

static int write_call(struct ctl *x, const char *method, const char *path, const char *body,
                      struct ctl_response *r)
{
	char request_id[CTL_REQUEST_ID_LEN + 1];
	ctl_request_id(request_id);
	return call(x, method, path, body, request_id, r);
}

static void print_json(const struct ctl_response *r)
{
	if (r->json != NULL) {
		json_dumpf(r->json, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
	} else if (r->body_len > 0) {
		fwrite(r->body, 1, r->body_len, stdout);
		fputc('\n', stdout);
	}
}

static const char *str(const json_t *obj, const char *key)
{
	const json_t *v = json_object_get(obj, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A field of obj formatted as a cell into buf. */
static const char *cell(const json_t *obj, const char *key, char *buf, size_t len)
{
	ctl_format_json(json_object_get(obj, key), buf, len);
	return buf;
}

/* Appends "?key=value" or "&key=value"; values are ids and numbers, which need no escaping. */
static void add_query(char *path, size_t len, const char *key, const char *value)
{
	size_t n = strlen(path);
	snprintf(path + n, len - n, "%c%s=%s", strchr(path, '?') ? '&' : '?', key, value);
}

/* How a command shows the controller's answer without -o json (x: its operands). */
typedef void (*show_fn)(const struct ctl *x, const json_t *doc);

enum { READ = 0, WRITE = 1 };

/* Sends one request (body may be NULL; a WRITE carries one request id for all its attempts)
 * and shows the answer: the document itself with -o json, else show(x, doc), else the line
 * said (both NULL: nothing). */
static int request(struct ctl *x, int write, const char *method, const char *path, const char *body,
                   show_fn show, const char *said)
{
	struct ctl_response r;
	int rc =
	    write ? write_call(x, method, path, body, &r) : call(x, method, path, body, NULL, &r);
	if (rc != 0)
		return rc;
	if (x->args.output == CTL_OUTPUT_JSON)
		print_json(&r);
	else if (show != NULL)
		show(x, r.json);
	else if (said != NULL)
		printf("%s\n", said);
	ctl_response_free(&r);
	return 0;
}

/* A WRITE with a JSON body (stolen). */
static int request_json(struct ctl *x, const char *method, const char *path, json_t *body,
                        show_fn show, const char *said)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (text == NULL)
		return fail(x, "cannot encode the request (out of memory or text not UTF-8)");
	int rc = request(x, WRITE, method, path, text, show, said);
	free(text);
	return rc;
}

/* A table with one row per element of items: row fills an element's cells, formatting
 * into buf where it must. */
typedef void (*row_fn)(const json_t *item, char buf[][96], const char **cells);

static void print_table(const json_t *items, int ncols, const char *const *headers, row_fn row)
{
	struct ctl_table t;
	size_t i;
	json_t *item;
	ctl_table_init(&t, ncols, headers);
	json_array_foreach(items, i, item)
	{
		char buf[CTL_TABLE_COLS_MAX][96];
		const char *cells[CTL_TABLE_COLS_MAX] = {NULL};
		row(item, buf, cells);
		ctl_table_add(&t, cells);
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
}

/* ---- cluster ---- */

static void print_members(const json_t *members, json_int_t leader_id)
{
	static const char *const headers[] = {"ID", "RAFT_ADDRESS", "API_URL", "ROLE", "LEADER"};
	struct ctl_table t;
	size_t i;
	json_t *m;
	ctl_table_init(&t, 5, headers);
	json_array_foreach(members, i, m)
	{
		char id[32];
		json_t *mid = json_object_get(m, "id");
		const char *row[] = {
		    cell(m, "id", id, sizeof id), str(m, "raft_address"), str(m, "api_url"),
		    str(m, "role"),
		    json_is_integer(mid) && json_integer_value(mid) == leader_id ? "*" : ""};
		ctl_table_add(&t, row);
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
}

static json_int_t leader_id_of(const json_t *cluster)
{
	json_t *id = json_object_get(json_object_get(cluster, "leader"), "id");
	return json_is_integer(id) ? json_integer_value(id) : -1;
}

static int cmd_cluster_status(struct ctl *x)
{
	struct ctl_response r;
	int rc = call(x, "GET", "/v1/cluster", NULL, NULL, &r);
	if (rc != 0)
		return rc;
	if (x->args.output == CTL_OUTPUT_JSON) {
		print_json(&r);
	} else {
		const json_t *c = r.json, *leader = json_object_get(c, "leader");
		char b[5][64];
		printf("answered by  %s\n", r.endpoint);
		printf("member       %s (%s)\n", cell(c, "id", b[0], sizeof b[0]),
		       cell(c, "state", b[1], sizeof b[1]));
		printf("term         %s\n", cell(c, "term", b[2], sizeof b[2]));
		printf("commit       %s (applied %s)\n", cell(c, "commit_index", b[3], sizeof b[3]),
		       cell(c, "applied_index", b[4], sizeof b[4]));
		if (json_is_object(leader))
			printf("leader       %s %s\n", cell(leader, "id", b[0], sizeof b[0]),
			       cell(leader, "api_url", b[1], sizeof b[1]));
		else if (json_is_integer(json_object_get(c, "no_leader_for_ms")))
			printf("leader       none known for %.1f s (a majority of the voters must "
			       "answer to elect one)\n",
			       (double)json_integer_value(json_object_get(c, "no_leader_for_ms")) /
			           1000);
		else
			printf("leader       none known\n");
		const json_t *hb = json_object_get(c, "heartbeats"); /* answered by the leader */
		if (json_is_object(hb)) {
			double every =
			    (double)json_integer_value(json_object_get(hb, "heartbeat_min_ms"));
			double suspect =
			    (double)json_integer_value(json_object_get(hb, "node_suspect_ms"));
			double down =
			    (double)json_integer_value(json_object_get(hb, "node_down_ms"));
			long long nodes =
			    (long long)json_integer_value(json_object_get(hb, "nodes"));
			long long cap = (long long)json_integer_value(
			    json_object_get(hb, "max_heartbeats_per_s"));
			printf("heartbeats   at least %.1f s apart asked of each of %lld nodes ",
			       every / 1000, nodes);
			printf("(at most %lld a second in all; 0: no bound); ", cap);
			printf("suspect after %.1f s, down after %.1f s", suspect / 1000,
			       down / 1000);
			const json_t *grace = json_object_get(hb, "node_restart_grace_ms");
			if (json_is_integer(grace)) /* a leader of this version or later */
				printf(" (%.1f s more while an agent restarts into a new build)",
				       (double)json_integer_value(grace) / 1000);
			printf("\n");
		}
		printf("\n");
		print_members(json_object_get(c, "members"), leader_id_of(c));
	}
	ctl_response_free(&r);
	return 0;
}

static int cmd_cluster_members(struct ctl *x)
{
	struct ctl_response r;
	int rc = call(x, "GET", "/v1/cluster", NULL, NULL, &r);
	if (rc != 0)
		return rc;
	if (x->args.output == CTL_OUTPUT_JSON) {
		json_t *m = json_object_get(r.json, "members");
		json_dumpf(m ? m : json_null(), stdout, JSON_INDENT(2) | JSON_ENCODE_ANY);
		fputc('\n', stdout);
	} else {
		print_members(json_object_get(r.json, "members"), leader_id_of(r.json));
	}
	ctl_response_free(&r);
	return 0;
}

static void show_member_added(const struct ctl *x, const json_t *doc)
{
	json_t *members = json_is_array(doc) ? (json_t *)doc : json_object_get(doc, "members");
	printf("added member %s as %s\n", x->args.operand[0], x->args.spare ? "spare" : "voter");
	if (json_is_array(members))
		print_members(members, leader_id_of(doc));
}

static int cmd_cluster_add(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	json_t *body = json_pack(
	    "{s:I,s:s,s:s,s:s}", "id", (json_int_t)strtoll(a->operand[0], NULL, 10), "raft_address",
	    a->operand[1], "api_url", a->operand[2], "role", a->spare ? "spare" : "voter");
	return request_json(x, "POST", "/v1/cluster/members", body, show_member_added, NULL);
}

static int cmd_cluster_remove(struct ctl *x)
{
	char path[128], said[128];
	snprintf(path, sizeof path, "/v1/cluster/members/%s", x->args.operand[0]);
	snprintf(said, sizeof said, "removed member %s", x->args.operand[0]);
	return request(x, WRITE, "DELETE", path, NULL, NULL, said);
}

static void show_transferred(const struct ctl *x, const json_t *doc)
{
	char leader[32];
	printf("leadership transferred to member %s\n",
	       cell(doc, "leader_id", leader, sizeof leader));
}

/* data into path.tmp, synced, then renamed to path: the file is whole or absent. 0, or -1
 * with errno set (path.tmp removed). */
static int write_whole(const char *path, const void *data, size_t len)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "wb");
	int ok = f != NULL && fwrite(data, 1, len, f) == len && fflush(f) == 0 &&
	         fsync(fileno(f)) == 0;
	if (f != NULL && fclose(f) != 0)
		ok = 0;
	if (ok && rename(tmp, path) == 0)
		return 0;
	int e = errno;
	unlink(tmp);
	errno = e;
	return -1;
}

/* The leader's database image after a barrier (GET /v1/debug/database: everything
 * committed when it answered) into FILE.tmp, synced, then renamed to FILE: a backup is
 * whole or absent. */
#define BACKUP_MAX_BYTES ((size_t)9 << 30) /* above the state machine's 8 GiB */
static int cmd_cluster_backup(struct ctl *x)
{
	static const char sqlite_magic[16] = "SQLite format 3";
	const char *out = x->args.operand[0];
	struct ctl_response r;
	x->client.max_response_bytes = BACKUP_MAX_BYTES;
	int rc = call(x, "GET", "/v1/debug/database", NULL, NULL, &r);
	if (rc != 0)
		return rc;
	if (r.body_len < sizeof sqlite_magic || memcmp(r.body, sqlite_magic, sizeof sqlite_magic)) {
		fail(x, "the answer of %s is not a database image (%zu bytes)", r.endpoint,
		     r.body_len);
		ctl_response_free(&r);
		return EXIT_FAILURE;
	}
	/* what restore will ask of it, asked now: it loads and its event chain verifies */
	struct fsm f;
	struct yard_err err = {0};
	int bad = fsm_init(&f, &err) != 0 || fsm_restore(&f, r.body, r.body_len, &err) != 0 ||
	          fsm_events_verify(&f, &err) != 0;
	fsm_close(&f);
	if (bad) {
		fail(x, "the database image from %s does not check (%s): nothing written",
		     r.endpoint, err.msg);
		ctl_response_free(&r);
		return EXIT_FAILURE;
	}
	if (write_whole(out, r.body, r.body_len) != 0) {
		int e = errno;
		ctl_response_free(&r);
		return fail(x, "%s: %s", out, strerror(e));
	}
	printf("backup of the cluster's state from %s: %zu bytes, event chain verified, written "
	       "to %s\n",
	       r.endpoint, r.body_len, out);
	ctl_response_free(&r);
	return 0;
}

static int cmd_cluster_transfer(struct ctl *x)
{
	char body[64];
	if (x->args.operand_count > 0)
		snprintf(body, sizeof body, "{\"to\": %s}", x->args.operand[0]);
	else
		snprintf(body, sizeof body, "{}");
	return request(x, WRITE, "POST", "/v1/cluster/transfer", body, show_transferred, NULL);
}

/* ---- jobs ---- */

/* A plan candidate's layout as "dp2×tp1×pp2 1f1b m4" (v shown when interleaved). */
static void format_layout(const json_t *layout, char *out, size_t len)
{
	const char *schedule = str(layout, "schedule");
	int interleaved = schedule != NULL && strcmp(schedule, "interleaved") == 0;
	char v[16] = "";
	if (interleaved)
		snprintf(v, sizeof v, " v%lld",
		         (long long)json_integer_value(json_object_get(layout, "virtual_stages")));
	snprintf(out, len, "dp%lld×tp%lld×pp%lld %s%s m%lld",
	         (long long)json_integer_value(json_object_get(layout, "dp")),
	         (long long)json_integer_value(json_object_get(layout, "tp")),
	         (long long)json_integer_value(json_object_get(layout, "pp")),
	         schedule ? schedule : "?", v,
	         (long long)json_integer_value(json_object_get(layout, "micro_batches")));
}

static double num(const json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static char *read_file(const char *path, size_t max, struct yard_err *err);

/* plan FILE: the ranked layouts with their predicted costs and why the winner won. */
static void print_plan_answer(const struct ctl *x, const json_t *a)
{
	static const char *const headers[] = {"#",           "LAYOUT",       "RANKS",    "STEP_MS",
	                                      "COMPUTE",     "COMM_MS",      "OPTIM_MS", "BUBBLE",
	                                      "MEM_MIB/DEV", "SENT_MIB/STEP"};
	const json_t *k = json_object_get(a, "cluster");
	struct ctl_table t;
	size_t i;
	json_t *c;
	printf("cluster: %lld device(s), up to %lld per node; per device %.2f GFLOP/s (%.0f%% "
	       "each when a node's devices all compute), %.0f MiB; intra-node %.2f GB/s, "
	       "inter-node %.2f GB/s\n",
	       (long long)json_integer_value(json_object_get(k, "devices")),
	       (long long)json_integer_value(json_object_get(k, "devices_per_node")),
	       num(k, "flops_per_s") / 1e9, num(k, "parallel_efficiency") * 100,
	       num(k, "device_memory_mb"), num(k, "intra_bw_bytes_per_s") / 1e9,
	       num(k, "inter_bw_bytes_per_s") / 1e9);
	ctl_table_init(&t, 10, headers);
	json_array_foreach(json_object_get(a, "candidates"), i, c)
	{
		char b[10][96];
		snprintf(b[0], sizeof b[0], "%zu", i + 1);
		format_layout(json_object_get(c, "layout"), b[1], sizeof b[1]);
		snprintf(b[2], sizeof b[2], "%lld",
		         (long long)json_integer_value(json_object_get(c, "world")));
		snprintf(b[3], sizeof b[3], "%.3f", num(c, "step_ms"));
		snprintf(b[4], sizeof b[4], "%.3f", num(c, "compute_ms"));
		snprintf(b[5], sizeof b[5], "%.3f",
		         num(c, "tp_comm_ms") + num(c, "pp_comm_ms") + num(c, "dp_exposed_ms") +
		             num(c, "loss_comm_ms"));
		snprintf(b[6], sizeof b[6], "%.3f", num(c, "optim_ms"));
		snprintf(b[7], sizeof b[7], "%.0f%%", num(c, "bubble_fraction") * 100);
		snprintf(b[8], sizeof b[8], "%.2f", num(c, "memory_mb"));
		snprintf(b[9], sizeof b[9], "%.3f", num(c, "comm_mb"));
		const char *row[] = {b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9]};
		ctl_table_add(&t, row);
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
	printf("%lld layout(s) fit (%lld over device memory, %lld against the trainer's "
	       "rules); shown: %zu\n",
	       (long long)json_integer_value(json_object_get(a, "count")),
	       (long long)json_integer_value(json_object_get(a, "rejected_memory")),
	       (long long)json_integer_value(json_object_get(a, "rejected_rules")),
	       json_array_size(json_object_get(a, "candidates")));
	printf("why: %s\n", str(a, "explanation") ? str(a, "explanation") : "-");
}

static int cmd_plan(struct ctl *x)
{
	struct yard_err err = {0};
	char path[64], *text;
	if ((text = read_file(x->args.operand[0], 1 << 20, &err)) == NULL)
		return fail(x, "%s", err.msg);
	snprintf(path, sizeof path, "/v1/plan?limit=%d", x->args.limit ? x->args.limit : 10);
	int rc =
	    request(x, READ, "POST", path, text, print_plan_answer, NULL); /* changes nothing */
	free(text);
	return rc;
}

static char *read_file(const char *path, size_t max, struct yard_err *err)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;
	if (f == NULL) {
		yard_err_set(err, YARD_EIO, "%s: cannot open", path);
		return NULL;
	}
	buf = malloc(max + 1);
	n = buf ? fread(buf, 1, max + 1, f) : 0;
	fclose(f);
	if (buf == NULL || n > max) {
		free(buf);
		yard_err_set(err, YARD_EINVAL, "%s: larger than %zu bytes", path, max);
		return NULL;
	}
	buf[n] = '\0';
	return buf;
}

static void show_submitted(const struct ctl *x, const json_t *doc)
{
	printf("job %s submitted (%s)\n", str(doc, "id") ? str(doc, "id") : "?",
	       str(doc, "state") ? str(doc, "state") : "?");
	size_t i;
	const json_t *w;
	json_array_foreach(json_object_get(doc, "warnings"), i, w)
	    fprintf(stderr, "warning: %s\n", json_string_value(w) ? json_string_value(w) : "?");
}

/* main has checked the file with jobspec_load_file; it is sent as written (the controller
 * normalizes it), so what the user reviewed is what the controller sees. */
static int cmd_job_submit(struct ctl *x)
{
	struct yard_err err = {0};
	char *text;
	if ((text = read_file(x->args.operand[0], 1 << 20, &err)) == NULL)
		return fail(x, "%s", err.msg);
	int rc = request(x, WRITE, "POST", "/v1/jobs", text, show_submitted, NULL);
	free(text);
	return rc;
}

static void print_jobs(const json_t *jobs)
{
	static const char *const headers[] = {"ID",   "NAME", "STATE",    "PRIORITY", "RANKS",
	                                      "STEP", "LOSS", "RESTARTS", "AGE",      "REASON"};
	int64_t now = yard_now_wall_ms();
	struct ctl_table t;
	size_t i;
	json_t *j;
	ctl_table_init(&t, 10, headers);
	json_array_foreach(jobs, i, j)
	{
		char b[6][64];
		json_t *submitted = json_object_get(j, "submitted_ms");
		ctl_format_age(json_is_integer(submitted) ? now - json_integer_value(submitted) : 0,
		               b[5], sizeof b[5]);
		const char *row[] = {str(j, "id"),
		                     str(j, "name"),
		                     str(j, "state"),
		                     cell(j, "priority", b[0], sizeof b[0]),
		                     cell(json_object_get(j, "spec"), "ranks", b[1], sizeof b[1]),
		                     cell(j, "step", b[2], sizeof b[2]),
		                     cell(j, "loss", b[3], sizeof b[3]),
		                     cell(j, "restarts", b[4], sizeof b[4]),
		                     json_is_integer(submitted) ? b[5] : "-",
		                     str(j, "reason")};
		ctl_table_add(&t, row);
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
}

static int cmd_job_list(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	json_t *all = json_array(), *next = json_null();
	char after[80] = "";
	int rc = 0;

	/* --limit asks for one page of that size; without it every page is fetched. */
	for (int page = 0; page < JOB_LIST_PAGES_MAX; page++) {
		struct ctl_response r;
		char path[256];
		char num[16];
		snprintf(path, sizeof path, "/v1/jobs");
		snprintf(num, sizeof num, "%d", a->limit ? a->limit : 100);
		add_query(path, sizeof path, "limit", num);
		if (a->state)
			add_query(path, sizeof path, "state", a->state);
		if (after[0])
			add_query(path, sizeof path, "after", after);
		if ((rc = call(x, "GET", path, NULL, NULL, &r)) != 0)
			break;
		json_t *jobs = json_object_get(r.json, "jobs");
		if (!json_is_array(jobs)) {
			rc = fail(x, "answer from %s has no \"jobs\" array", r.endpoint);
			ctl_response_free(&r);
			break;
		}
		json_array_extend(all, jobs);
		json_t *n = json_object_get(r.json, "next");
		json_decref(next);
		next = json_incref(n ? n : json_null());
		if (json_is_string(n) && ctl_id_valid(json_string_value(n)) && a->limit == 0) {
			snprintf(after, sizeof after, "%s", json_string_value(n));
			ctl_response_free(&r);
			continue;
		}
		ctl_response_free(&r);
		break;
	}
	if (rc == 0) {
		if (a->output == CTL_OUTPUT_JSON) {
			json_t *out = json_pack("{s:O,s:O}", "jobs", all, "next", next);
			json_dumpf(out, stdout, JSON_INDENT(2));
			fputc('\n', stdout);
			json_decref(out);
		} else {
			print_jobs(all);
		}
	}
	json_decref(all);
	json_decref(next);
	return rc;
}

/* The plan a parallel "auto" job got (job show). */
static void print_plan(const json_t *plan)
{
	char layout[96];
	if (!json_is_object(plan))
		return;
	format_layout(json_object_get(plan, "layout"), layout, sizeof layout);
	printf("plan:          %s, predicted %.2f ms/step (compute %.2f ms, bubble %.0f%%, "
	       "%.2f MiB/device, %.3f MiB sent/step), best of %lld\n",
	       layout, num(plan, "step_ms"), num(plan, "compute_ms"),
	       num(plan, "bubble_fraction") * 100, num(plan, "memory_mb"), num(plan, "comm_mb"),
	       (long long)json_integer_value(json_object_get(plan, "candidates")));
	if (str(plan, "explanation") != NULL)
		printf("               %s\n", str(plan, "explanation"));
	const json_t *was = json_object_get(plan, "replanned_from");
	if (json_is_object(was)) {
		char before[96];
		format_layout(was, before, sizeof before);
		printf("               planned again at a restart, replacing %s (the event "
		       "job.replanned says why)\n",
		       before);
	}
}

/* The layout the ranks run (job show): "dp 1 of 2 (shrunk) × tp 2 × pp 2, world 4 of 8". */
static void print_effective(const json_t *e)
{
	if (!json_is_object(e))
		return;
	json_int_t dp = json_integer_value(json_object_get(e, "dp"));
	json_int_t spec_dp = json_integer_value(json_object_get(e, "spec_dp"));
	json_int_t tp = json_integer_value(json_object_get(e, "tp"));
	json_int_t pp = json_integer_value(json_object_get(e, "pp"));
	if (json_is_true(json_object_get(e, "shrunk")))
		printf("%-14s dp %lld of %lld (shrunk) × tp %lld × pp %lld, world %lld of %lld\n",
		       "parallel", (long long)dp, (long long)spec_dp, (long long)tp, (long long)pp,
		       (long long)(dp * tp * pp), (long long)(spec_dp * tp * pp));
	else
		printf("%-14s dp %lld × tp %lld × pp %lld, world %lld\n", "parallel", (long long)dp,
		       (long long)tp, (long long)pp, (long long)(dp * tp * pp));
}

/* The rank → node/device table, with each rank's (dp, pp, tp) coordinates (tp innermost,
 * DESIGN.md §5) for trainer jobs. */
static void print_layout(const json_t *j)
{
	const json_t *layout = json_object_get(j, "layout");
	const json_t *par = json_object_get(json_object_get(j, "spec"), "parallel");
	json_int_t tp = json_integer_value(json_object_get(par, "tp"));
	json_int_t pp = json_integer_value(json_object_get(par, "pp"));
	size_t i;
	json_t *r;

	if (!json_is_array(layout) || json_array_size(layout) == 0)
		return;
	printf("layout:\n  %-6s %-16s %-7s %s\n", "RANK", "NODE", "DEVICE",
	       tp > 0 && pp > 0 ? "DP PP TP" : "");
	json_array_foreach(layout, i, r)
	{
		json_int_t rank = json_integer_value(json_object_get(r, "rank"));
		const char *node = str(r, "node");
		printf("  %-6lld %-16s %-7lld", (long long)rank, node ? node : "-",
		       (long long)json_integer_value(json_object_get(r, "device")));
		if (tp > 0 && pp > 0)
			printf(" %-2lld %-2lld %lld", (long long)(rank / (tp * pp)),
			       (long long)((rank / tp) % pp), (long long)(rank % tp));
		putchar('\n');
	}
}

/* Ranks the leader's straggler detector flagged in the current generation. */
static void print_stragglers(const json_t *j)
{
	const json_t *flags = json_object_get(j, "stragglers");
	size_t i;
	json_t *f;

	if (!json_is_array(flags))
		return;
	if (json_array_size(flags) == 0) {
		printf(
		    "%-14s none flagged (%lld window(s) judged)\n", "stragglers",
		    (long long)json_integer_value(json_object_get(j, "straggler_windows_judged")));
		return;
	}
	printf("stragglers:\n  %-6s %-16s %-5s %-6s %-11s %-10s %s\n", "RANK", "NODE", "STAGE",
	       "RATIO", "COMPUTE_MS", "MEDIAN_MS", "WINDOW");
	json_array_foreach(flags, i, f)
	{
		const char *node = str(f, "node");
		printf("  %-6lld %-16s %-5lld %-6.2f %-11.3f %-10.3f %lld\n",
		       (long long)json_integer_value(json_object_get(f, "rank")), node ? node : "-",
		       (long long)json_integer_value(json_object_get(f, "stage")),
		       json_number_value(json_object_get(f, "ratio")),
		       json_number_value(json_object_get(f, "compute_ms")),
		       json_number_value(json_object_get(f, "median_ms")),
		       (long long)json_integer_value(json_object_get(f, "window")));
	}
}

static void print_job(const struct ctl *x, const json_t *j)
{
	static const char *const keys[] = {"id",     "name",  "state",    "position",   "priority",
	                                   "step",   "loss",  "restarts", "generation", "reason",
	                                   "growth", "actor", NULL};
	char b[512];
	for (int i = 0; keys[i]; i++)
		if (json_object_get(j, keys[i]) != NULL)
			printf("%-14s %s\n", keys[i], cell(j, keys[i], b, sizeof b));
	print_plan(json_object_get(j, "plan"));
	print_effective(json_object_get(j, "effective"));
	print_layout(j);
	print_stragglers(j);
	static const char *const times[][2] = {
	    {"submitted_ms", "submitted"}, {"started_ms", "started"}, {"updated_ms", "updated"}};
	for (int i = 0; i < 3; i++) {
		json_t *v = json_object_get(j, times[i][0]);
		if (json_is_integer(v)) {
			ctl_format_time(json_integer_value(v), b, sizeof b);
			printf("%-14s %s\n", times[i][1], b);
		}
	}
	/* a waiting job's start estimate (the leader's; GET /v1/jobs/ID) */
	json_t *estimate = json_object_get(j, "estimated_start_ms");
	if (json_is_integer(estimate)) {
		char in[32];
		ctl_format_time(json_integer_value(estimate), b, sizeof b);
		ctl_format_age(json_integer_value(estimate) - yard_now_wall_ms(), in, sizeof in);
		printf("%-14s %s (in %s): %s\n", "start estimate", b, in, str(j, "estimate"));
	} else if (str(j, "estimate") != NULL) {
		printf("%-14s %s\n", "start estimate", str(j, "estimate"));
	}
	json_t *spec = json_object_get(j, "spec");
	json_t *limit = json_object_get(spec, "time_limit_s");
	if (json_is_integer(limit)) {
		json_t *started = json_object_get(j, "started_ms");
		if (json_is_integer(started))
			ctl_format_time(json_integer_value(started) +
			                    json_integer_value(limit) * 1000,
			                b, sizeof b);
		printf("%-14s %lld s from its first placement (%s%s)\n", "time limit",
		       (long long)json_integer_value(limit),
		       json_is_integer(started) ? "ends by " : "",
		       json_is_integer(started) ? b : "not placed yet");
	}
	if (spec != NULL) {
		printf("spec:\n");
		/* 15 significant digits: 0.2 as the user wrote it, not the 17 that keep the
		 * double exact (0.20000000000000001), which -o json still prints */
		json_dumpf(spec, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
		fputc('\n', stdout);
	}
}

/* GET prefix + the first operand and show it. */
static int show_object(struct ctl *x, const char *prefix, show_fn show)
{
	char path[128];
	snprintf(path, sizeof path, "%s%s", prefix, x->args.operand[0]);
	return request(x, READ, "GET", path, NULL, show, NULL);
}

static int cmd_job_show(struct ctl *x)
{
	return show_object(x, "/v1/jobs/", print_job);
}

/* "+1.2s": key's time after from, "-" when it is not known */
static const char *after_s(const json_t *o, const char *key, int64_t from, char *out, size_t len)
{
	const json_t *v = json_object_get(o, key);
	if (!json_is_integer(v))
		return "-";
	snprintf(out, len, "+%.1fs", (double)(json_integer_value(v) - from) / 1000);
	return out;
}

/* "LABEL  TIME (NOTE N.N s)" for a time of the timeline, when known */
static void timeline_line(const json_t *t, const char *label, const char *key, const char *note,
                          const char *span_key)
{
	const json_t *v = json_object_get(t, key), *span = json_object_get(t, span_key);
	if (!json_is_integer(v))
		return;
	char when[64];
	ctl_format_time(json_integer_value(v), when, sizeof when);
	printf("%-14s %s", label, when);
	if (note != NULL && json_is_integer(span))
		printf(" (%s %.1f s)", note, (double)json_integer_value(span) / 1000);
	printf("\n");
}

/* An interruption's silence before its detection ("3.1s"), or "-" when its cause names none. */
static const char *silent_s(const json_t *it, char *buf, size_t len)
{
	const json_t *v = json_object_get(it, "undetected_ms");
	if (!json_is_integer(v))
		return "-";
	snprintf(buf, len, "%.1fs", (double)json_integer_value(v) / 1000);
	return buf;
}

static void print_timeline(const struct ctl *x, const json_t *t)
{
	(void)x;
	const json_t *list = json_object_get(t, "interruptions");
	const char *end = str(t, "end");
	printf("job %s: %s, %zu interruption(s)\n", str(t, "job") ? str(t, "job") : "?",
	       end != NULL ? end : "not ended", json_array_size(list));
	if (json_is_false(json_object_get(t, "complete")))
		printf("(its oldest events were pruned (events_max): the story starts later)\n");
	if (json_is_true(json_object_get(t, "truncated")))
		printf("(more lifecycle events than one answer holds: the newest are left out)\n");
	timeline_line(t, "submitted", "submitted_ms", NULL, NULL);
	timeline_line(t, "placed", "placed_ms", "queued", "queued_ms");
	timeline_line(t, "first step", "first_step_ms", "start-up", "startup_ms");
	timeline_line(t, "ended", "ended_ms", NULL, NULL);
	if (str(t, "end_reason") != NULL)
		printf("%-14s %s\n", "end reason", str(t, "end_reason"));
	if (json_array_size(list) > 0) {
		static const char *const headers[] = {
		    "#",       "GEN",      "KIND",    "SILENT",   "DETECTED", "STOPPED", "PLACED",
		    "RUNNING", "STEPPING", "REACHED", "RESTORED", "REDONE",   "DOWN",    "CAUSE"};
		struct ctl_table tab;
		ctl_table_init(&tab, 14, headers);
		size_t i;
		const json_t *it;
		json_array_foreach(list, i, it)
		{
			char b[12][64];
			int64_t at = json_integer_value(json_object_get(it, "detected_ms"));
			snprintf(b[0], sizeof b[0], "%zu", i + 1);
			ctl_format_time(at, b[2], sizeof b[2]);
			snprintf(b[7], sizeof b[7], "%.1fs%s",
			         (double)json_integer_value(json_object_get(it, "down_ms")) / 1000,
			         json_is_true(json_object_get(it, "ongoing")) ? " so far"
			         : json_is_true(json_object_get(it, "recovered"))
			             ? ""
			             : " (no step after)");
			const char *row[] = {b[0],
			                     cell(it, "generation", b[1], sizeof b[1]),
			                     str(it, "kind"),
			                     silent_s(it, b[11], sizeof b[11]),
			                     b[2],
			                     after_s(it, "stopped_ms", at, b[3], sizeof b[3]),
			                     after_s(it, "placed_ms", at, b[4], sizeof b[4]),
			                     after_s(it, "running_ms", at, b[5], sizeof b[5]),
			                     after_s(it, "first_step_ms", at, b[6], sizeof b[6]),
			                     cell(it, "reached_step", b[9], sizeof b[9]),
			                     cell(it, "restored_step", b[8], sizeof b[8]),
			                     cell(it, "lost_steps", b[10], sizeof b[10]),
			                     b[7],
			                     str(it, "cause")};
			ctl_table_add(&tab, row);
		}
		printf("interruptions (SILENT: how long the leader had heard nothing before it "
		       "DETECTED "
		       "it; phases after DETECTED; REACHED: the last step reported before it, "
		       "RESTORED: "
		       "the checkpoint step, REDONE: the steps done again):\n");
		ctl_table_print(&tab, stdout);
		ctl_table_free(&tab);
	}
	const json_t *fraction = json_object_get(t, "progress_fraction");
	if (json_is_number(fraction))
		printf("%-14s %.1f%% of the %.1f s since its first placement (start-up %.1f s, "
		       "silent before detection %.1f s, interruptions %.1f s)\n",
		       "progress", json_number_value(fraction) * 100,
		       (double)json_integer_value(json_object_get(t, "span_ms")) / 1000,
		       (double)json_integer_value(json_object_get(t, "startup_ms")) / 1000,
		       (double)json_integer_value(json_object_get(t, "undetected_ms")) / 1000,
		       (double)json_integer_value(json_object_get(t, "down_ms")) / 1000);
	if (json_array_size(list) > 0)
		printf("%-14s %lld step(s) done again after restoring checkpoints\n", "redone",
		       (long long)json_integer_value(json_object_get(t, "lost_steps")));
}

static int cmd_job_timeline(struct ctl *x)
{
	char path[128];
	snprintf(path, sizeof path, "/v1/jobs/%s/timeline", x->args.operand[0]);
	return request(x, READ, "GET", path, NULL, print_timeline, NULL);
}

static void show_cancelled(const struct ctl *x, const json_t *doc)
{
	printf("job %s: %s\n", x->args.operand[0],
	       str(doc, "state") ? str(doc, "state") : "cancel requested");
}

static int cmd_job_cancel(struct ctl *x)
{
	char path[128];
	snprintf(path, sizeof path, "/v1/jobs/%s/cancel", x->args.operand[0]);
	return request(x, WRITE, "POST", path, "{}", show_cancelled, NULL);
}

static void show_deleted(const struct ctl *x, const json_t *doc)
{
	printf("deleted job %s (%lld checkpoints, %lld bytes)\n", x->args.operand[0],
	       (long long)json_integer_value(json_object_get(doc, "checkpoints")),
	       (long long)json_integer_value(json_object_get(doc, "checkpoint_bytes")));
}

static int cmd_job_delete(struct ctl *x)
{
	char path[128];
	snprintf(path, sizeof path, "/v1/jobs/%s", x->args.operand[0]);
	return request(x, WRITE, "DELETE", path, NULL, show_deleted, NULL);
}

/* One GET of a polling loop: 0 with *r (status 200) to read and free; 1 after a failure to
 * reach the cluster the loop may wait out (retry: up to WAIT_TRANSPORT_FAILURES_MAX in a row,
 * counted in *failures); -1 once the loop must end, said (an error answer, or those failures). */
static int poll_get(struct ctl *x, const char *path, int retry, int *failures,
                    struct ctl_response *r)
{
	struct yard_err err = {0};
	if (ctl_client_request(&x->client, "GET", path, NULL, NULL, r, &err) != 0) {
		if (!retry || ++*failures >= WAIT_TRANSPORT_FAILURES_MAX) {
			fail(x, "%s", err.msg);
			return -1;
		}
		return 1;
	}
	if (r->status != 200) {
		char what[1024];
		ctl_response_describe(r, what, sizeof what);
		ctl_response_free(r);
		fail(x, "%s", what);
		return -1;
	}
	*failures = 0;
	return 0;
}

static int is_terminal(const char *state)
{
	return state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
	                 strcmp(state, "cancelled") == 0);
}

#define CHECKPOINT_WAIT_S 120 /* job checkpoint's --timeout when none is given */

/* `job checkpoint ID [--timeout S]`: asks the job's ranks for a checkpoint now (POST
 * /v1/jobs/ID/checkpoint), then polls the job until its "checkpoint_request" shows a complete
 * checkpoint newer than the newest at the request, the job leaves that generation, or
 * --timeout (default CHECKPOINT_WAIT_S) passes. */
static int cmd_job_checkpoint(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	const char *id = a->operand[0];
	char path[128];
	struct ctl_response r;
	snprintf(path, sizeof path, "/v1/jobs/%s/checkpoint", id);
	if (write_call(x, "POST", path, "{}", &r) != 0)
		return EXIT_FAILURE;
	json_int_t generation = json_integer_value(json_object_get(r.json, "generation"));
	json_int_t request = json_integer_value(json_object_get(r.json, "request"));
	json_int_t after = json_integer_value(json_object_get(r.json, "newest_step"));
	json_int_t step = json_integer_value(json_object_get(r.json, "step"));
	ctl_response_free(&r);
	if (a->output != CTL_OUTPUT_JSON)
		fprintf(stderr,
		        "job %s (generation %lld, at step %lld): its ranks are asked for a "
		        "checkpoint (request %lld); newest complete before: step %lld\n",
		        id, (long long)generation, (long long)step, (long long)request,
		        (long long)after);
	double timeout_s = a->timeout_s > 0 ? a->timeout_s : CHECKPOINT_WAIT_S;
	uint64_t deadline = yard_now_mono_ms() + (uint64_t)(timeout_s * 1000);
	snprintf(path, sizeof path, "/v1/jobs/%s", id);
	for (int failures = 0;;) {
		int got = poll_get(x, path, 1, &failures, &r);
		if (got < 0)
			return EXIT_FAILURE;
		if (got == 0) {
			const json_t *asked = json_object_get(r.json, "checkpoint_request");
			json_int_t newest =
			    json_integer_value(json_object_get(asked, "newest_step"));
			json_int_t gen = json_integer_value(json_object_get(r.json, "generation"));
			char state[16];
			snprintf(state, sizeof state, "%s",
			         str(r.json, "state") ? str(r.json, "state") : "?");
			ctl_response_free(&r);
			if (asked != NULL && newest > after) {
				if (a->output == CTL_OUTPUT_JSON)
					printf("{\"id\": \"%s\", \"generation\": %lld, "
					       "\"request\": %lld, "
					       "\"step\": %lld}\n",
					       id, (long long)generation, (long long)request,
					       (long long)newest);
				else
					printf("checkpoint step %lld of job %s complete\n",
					       (long long)newest, id);
				return 0;
			}
			if (gen != generation || strcmp(state, "running") != 0)
				return fail(
				    x,
				    "job %s is %s at generation %lld: generation %lld ended "
				    "before a checkpoint newer than step %lld was complete",
				    id, state, (long long)gen, (long long)generation,
				    (long long)after);
		}
		uint64_t now = yard_now_mono_ms();
		if (now >= deadline)
			return fail(
			    x,
			    "timed out after %g s: job %s has no complete checkpoint newer than "
			    "step %lld yet",
			    timeout_s, id, (long long)after);
		yard_sleep_ms(YARD_MIN((uint64_t)WAIT_POLL_MS / 4, deadline - now));
	}
}

/* One progress line for `job watch`: a bar of train.steps, step, loss and an ETA from the
 * step rate seen since watching began. */
static void print_progress(const json_t *job, uint64_t start_ms, int64_t first_step, int tty)
{
	const json_t *train = json_object_get(json_object_get(job, "spec"), "train");
	json_int_t total = json_integer_value(json_object_get(train, "steps"));
	json_int_t step = json_integer_value(json_object_get(job, "step"));
	const char *state = str(job, "state");
	double elapsed_s = (double)(yard_now_mono_ms() - start_ms) / 1000.0;
	char bar[41], loss[32], eta[32] = "-";
	int filled = total > 0 ? (int)(40 * YARD_MIN(step, total) / total) : 0;

	for (int i = 0; i < 40; i++)
		bar[i] = i < filled ? '#' : '.';
	bar[40] = '\0';
	cell(job, "loss", loss, sizeof loss);
	if (total > 0 && step > first_step && elapsed_s > 0) {
		double rate = (double)(step - first_step) / elapsed_s;
		snprintf(eta, sizeof eta, "%.0fs", (double)(total - step) / rate);
	}
	printf("%s[%s] step %lld/%lld  loss %s  ETA %s  %s%s", tty ? "\r" : "", bar,
	       (long long)step, (long long)total, loss, eta, state ? state : "?",
	       tty ? "\033[K" : "\n");
	fflush(stdout);
}

static int cmd_job_wait(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	int watch = a->command == CTL_JOB_WATCH, tty = isatty(STDOUT_FILENO);
	int64_t first_step = -1;
	json_int_t last_printed_step = -1;
	uint64_t start = yard_now_mono_ms();
	uint64_t deadline = a->timeout_s > 0 ? start + (uint64_t)(a->timeout_s * 1000) : 0;
	char path[128], last_state[32] = "", last_error[600] = "";
	int transport_failures = 0;

	snprintf(path, sizeof path, "/v1/jobs/%s", a->operand[0]);
	for (;;) {
		struct ctl_response r;
		struct yard_err err = {0};
		if (ctl_client_request(&x->client, "GET", path, NULL, NULL, &r, &err) != 0) {
			/* The cluster may be failing over: keep asking, but not forever. */
			if (++transport_failures >= WAIT_TRANSPORT_FAILURES_MAX)
				return fail(x, "%s", err.msg);
			snprintf(last_error, sizeof last_error, "%s", err.msg);
		} else if (r.status != 200) {
			char what[1024];
			ctl_response_describe(&r, what, sizeof what);
			ctl_response_free(&r);
			return fail(x, "%s", what);
		} else {
			const char *state = str(r.json, "state");
			json_int_t cur_step = json_integer_value(json_object_get(r.json, "step"));
			transport_failures = 0;
			last_error[0] = '\0';
			if (watch) {
				if (first_step < 0)
					first_step = cur_step;
				if (tty || cur_step != last_printed_step || is_terminal(state))
					print_progress(r.json, start, first_step, tty);
				last_printed_step = cur_step;
				if (tty && is_terminal(state))
					fputc('\n', stdout);
				if (state)
					snprintf(last_state, sizeof last_state, "%s", state);
			} else if (state && strcmp(state, last_state) != 0) {
				char step[32];
				fprintf(stderr, "job %s: %s (step %s)\n", a->operand[0], state,
				        cell(r.json, "step", step, sizeof step));
				snprintf(last_state, sizeof last_state, "%s", state);
			}
			if (is_terminal(state)) {
				int ok = strcmp(state, "succeeded") == 0;
				char step[32], loss[32];
				if (a->output == CTL_OUTPUT_JSON)
					print_json(&r);
				else
					printf("job %s %s (step %s, loss %s)\n", a->operand[0],
					       state, cell(r.json, "step", step, sizeof step),
					       cell(r.json, "loss", loss, sizeof loss));
				if (!ok)
					fail(x, "job %s %s%s%s", a->operand[0], state,
					     str(r.json, "reason") ? ": " : "",
					     str(r.json, "reason") ? str(r.json, "reason") : "");
				ctl_response_free(&r);
				return ok ? 0 : EXIT_FAILURE;
			}
			ctl_response_free(&r);
		}
		uint64_t now = yard_now_mono_ms();
		if (deadline && now >= deadline) {
			if (last_error[0])
				return fail(
				    x, "timed out after %g s waiting for job %s; last attempt: %s",
				    a->timeout_s, a->operand[0], last_error);
			return fail(x, "timed out after %g s; job %s is still %s", a->timeout_s,
			            a->operand[0], last_state[0] ? last_state : "unknown");
		}
		if (last_error[0] && transport_failures == 1)
			fprintf(stderr, "yardctl: job wait: %s; still waiting\n", last_error);
		yard_sleep_ms(deadline ? YARD_MIN((uint64_t)WAIT_POLL_MS, deadline - now)
		                       : WAIT_POLL_MS);
	}
}

/* ---- job logs ---- */

#define LOGS_READ_BYTES (256 << 10)
#define LOGS_POLL_MS 500
#define LOGS_RANKS_MAX 4096
#define LOGS_PARTIAL_MAX (64 << 10) /* a line longer than this is printed in pieces */

/* Where `job logs` is in one stream (rank, generation), and the line it has not finished. */
struct log_cursor {
	int rank;
	int64_t generation;
	int64_t offset;
	char node[64];
	char *partial;
	size_t partial_len;
	int announced; /* the generation header was printed */
};

struct log_view {
	struct log_cursor *cursors;
	int n, cap;
	int prefix; /* every rank: "[rank R] " before each line */
	int json;
	FILE *out;        /* stdout, or the temporary file --tail reads back */
	int rank_streams; /* with --rank: the streams of that rank the last pass listed */
};

/* Prints one complete line of a stream (prefixed when every rank is shown). */
static void log_line(const struct log_view *v, const struct log_cursor *c, const char *line,
                     size_t len)
{
	if (v->prefix)
		fprintf(v->out, "[rank %d] ", c->rank);
	fwrite(line, 1, len, v->out);
	fputc('\n', v->out);
}

/* Appends text to the cursor's output: complete lines are printed, the rest is kept. */
static void log_feed(const struct log_view *v, struct log_cursor *c, const char *text, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (text[i] != '\n') {
			if (c->partial_len == LOGS_PARTIAL_MAX) {
				log_line(v, c, c->partial, c->partial_len);
				c->partial_len = 0;
			}
			if (c->partial == NULL && (c->partial = malloc(LOGS_PARTIAL_MAX)) == NULL)
				return;
			c->partial[c->partial_len++] = text[i];
			continue;
		}
		log_line(v, c, c->partial ? c->partial : "", c->partial_len);
		c->partial_len = 0;
	}
}

static void log_flush(const struct log_view *v, struct log_cursor *c)
{
	if (c->partial_len > 0)
		log_line(v, c, c->partial, c->partial_len);
	c->partial_len = 0;
}

static struct log_cursor *log_cursor_get(struct log_view *v, const json_t *stream)
{
	int rank = (int)json_integer_value(json_object_get(stream, "rank"));
	int64_t gen = json_integer_value(json_object_get(stream, "generation"));
	for (int i = 0; i < v->n; i++)
		if (v->cursors[i].rank == rank && v->cursors[i].generation == gen)
			return &v->cursors[i];
	if (v->n == LOGS_RANKS_MAX)
		return NULL;
	if (v->n == v->cap) {
		int cap = v->cap ? v->cap * 2 : 16;
		struct log_cursor *grown = realloc(v->cursors, (size_t)cap * sizeof *grown);
		if (grown == NULL)
			return NULL;
		v->cursors = grown;
		v->cap = cap;
	}
	struct log_cursor *c = &v->cursors[v->n++];
	memset(c, 0, sizeof *c);
	c->rank = rank;
	c->generation = gen;
	/* from byte 0: what the leader no longer holds (or a new leader does not hold yet) is
	 * said (skipped) or waited for, never silently left out */
	c->offset = 0;
	snprintf(c->node, sizeof c->node, "%s", str(stream, "node") ? str(stream, "node") : "?");
	return c;
}

/* Reads what is new in one stream and prints it. Returns bytes read, or -1 when the
 * controller could not be asked (the caller decides whether that is fatal). */
static long log_pull(struct ctl *x, struct log_view *v, struct log_cursor *c, int first_gen)
{
	long total = 0;
	for (int round = 0; round < 64; round++) {
		char path[256], num[32];
		struct ctl_response r;
		struct yard_err err = {0};
		snprintf(path, sizeof path, "/v1/jobs/%s/logs", x->args.operand[0]);
		snprintf(num, sizeof num, "%d", c->rank);
		add_query(path, sizeof path, "rank", num);
		snprintf(num, sizeof num, "%lld", (long long)c->generation);
		add_query(path, sizeof path, "generation", num);
		snprintf(num, sizeof num, "%lld", (long long)c->offset);
		add_query(path, sizeof path, "offset", num);
		snprintf(num, sizeof num, "%d", LOGS_READ_BYTES);
		add_query(path, sizeof path, "max_bytes", num);
		if (ctl_client_request(&x->client, "GET", path, NULL, NULL, &r, &err) != 0) {
			fprintf(stderr, "yardctl: job logs: %s\n", err.msg);
			return -1;
		}
		if (r.status == 404) { /* a new leader that has not heard this stream yet */
			ctl_response_free(&r);
			return total;
		}
		if (r.status != 200) {
			char what[1024];
			ctl_response_describe(&r, what, sizeof what);
			fprintf(stderr, "yardctl: job logs: %s\n", what);
			ctl_response_free(&r);
			return -1;
		}
		const char *data = str(r.json, "data");
		size_t len = data ? strlen(data) : 0;
		json_int_t skipped = json_integer_value(json_object_get(r.json, "skipped"));
		json_int_t next = json_integer_value(json_object_get(r.json, "next_offset"));
		json_int_t end = json_integer_value(json_object_get(r.json, "end_offset"));
		if (!c->announced && (len > 0 || skipped > 0)) {
			c->announced = 1;
			if (c->generation != first_gen && !v->json) {
				char header[160];
				int n = snprintf(header, sizeof header,
				                 "--- generation %lld on node %s ---\n",
				                 (long long)c->generation, c->node);
				log_feed(v, c, header, (size_t)n);
			}
		}
		if (v->json) {
			if (len > 0 || skipped > 0) {
				json_dumpf(r.json, v->out, JSON_COMPACT);
				fputc('\n', v->out);
			}
		} else {
			if (skipped > 0) {
				char marker[96];
				int n = snprintf(
				    marker, sizeof marker, "%s[... %lld bytes skipped ...]\n",
				    c->partial_len > 0 ? "\n" : "", (long long)skipped);
				log_feed(v, c, marker, (size_t)n);
			}
			log_feed(v, c, data ? data : "", len);
		}
		int advanced = next > c->offset;
		if (advanced)
			c->offset = next;
		total += (long)len + (long)skipped;
		ctl_response_free(&r);
		if (!advanced || next >= end)
			return total;
	}
	return total;
}

/* Asks for the job's streams and pulls each selected one. Returns bytes read or -1. */
static long log_pass(struct ctl *x, struct log_view *v)
{
	char path[160];
	struct ctl_response r;
	struct yard_err err = {0};
	long total = 0;
	snprintf(path, sizeof path, "/v1/jobs/%s/logs", x->args.operand[0]);
	if (ctl_client_request(&x->client, "GET", path, NULL, NULL, &r, &err) != 0) {
		fprintf(stderr, "yardctl: job logs: %s\n", err.msg);
		return -1;
	}
	if (r.status != 200) {
		char what[1024];
		ctl_response_describe(&r, what, sizeof what);
		fprintf(stderr, "yardctl: job logs: %s\n", what);
		ctl_response_free(&r);
		return r.status == 404 ? -2 : -1;
	}
	size_t i;
	json_t *stream;
	json_t *streams = json_object_get(r.json, "streams");
	v->rank_streams = 0;
	json_array_foreach(streams, i, stream)
	{
		int rank = (int)json_integer_value(json_object_get(stream, "rank"));
		if (x->args.rank >= 0 && rank != x->args.rank)
			continue;
		v->rank_streams++;
		/* the lowest generation held of this rank prints without a header */
		int first_gen = (int)json_integer_value(json_object_get(stream, "generation"));
		for (size_t k = 0; k < i; k++)
			if (json_integer_value(
			        json_object_get(json_array_get(streams, k), "rank")) == rank) {
				first_gen = (int)json_integer_value(
				    json_object_get(json_array_get(streams, k), "generation"));
				break;
			}
		struct log_cursor *c = log_cursor_get(v, stream);
		if (c == NULL)
			continue;
		long n = log_pull(x, v, c, first_gen);
		if (n < 0) {
			ctl_response_free(&r);
			return -1;
		}
		total += n;
	}
	ctl_response_free(&r);
	fflush(v->out);
	return total;
}

static int job_has_ended(struct ctl *x, int *ended)
{
	char path[128];
	struct ctl_response r;
	struct yard_err err = {0};
	snprintf(path, sizeof path, "/v1/jobs/%s", x->args.operand[0]);
	if (ctl_client_request(&x->client, "GET", path, NULL, NULL, &r, &err) != 0)
		return -1;
	*ended = r.status == 200 && is_terminal(str(r.json, "state"));
	int rc = r.status == 200 ? 0 : -1;
	ctl_response_free(&r);
	return rc;
}

/* --tail N: the first pass goes to a temporary file, of which the last N lines of each rank
 * are printed; later passes (with -f) print as they come. */
static int print_tail(FILE *tmp, int n, int prefix)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int ranks = 0;
	struct {
		int rank;
		long count;
	} seen[LOGS_RANKS_MAX];
	rewind(tmp);
	/* count lines per rank ("[rank R] " prefix), then print each rank's last n */
	while ((len = getline(&line, &cap, tmp)) > 0) {
		int rank = 0;
		if (prefix)
			sscanf(line, "[rank %d]", &rank);
		int k = 0;
		while (k < ranks && seen[k].rank != rank)
			k++;
		if (k == ranks && ranks < LOGS_RANKS_MAX)
			seen[ranks].rank = rank, seen[ranks++].count = 0;
		if (k < ranks)
			seen[k].count++;
	}
	rewind(tmp);
	long index[LOGS_RANKS_MAX] = {0};
	while ((len = getline(&line, &cap, tmp)) > 0) {
		int rank = 0;
		if (prefix)
			sscanf(line, "[rank %d]", &rank);
		for (int k = 0; k < ranks; k++)
			if (seen[k].rank == rank && index[k]++ >= seen[k].count - n)
				fwrite(line, 1, (size_t)len, stdout);
	}
	free(line);
	return 0;
}

/* -f after the job ended: output that is still on its way comes with the next heartbeats
 * of the nodes that ran the ranks, and a slow heartbeat (--heartbeat-ms) can be seconds
 * away. So -f ends when a pass brought nothing although every such node that is not down
 * has sent a heartbeat since the pass before, which brought nothing either (a heartbeat
 * carries the next piece of every rank's log that has one, up to 384 KiB in all: a node
 * whose heartbeats are full of other jobs' output can end -f early). At most the first
 * FOLLOW_NODES_MAX nodes of the streams are asked. */
#define FOLLOW_NODES_MAX 64
#define FOLLOW_END_MAX_MS 30000 /* once ended, at most this long without new output */

struct follow_end {
	int n;
	char node[FOLLOW_NODES_MAX][64];
	int heard[FOLLOW_NODES_MAX];
	uint64_t since_ms; /* our clock when the quiet pass was over */
};

#define NODE_NOT_WAITED UINT64_MAX

/* When the leader last heard node name, as our clock's time: NODE_NOT_WAITED when the node
 * is down or unknown (its output is not coming), 0 when it cannot be told (not heard by
 * this leader yet, no answer). */
static uint64_t node_heard_at(struct ctl *x, const char *name)
{
	char path[160];
	struct ctl_response r;
	struct yard_err err = {0};
	uint64_t at = 0;
	snprintf(path, sizeof path, "/v1/nodes/%s", name);
	if (ctl_client_request(&x->client, "GET", path, NULL, NULL, &r, &err) != 0)
		return 0;
	const json_t *ago = json_object_get(r.json, "last_heartbeat_ms_ago");
	const char *state = str(r.json, "state");
	uint64_t now = yard_now_mono_ms();
	if (r.status == 404 || (r.status == 200 && state != NULL && strcmp(state, "down") == 0))
		at = NODE_NOT_WAITED;
	else if (r.status == 200 && json_is_integer(ago) && json_integer_value(ago) >= 0 &&
	         (uint64_t)json_integer_value(ago) < now)
		at = now - (uint64_t)json_integer_value(ago);
	ctl_response_free(&r);
	return at;
}

/* After a pass that brought nothing: the nodes to hear from. Returns how many. */
static int follow_end_start(struct follow_end *f, const struct log_view *v)
{
	f->n = 0;
	for (int i = 0; i < v->n && f->n < FOLLOW_NODES_MAX; i++) {
		const char *node = v->cursors[i].node;
		int known = strcmp(node, "?") == 0;
		for (int k = 0; k < f->n && !known; k++)
			known = strcmp(f->node[k], node) == 0;
		if (!known) {
			snprintf(f->node[f->n], sizeof f->node[f->n], "%s", node);
			f->heard[f->n++] = 0;
		}
	}
	f->since_ms = yard_now_mono_ms();
	return f->n;
}

/* 1 when every node has been heard since the quiet pass (or is down or unknown). */
static int follow_end_heard(struct ctl *x, struct follow_end *f)
{
	int all = 1;
	for (int k = 0; k < f->n; k++) {
		if (f->heard[k])
			continue;
		uint64_t at = node_heard_at(x, f->node[k]);
		f->heard[k] = at == NODE_NOT_WAITED || (at != 0 && at > f->since_ms);
		all &= f->heard[k];
	}
	return all;
}

/* --rank R of which the leader holds no output: an error when the job's current generation
 * has no rank R (its ranks named), else a note that none is held yet. -1: the error. */
static int rank_without_output(struct ctl *x)
{
	char path[128];
	struct ctl_response r;
	struct yard_err err = {0};
	int rank = x->args.rank, rc = 0;
	snprintf(path, sizeof path, "/v1/jobs/%s", x->args.operand[0]);
	if (ctl_client_request(&x->client, "GET", path, NULL, NULL, &r, &err) != 0)
		return 0;
	size_t world = json_array_size(json_object_get(r.json, "layout"));
	if (r.status == 200 && world > 0 && (size_t)rank >= world) {
		fail(x, "job %s has no rank %d: its ranks are 0-%zu", x->args.operand[0], rank,
		     world - 1);
		rc = -1;
	} else if (r.status == 200 && !x->args.follow)
		fprintf(stderr, "yardctl: job logs: no output of rank %d of job %s is held (yet)\n",
		        rank, x->args.operand[0]);
	ctl_response_free(&r);
	return rc;
}

static int cmd_job_logs(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	struct log_view v = {
	    .prefix = a->rank < 0, .json = a->output == CTL_OUTPUT_JSON, .out = stdout};
	int rc = 0, failures = 0;
	FILE *tmp = NULL;

	if (a->tail >= 0 && !v.json) {
		tmp = tmpfile();
		if (tmp == NULL)
			return fail(x, "--tail: cannot create a temporary file");
		v.out = tmp;
	}
	long n = log_pass(x, &v);
	if (tmp != NULL) {
		for (int i = 0; i < v.n && !a->follow; i++)
			log_flush(&v, &v.cursors[i]);
		fflush(tmp);
		v.out = stdout;
		print_tail(tmp, a->tail, v.prefix);
		fclose(tmp);
	}
	if (n == -2) {
		rc = EXIT_FAILURE;
		goto out;
	}
	if (n < 0 && !a->follow) {
		rc = EXIT_FAILURE;
		goto out;
	}
	if (n >= 0 && a->rank >= 0 && v.rank_streams == 0 && rank_without_output(x) != 0) {
		rc = EXIT_FAILURE;
		goto out;
	}
	/* -f: poll until the job has ended and its nodes' heartbeats bring nothing more (the
	 * ranks' last words come with the heartbeat that reports them exited; a longer backlog
	 * follows in the next heartbeats: struct follow_end) */
	struct follow_end fe = {0};
	enum { QUIET_NOT_YET, QUIET_HEARING, QUIET_LAST_PASS } quiet = QUIET_NOT_YET;
	uint64_t output_ms = yard_now_mono_ms();
	while (a->follow) {
		int ended = 0;
		if (job_has_ended(x, &ended) != 0 || n < 0) {
			if (++failures >= WAIT_TRANSPORT_FAILURES_MAX) {
				rc = fail(x, "the cluster did not answer %d times in a row",
				          failures);
				break;
			}
		} else {
			failures = 0;
		}
		yard_sleep_ms(LOGS_POLL_MS);
		if (quiet == QUIET_HEARING && follow_end_heard(x, &fe))
			quiet = QUIET_LAST_PASS;
		n = log_pass(x, &v);
		if (n > 0 || !ended) {
			quiet = QUIET_NOT_YET;
			output_ms =
			    yard_now_mono_ms(); /* the bound counts from the end, or after */
			continue;
		}
		if (n < 0)
			continue;
		if (quiet == QUIET_LAST_PASS || yard_now_mono_ms() - output_ms > FOLLOW_END_MAX_MS)
			break;
		if (quiet == QUIET_NOT_YET) {
			if (follow_end_start(&fe, &v) == 0)
				break; /* no stream: no node to hear from */
			quiet = QUIET_HEARING;
		}
	}
	for (int i = 0; i < v.n; i++)
		if (!v.json && (a->tail < 0 || a->follow))
			log_flush(&v, &v.cursors[i]);
out:
	for (int i = 0; i < v.n; i++)
		free(v.cursors[i].partial);
	free(v.cursors);
	return rc;
}

/* ---- nodes ---- */

/* "ok", "cordoned", "draining" or "drained". */
static const char *node_sched(const json_t *n)
{
	if (str(n, "drain") != NULL)
		return str(n, "drain");
	return json_is_true(json_object_get(n, "cordoned")) ? "cordoned" : "ok";
}

static int running_ranks(const json_t *n)
{
	size_t i;
	json_t *r;
	int count = 0;
	json_array_foreach(json_object_get(n, "ranks"), i, r) count +=
	    str(r, "state") != NULL && strcmp(str(r, "state"), "running") == 0;
	return count;
}

static void heartbeat_age(const json_t *n, char *out, size_t len)
{
	json_t *ago = json_object_get(n, "last_heartbeat_ms_ago");
	if (!json_is_integer(ago)) {
		snprintf(out, len, "-");
		return;
	}
	if (json_integer_value(ago) < 10000)
		snprintf(out, len, "%.1fs", (double)json_integer_value(ago) / 1000);
	else
		ctl_format_age(json_integer_value(ago), out, len);
}

static void node_row(const json_t *n, char buf[][96], const char **cells)
{
	const json_t *devs = json_object_get(n, "devices");
	const char *kind = str(json_array_get(devs, 0), "kind");
	snprintf(buf[3], sizeof buf[3], "%zu %s", json_array_size(devs), kind ? kind : "?");
	heartbeat_age(n, buf[5], sizeof buf[5]);
	if (json_is_array(json_object_get(n, "ranks")))
		snprintf(buf[6], sizeof buf[6], "%d", running_ranks(n));
	else
		snprintf(buf[6], sizeof buf[6], "-");
	const char *row[] = {str(n, "id"),      str(n, "state"), node_sched(n), buf[3],
	                     str(n, "version"), buf[5],          buf[6],        str(n, "reason")};
	memcpy(cells, row, sizeof row);
}

static void print_nodes(const struct ctl *x, const json_t *doc)
{
	static const char *const headers[] = {"NAME",    "STATE",     "SCHEDULING", "DEVICES",
	                                      "VERSION", "HEARTBEAT", "RANKS",      "REASON"};
	print_table(json_object_get(doc, "nodes"), 8, headers, node_row);
}

static int cmd_node_list(struct ctl *x)
{
	return request(x, READ, "GET", "/v1/nodes", NULL, print_nodes, NULL);
}

static void print_node(const struct ctl *x, const json_t *n)
{
	char b[256];
	size_t i;
	json_t *v;
	printf("%-14s %s\n", "name", str(n, "id") ? str(n, "id") : "-");
	printf("%-14s %s\n", "state", str(n, "state") ? str(n, "state") : "-");
	printf("%-14s %s\n", "scheduling", node_sched(n));
	printf("%-14s %s\n", "reason", cell(n, "reason", b, sizeof b));
	printf("%-14s %s, rank ports from %s\n", "address", str(n, "host") ? str(n, "host") : "-",
	       cell(n, "port_base", b, sizeof b));
	printf("%-14s %s\n", "version", cell(n, "version", b, sizeof b));
	printf("%-14s %s\n", "worker", cell(n, "worker_version", b, sizeof b));
	heartbeat_age(n, b, sizeof b);
	printf("%-14s %s%s\n", "heartbeat", b,
	       strcmp(b, "-") ? " ago" : " (not heard by this leader)");
	if (json_is_integer(json_object_get(n, "free_disk_mb")))
		printf("%-14s %s MiB\n", "free disk", cell(n, "free_disk_mb", b, sizeof b));
	if (json_object_size(json_object_get(n, "labels")) > 0)
		printf("%-14s %s\n", "labels", cell(n, "labels", b, sizeof b));
	const json_t *perf = json_object_get(n, "perf"); /* the leader's soft state */
	if (json_is_object(perf))
		printf("%-14s %.1f GFLOP/s per device (%.0f%% each when all compute), intra-node "
		       "%.2f GB/s, inter-node %.2f GB/s (%s)\n",
		       "rates", num(perf, "flops_per_s") / 1e9,
		       num(perf, "parallel_efficiency") * 100,
		       num(perf, "intra_bw_bytes_per_s") / 1e9,
		       num(perf, "inter_bw_bytes_per_s") / 1e9,
		       str(perf, "inter_source") ? str(perf, "inter_source") : "?");
	else
		printf("%-14s none known to the member that answered (the leader has them once the "
		       "node's agent has measured them)\n",
		       "rates");
	printf("devices:\n");
	json_array_foreach(json_object_get(n, "devices"), i, v)
	{
		char idx[16], mem[32];
		printf("  %-4s %-5s %s MiB\n", cell(v, "index", idx, sizeof idx),
		       str(v, "kind") ? str(v, "kind") : "?",
		       cell(v, "memory_mb", mem, sizeof mem));
	}
	const json_t *ranks = json_object_get(n, "ranks");
	if (!json_is_array(ranks))
		return;
	printf("ranks:%s\n", json_array_size(ranks) == 0 ? " none" : "");
	if (json_array_size(ranks) == 0)
		return;
	static const char *const headers[] = {"JOB",   "RANK", "GENERATION", "PID",
	                                      "STATE", "EXIT", "STEP",       "WORKER"};
	struct ctl_table t;
	ctl_table_init(&t, 8, headers);
	json_array_foreach(ranks, i, v)
	{
		char c[5][32];
		const char *row[] = {str(v, "job"),
		                     cell(v, "rank", c[0], sizeof c[0]),
		                     cell(v, "generation", c[1], sizeof c[1]),
		                     cell(v, "pid", c[2], sizeof c[2]),
		                     str(v, "state"),
		                     cell(v, "exit_code", c[3], sizeof c[3]),
		                     cell(v, "step", c[4], sizeof c[4]),
		                     str(v, "worker_version") ? str(v, "worker_version") : "-"};
		ctl_table_add(&t, row);
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
}

static int cmd_node_show(struct ctl *x)
{
	return show_object(x, "/v1/nodes/", print_node);
}

/* node cordon | uncordon | drain NAME */

static void show_drained(const struct ctl *x, const json_t *doc)
{
	printf("node %s %s: no new ranks; its running jobs restart on other nodes from their "
	       "newest checkpoint (yardctl events)\n",
	       x->args.operand[0], node_sched(doc));
}

static void show_probed(const struct ctl *x, const json_t *doc)
{
	printf("node %s asked to measure its rates again (request %lld): its agent probes as soon "
	       "as no rank runs there; the planner uses the new rates once they arrive (yardctl "
	       "node show %s)\n",
	       x->args.operand[0], (long long)json_integer_value(json_object_get(doc, "request")),
	       x->args.operand[0]);
}

/* node cordon | uncordon | drain | probe NAME */
static int cmd_node_change(struct ctl *x)
{
	int command = x->args.command;
	const char *verb = command == CTL_NODE_CORDON     ? "cordon"
	                   : command == CTL_NODE_UNCORDON ? "uncordon"
	                   : command == CTL_NODE_PROBE    ? "probe"
	                                                  : "drain";
	char path[160], said[160];
	snprintf(path, sizeof path, "/v1/nodes/%s/%s", x->args.operand[0], verb);
	snprintf(said, sizeof said, "node %s %s", x->args.operand[0],
	         command == CTL_NODE_CORDON ? "cordoned: no new ranks"
	                                    : "uncordoned: ranks may be placed on it");
	return request(x, WRITE, "POST", path, "{}",
	               command == CTL_NODE_DRAIN   ? show_drained
	               : command == CTL_NODE_PROBE ? show_probed
	                                           : NULL,
	               said);
}

/* ---- events ---- */

/* GET path (an event page: events or the audit log) and prints it. */

static void event_row(const json_t *e, char buf[][96], const char **cells)
{
	json_t *tv = json_object_get(e, "ts_ms");
	if (json_is_integer(tv))
		ctl_format_time(json_integer_value(tv), buf[1], sizeof buf[1]);
	else
		snprintf(buf[1], sizeof buf[1], "-");
	const char *row[] = {cell(e, "seq", buf[0], sizeof buf[0]),
	                     buf[1],
	                     str(e, "type"),
	                     str(e, "job"),
	                     str(e, "actor"),
	                     str(e, "message")};
	memcpy(cells, row, sizeof row);
}

static void print_events(const struct ctl *x, const json_t *doc)
{
	static const char *const headers[] = {"SEQ", "TIME", "TYPE", "JOB", "ACTOR", "MESSAGE"};
	json_t *next = json_object_get(doc, "next");
	print_table(json_object_get(doc, "events"), 6, headers, event_row);
	if (json_is_integer(next))
		fprintf(stderr, "(more events: --after %lld)\n",
		        (long long)json_integer_value(next));
}

/* GET path (an event page: events or the audit log; room for 256 bytes) and prints it. */
static int events_page(struct ctl *x, char *path)
{
	const struct ctl_args *a = &x->args;
	char num[32];
	size_t path_len = 256;
	if (a->after >= 0) {
		snprintf(num, sizeof num, "%lld", (long long)a->after);
		add_query(path, path_len, "after", num);
	}
	if (a->limit > 0) {
		snprintf(num, sizeof num, "%d", a->limit);
		add_query(path, path_len, "limit", num);
	}
	return request(x, READ, "GET", path, NULL, print_events, NULL);
}

#define EVENTS_POLL_MS 1000

/* events -f: the first page as asked (--tail N, --after, --limit; by default the newest
 * 20), then every second the events after the last one shown, until interrupted or the
 * cluster stops answering (WAIT_TRANSPORT_FAILURES_MAX failures in a row). With -o json,
 * one compact event a line. */
static int events_follow(struct ctl *x, const char *base)
{
	static const char *const headers[] = {"SEQ", "TIME", "TYPE", "JOB", "ACTOR", "MESSAGE"};
	const struct ctl_args *a = &x->args;
	/* room for most values from the start, so that later rows rarely widen a column */
	int width[CTL_TABLE_COLS_MAX] = {5, 20, 19, 8, 9}, failures = 0, first = 1;
	long long after = a->after;
	char path[320], num[32];
	for (;;) {
		snprintf(path, sizeof path, "%s", base);
		if (first && (after < 0 || a->tail > 0)) { /* the newest N (after SEQ) */
			if (after >= 0) {
				snprintf(num, sizeof num, "%lld", after);
				add_query(path, sizeof path, "after", num);
			}
			snprintf(num, sizeof num, "%d", a->tail > 0 ? a->tail : 20);
			add_query(path, sizeof path, "last", num);
		} else {
			snprintf(num, sizeof num, "%lld", after < 0 ? 0 : after);
			add_query(path, sizeof path, "after", num);
			snprintf(num, sizeof num, "%d", first && a->limit > 0 ? a->limit : 1000);
			add_query(path, sizeof path, "limit", num);
		}
		struct ctl_response r;
		int got = poll_get(x, path, !first, &failures, &r);
		if (got < 0)
			return EXIT_FAILURE;
		if (got == 0) {
			json_t *events = json_object_get(r.json, "events"), *e;
			size_t i;
			struct ctl_table t;
			ctl_table_init(&t, 6, headers);
			json_array_foreach(events, i, e)
			{
				json_t *seq = json_object_get(e, "seq");
				if (json_is_integer(seq) && json_integer_value(seq) > after)
					after = json_integer_value(seq);
				if (a->output == CTL_OUTPUT_JSON) {
					json_dumpf(e, stdout, JSON_COMPACT);
					fputc('\n', stdout);
					continue;
				}
				char buf[CTL_TABLE_COLS_MAX][96];
				const char *cells[CTL_TABLE_COLS_MAX] = {NULL};
				event_row(e, buf, cells);
				ctl_table_add(&t, cells);
			}
			if (a->output != CTL_OUTPUT_JSON && (first || t.nrows > 0))
				ctl_table_print_more(&t, stdout, width, first);
			ctl_table_free(&t);
			fflush(stdout);
			int more = json_is_integer(json_object_get(r.json, "next")); /* a backlog */
			ctl_response_free(&r);
			first = 0;
			if (more)
				continue;
		}
		yard_sleep_ms(EVENTS_POLL_MS);
	}
}

static int cmd_events(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	char path[256] = "/v1/events";
	if (a->job != NULL)
		add_query(path, sizeof path, "job", a->job);
	if (a->follow)
		return events_follow(x, path);
	if (a->tail > 0) {
		char num[32];
		snprintf(num, sizeof num, "%d", a->tail);
		add_query(path, sizeof path, "last", num);
	}
	return events_page(x, path);
}

/* ---- tokens ---- */

static void show_token(const struct ctl *x, const json_t *doc)
{
	char b[3][128];
	printf("token %s created for %s (role %s)\n", cell(doc, "id", b[0], sizeof b[0]),
	       cell(doc, "name", b[1], sizeof b[1]), cell(doc, "role", b[2], sizeof b[2]));
	printf("secret (shown once): %s\n", str(doc, "token") ? str(doc, "token") : "-");
	const json_t *expires = json_object_get(doc, "expires_ms");
	if (json_is_integer(expires)) {
		ctl_format_time(json_integer_value(expires), b[0], sizeof b[0]);
		printf("expires at %s\n", b[0]);
	}
}

static int cmd_token_create(struct ctl *x)
{
	json_t *body = json_pack("{s:s,s:s}", "name", x->args.operand[0], "role", x->args.role);
	if (x->args.ttl_s > 0)
		json_object_set_new(body, "ttl_s", json_integer(x->args.ttl_s));
	return request_json(x, "POST", "/v1/tokens", body, show_token, NULL);
}

static void token_row(const json_t *tok, char buf[][96], const char **cells)
{
	json_t *c = json_object_get(tok, "created_ms"), *e = json_object_get(tok, "expires_ms");
	snprintf(buf[3], sizeof buf[3], "-");
	if (json_is_integer(c))
		ctl_format_time(json_integer_value(c), buf[3], sizeof buf[3]);
	snprintf(buf[4], sizeof buf[4], "never");
	if (json_is_integer(e)) {
		ctl_format_time(json_integer_value(e), buf[4], sizeof buf[4]);
		if (json_integer_value(e) <= yard_now_wall_ms())
			snprintf(buf[4] + strlen(buf[4]), sizeof buf[4] - strlen(buf[4]),
			         " (expired)");
	}
	const char *row[] = {str(tok, "id"), str(tok, "name"), str(tok, "role"), buf[3], buf[4]};
	memcpy(cells, row, sizeof row);
}

static void print_tokens(const struct ctl *x, const json_t *doc)
{
	static const char *const headers[] = {"ID", "NAME", "ROLE", "CREATED", "EXPIRES"};
	print_table(json_object_get(doc, "tokens"), 5, headers, token_row);
}

static int cmd_token_list(struct ctl *x)
{
	return request(x, READ, "GET", "/v1/tokens", NULL, print_tokens, NULL);
}

static int cmd_token_revoke(struct ctl *x)
{
	char path[128], said[128];
	snprintf(path, sizeof path, "/v1/tokens/%s", x->args.operand[0]);
	snprintf(said, sizeof said, "token %s revoked", x->args.operand[0]);
	return request(x, WRITE, "DELETE", path, NULL, NULL, said);
}

/* ---- builds ---- */

#define BUILD_FILE_MAX (4LL << 30)
#define TEXT_FILE_MAX (64 * 1024)

/* Reads a whole binary file (malloc'd, sized first) of at most max bytes. */
static int binary_file_read(const struct ctl *x, const char *path, long long max,
                            unsigned char **data, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return fail(x, "%s: %s", path, strerror(errno));
	long long size = -1;
	if (fseeko(f, 0, SEEK_END) == 0)
		size = (long long)ftello(f);
	if (size < 0 || fseeko(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return fail(x, "%s: cannot tell its size", path);
	}
	if (size > max) {
		fclose(f);
		return fail(x, "%s: %lld bytes, more than the %lld this command sends", path, size,
		            max);
	}
	unsigned char *buf = malloc((size_t)size + 1);
	if (buf == NULL || fread(buf, 1, (size_t)size, f) != (size_t)size) {
		free(buf);
		fclose(f);
		return fail(x, "%s: cannot read %lld bytes", path, size);
	}
	fclose(f);
	buf[size] = '\0';
	*data = buf;
	*len = (size_t)size;
	return 0;
}

static int cmd_build_upload(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	struct ctl_response r;
	unsigned char *data = NULL;
	size_t len = 0;
	char sha[SHA256_HEX_LEN + 1], path[256];
	int rc = binary_file_read(x, a->operand[0], BUILD_FILE_MAX, &data, &len);
	if (rc != 0)
		return rc;
	if (len == 0) {
		free(data);
		return fail(x, "%s is empty", a->operand[0]);
	}
	sha256_hex(data, len, sha);
	json_t *body = json_pack("{s:s,s:s,s:s,s:I}", "version", a->version, "component",
	                         a->component ? a->component : "agent", "sha256", sha, "size",
	                         (json_int_t)len);
	if (a->notes != NULL)
		json_object_set_new(body, "notes", json_string(a->notes));
	if (a->advisory != NULL)
		json_object_set_new(body, "advisory", json_string(a->advisory));
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	rc = write_call(x, "POST", "/v1/builds", text, &r);
	free(text);
	if (rc != 0) {
		free(data);
		return rc;
	}
	ctl_response_free(&r);
	size_t chunks = (len + BUILD_CHUNK_BYTES - 1) / BUILD_CHUNK_BYTES;
	for (size_t i = 0; i < chunks; i++) {
		struct yard_err err = {0};
		char request_id[CTL_REQUEST_ID_LEN + 1], what[1024];
		size_t off = i * BUILD_CHUNK_BYTES;
		struct ctl_body chunk = {data + off, YARD_MIN((size_t)BUILD_CHUNK_BYTES, len - off),
		                         "application/octet-stream"};
		snprintf(path, sizeof path, "/v1/builds/%s/chunks/%zu", a->version, i);
		ctl_request_id(request_id);
		if (ctl_client_send(&x->client, "PUT", path, &chunk, request_id, &r, &err) != 0) {
			free(data);
			return fail(x, "chunk %zu of %zu: %s", i, chunks, err.msg);
		}
		if (r.status != 200) {
			ctl_response_describe(&r, what, sizeof what);
			ctl_response_free(&r);
			free(data);
			return fail(x, "chunk %zu of %zu: %s", i, chunks, what);
		}
		ctl_response_free(&r);
	}
	free(data);
	snprintf(path, sizeof path, "/v1/builds/%s/commit", a->version);
	if ((rc = write_call(x, "POST", path, "{}", &r)) != 0)
		return rc;
	if (a->output == CTL_OUTPUT_JSON)
		print_json(&r);
	else
		printf("build %s (%s): %zu bytes in %zu chunks, sha256 %s, %s\n", a->version,
		       a->component ? a->component : "agent", len, chunks, sha,
		       str(r.json, "state") ? str(r.json, "state") : "?");
	ctl_response_free(&r);
	return 0;
}

static void print_build(const struct ctl *x, const json_t *b)
{
	char buf[128]; /* a sha256 is 64 characters */
	static const char *const keys[] = {"version",         "component", "state", "size",
	                                   "sha256",          "advisory",  "actor", "chunks",
	                                   "chunks_received", NULL};
	for (int i = 0; keys[i] != NULL; i++)
		printf("%-16s %s\n", keys[i], cell(b, keys[i], buf, sizeof buf));
	json_t *c = json_object_get(b, "created_ms");
	if (json_is_integer(c)) {
		ctl_format_time(json_integer_value(c), buf, sizeof buf);
		printf("%-16s %s\n", "created", buf);
	}
	if (json_is_true(json_object_get(b, "redacted")))
		printf("%-16s %s\n", "redacted", "yes: under embargo, outside its visibility list");
	printf("notes:\n%s\n", str(b, "notes") ? str(b, "notes") : "-");
}

static void build_row(const json_t *b, char buf[][96], const char **cells)
{
	const char *sha = str(b, "sha256"), *notes = str(b, "notes");
	snprintf(buf[4], sizeof buf[4], "%.12s", sha ? sha : "-");
	snprintf(buf[6], sizeof buf[6], "%.40s", notes ? notes : "");
	const char *row[] = {str(b, "version"),
	                     str(b, "component"),
	                     str(b, "state"),
	                     cell(b, "size", buf[3], sizeof buf[3]),
	                     buf[4],
	                     str(b, "advisory"),
	                     buf[6][0] ? buf[6] : NULL};
	memcpy(cells, row, sizeof row);
}

static void print_builds(const struct ctl *x, const json_t *doc)
{
	static const char *const headers[] = {"VERSION", "COMPONENT", "STATE", "SIZE",
	                                      "SHA256",  "ADVISORY",  "NOTES"};
	print_table(json_object_get(doc, "builds"), 7, headers, build_row);
}

static int cmd_build_list(struct ctl *x)
{
	return request(x, READ, "GET", "/v1/builds", NULL, print_builds, NULL);
}

static int cmd_build_show(struct ctl *x)
{
	return show_object(x, "/v1/builds/", print_build);
}

/* Downloads into FILE.tmp, checks size and sha256 against the build's metadata, renames. */
static int cmd_build_download(struct ctl *x)
{
	const char *version = x->args.operand[0], *out = x->args.out_file;
	struct ctl_response meta, r;
	char path[128], sha[SHA256_HEX_LEN + 1];
	snprintf(path, sizeof path, "/v1/builds/%s", version);
	int rc = call(x, "GET", path, NULL, NULL, &meta);
	if (rc != 0)
		return rc;
	const char *want = str(meta.json, "sha256");
	json_int_t size = json_integer_value(json_object_get(meta.json, "size"));
	if (want == NULL || size <= 0) {
		ctl_response_free(&meta);
		return fail(x, "build %s is under embargo and not visible to this token", version);
	}
	snprintf(sha, sizeof sha, "%s", want);
	ctl_response_free(&meta);
	x->client.max_response_bytes = (size_t)size + 1024;
	snprintf(path, sizeof path, "/v1/builds/%s/binary", version);
	if ((rc = call(x, "GET", path, NULL, NULL, &r)) != 0)
		return rc;
	char got[SHA256_HEX_LEN + 1];
	sha256_hex(r.body, r.body_len, got);
	if ((json_int_t)r.body_len != size || strcmp(got, sha) != 0) {
		ctl_response_free(&r);
		return fail(x, "build %s: got %zu bytes with sha256 %s, want %lld bytes with %s",
		            version, r.body_len, got, (long long)size, sha);
	}
	if (write_whole(out, r.body, r.body_len) != 0) {
		int e = errno;
		ctl_response_free(&r);
		return fail(x, "%s: %s", out, strerror(e));
	}
	printf("build %s: %zu bytes, sha256 %s verified, written to %s\n", version, r.body_len, sha,
	       out);
	ctl_response_free(&r);
	return 0;
}

static int cmd_build_delete(struct ctl *x)
{
	char path[128], said[160];
	snprintf(path, sizeof path, "/v1/builds/%s", x->args.operand[0]);
	snprintf(said, sizeof said, "unfinished build %s deleted", x->args.operand[0]);
	return request(x, WRITE, "DELETE", path, NULL, NULL, said);
}

/* ---- advisories ---- */

/* "security,alice" → {"roles": ["security"], "principals": ["alice"]} */
static json_t *visibility_of(const char *list)
{
	static const char *const role_names[] = {"admin",    "operator", "user",
	                                         "security", "agent",    NULL};
	json_t *v = json_pack("{s:[],s:[]}", "roles", "principals");
	char buf[1024];
	snprintf(buf, sizeof buf, "%s", list);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		int is_role = 0;
		for (int i = 0; role_names[i] != NULL; i++)
			is_role |= strcmp(tok, role_names[i]) == 0;
		json_array_append_new(json_object_get(v, is_role ? "roles" : "principals"),
		                      json_string(tok));
	}
	return v;
}

/* Prints the names in a JSON array of strings, comma-separated. */
static void print_names(const json_t *names)
{
	size_t i;
	json_t *n;
	json_array_foreach(names, i, n)
	{
		printf("%s%s", i ? ", " : "", json_is_string(n) ? json_string_value(n) : "?");
	}
}

/* An advisory's visibility list as people write it: "roles: operator; tokens: distro (and
 * the admin and security roles)", which always see it; every token once it is public. */
static void print_visibility(const json_t *a)
{
	const json_t *vis = json_object_get(a, "visibility");
	const json_t *roles = json_object_get(vis, "roles"),
		     *names = json_object_get(vis, "principals");
	const char *state = str(a, "state");
	printf("%-14s ", "visible to");
	if (state != NULL && strcmp(state, "public") == 0) {
		printf("every token (published)\n");
		return;
	}
	if (json_array_size(roles) > 0) {
		printf("roles: ");
		print_names(roles);
	}
	if (json_array_size(names) > 0) {
		printf("%stokens: ", json_array_size(roles) > 0 ? "; " : "");
		print_names(names);
	}
	printf("%s\n", json_array_size(roles) + json_array_size(names) == 0
	                   ? "the admin and security roles only"
	                   : " (and the admin and security roles)");
}

static void print_advisory(const struct ctl *x, const json_t *a)
{
	char buf[64];
	static const char *const keys[] = {"id",    "title", "cve", "severity",
	                                   "state", "actor", NULL};
	static const char *const times[] = {"embargo_start_ms", "embargo_until_ms", "published_ms",
	                                    NULL};
	for (int i = 0; keys[i] != NULL; i++)
		printf("%-14s %s\n", keys[i], str(a, keys[i]) ? str(a, keys[i]) : "-");
	for (int i = 0; times[i] != NULL; i++) {
		json_t *t = json_object_get(a, times[i]);
		if (json_is_integer(t)) {
			ctl_format_time(json_integer_value(t), buf, sizeof buf);
			printf("%-14.*s %s\n", (int)strlen(times[i]) - 3, times[i], buf);
		}
	}
	print_visibility(a);
	printf("text:\n%s\n", str(a, "text") ? str(a, "text") : "-");
	size_t i;
	json_t *e;
	if (json_array_size(json_object_get(a, "timeline")) > 0)
		printf("timeline:\n");
	json_array_foreach(json_object_get(a, "timeline"), i, e)
	{
		ctl_format_time(json_integer_value(json_object_get(e, "ts_ms")), buf, sizeof buf);
		printf("  %s  %-12s %s\n", buf, str(e, "actor") ? str(e, "actor") : "-",
		       str(e, "what") ? str(e, "what") : "-");
	}
}

/* Sends body (stolen) and prints the advisory the server answers with. */

/* Sends body (stolen) and prints the advisory the server answers with. */
static int advisory_write(struct ctl *x, const char *path, json_t *body)
{
	return request_json(x, "POST", path, body, print_advisory, NULL);
}

static int cmd_advisory_create(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	struct yard_err err = {0};
	char *file_text = NULL;
	if (a->text_file != NULL &&
	    (file_text = read_file(a->text_file, TEXT_FILE_MAX, &err)) == NULL)
		return fail(x, "--text-file %s", err.msg);
	json_t *body =
	    json_pack("{s:s,s:s,s:s,s:s}", "title", a->title, "severity", a->severity, "cve",
	              a->cve ? a->cve : "RESERVED", "text", file_text ? file_text : a->text);
	free(file_text);
	if (body == NULL)
		return fail(x, "the advisory text is not valid UTF-8");
	if (a->embargo_days > 0)
		json_object_set_new(body, "embargo_days", json_integer(a->embargo_days));
	if (a->visible_to != NULL)
		json_object_set_new(body, "visibility", visibility_of(a->visible_to));
	return advisory_write(x, "/v1/advisories", body);
}

static void advisory_row(const json_t *adv, char buf[][96], const char **cells)
{
	json_t *u = json_object_get(adv, "embargo_until_ms");
	snprintf(buf[4], sizeof buf[4], "-");
	if (json_is_integer(u))
		ctl_format_time(json_integer_value(u), buf[4], sizeof buf[4]);
	const char *row[] = {
	    str(adv, "id"), str(adv, "state"), str(adv, "severity"), str(adv, "cve"),
	    buf[4],         str(adv, "title")};
	memcpy(cells, row, sizeof row);
}

static void print_advisories(const struct ctl *x, const json_t *doc)
{
	static const char *const headers[] = {"ID",  "STATE",         "SEVERITY",
	                                      "CVE", "EMBARGO_UNTIL", "TITLE"};
	print_table(json_object_get(doc, "advisories"), 6, headers, advisory_row);
}

static int cmd_advisory_list(struct ctl *x)
{
	return request(x, READ, "GET", "/v1/advisories", NULL, print_advisories, NULL);
}

static int cmd_advisory_show(struct ctl *x)
{
	return show_object(x, "/v1/advisories/", print_advisory);
}

static int cmd_advisory_change(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	char path[128];
	const char *verb = a->command == CTL_ADVISORY_EMBARGO ? "embargo"
	                   : a->command == CTL_ADVISORY_SHARE ? "share"
	                                                      : "publish";
	snprintf(path, sizeof path, "/v1/advisories/%s/%s", a->operand[0], verb);
	json_t *body = json_object();
	if (a->command == CTL_ADVISORY_EMBARGO)
		json_object_set_new(body, "embargo_days", json_integer(a->embargo_days));
	if (a->command == CTL_ADVISORY_SHARE) {
		json_t *vis = visibility_of(a->visible_to);
		json_object_update(body, vis);
		json_decref(vis);
	}
	return advisory_write(x, path, body);
}

/* ---- audit, event chain ---- */

static int cmd_audit(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	char path[256] = "/v1/audit";
	if (a->reads)
		add_query(path, sizeof path, "reads", "1");
	return events_page(x, path);
}

static int cmd_events_verify(struct ctl *x)
{
	struct ctl_response r;
	int rc = call(x, "GET", "/v1/events/verify", NULL, NULL, &r);
	if (rc != 0)
		return rc; /* a broken chain is a 409 naming the first bad event */
	if (x->args.output == CTL_OUTPUT_JSON)
		print_json(&r);
	else
		printf("event chain verified by %s\n", r.endpoint);
	ctl_response_free(&r);
	return 0;
}

/* ---- rollouts ---- */

static int cmd_rollout_start(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	struct ctl_response r;
	json_t *body = json_pack("{s:s}", "build", a->build);
	if (a->waves != NULL)
		json_object_set_new(body, "waves", json_string(a->waves));
	if (a->selector != NULL)
		json_object_set_new(body, "selector", json_string(a->selector));
	if (a->policy != NULL)
		json_object_set_new(body, "policy", json_string(a->policy));
	if (a->soak_s >= 0)
		json_object_set_new(body, "soak_s", json_real(a->soak_s));
	if (a->gate_timeout_s >= 0)
		json_object_set_new(body, "gate_timeout_s", json_real(a->gate_timeout_s));
	if (a->failure_budget >= 0)
		json_object_set_new(body, "failure_budget", json_integer(a->failure_budget));
	if (a->step_regression_pct >= 0)
		json_object_set_new(body, "step_time_regression_pct",
		                    json_integer(a->step_regression_pct));
	char *text = json_dumps(body, JSON_COMPACT);
	int rc = write_call(x, "POST", "/v1/rollouts", text, &r);
	free(text);
	json_decref(body);
	if (rc != 0)
		return rc;
	if (a->output == CTL_OUTPUT_JSON) {
		print_json(&r);
	} else {
		printf("rollout %s of build %s started: %zu node(s) in %zu wave(s)\n",
		       str(r.json, "id"), str(r.json, "build"),
		       json_object_size(json_object_get(r.json, "nodes")),
		       json_array_size(json_object_get(r.json, "waves")));
		printf("follow it with: yardctl rollout status %s -w\n", str(r.json, "id"));
	}
	ctl_response_free(&r);
	return 0;
}

static int rollout_terminal(const char *state)
{
	return state && (strcmp(state, "completed") == 0 || strcmp(state, "aborted") == 0 ||
	                 strcmp(state, "rolled-back") == 0);
}

/* "node-2 upgrading (running 0.1.0, upgrade self-test)" for one target; a worker rollout's
 * also says the worker the node runs. */
static void rollout_node_cell(const char *id, const json_t *n, int worker, char *out, size_t len)
{
	const json_t *live = json_object_get(n, "live");
	const char *state = str(n, "state"), *version = str(n, "version");
	const char *error = str(n, "error");
	int k = snprintf(out, len, "%s %s", id, state ? state : "?");
	if (version && version[0] && k >= 0 && (size_t)k < len)
		k += snprintf(out + k, len - (size_t)k, " %s", version);
	if (json_is_object(live) && k >= 0 && (size_t)k < len)
		k += snprintf(out + k, len - (size_t)k, " (running %s%s%s%s%s)",
		              str(live, "version"), worker ? ", worker " : "",
		              worker ? str(live, "worker_version") : "",
		              str(live, "upgrade") ? ", upgrade " : "",
		              str(live, "upgrade") ? str(live, "upgrade") : "");
	if (error && error[0] && k >= 0 && (size_t)k < len)
		snprintf(out + k, len - (size_t)k, ": %s", error);
}

static void print_rollout(const json_t *ro)
{
	static const char *const headers[] = {"WAVE", "TARGET", "STATE", "NODES"};
	const json_t *spec = json_object_get(ro, "spec");
	const json_t *waves = json_object_get(ro, "waves");
	const json_t *nodes = json_object_get(ro, "nodes");
	json_int_t wave = json_integer_value(json_object_get(ro, "wave"));
	const char *state = str(ro, "state"), *phase = str(ro, "phase");
	char created[64];
	ctl_format_time(json_integer_value(json_object_get(ro, "created_ms")), created,
	                sizeof created);
	int worker = str(spec, "component") && strcmp(str(spec, "component"), "worker") == 0;
	printf("rollout %s  %s build %s  state %s", str(ro, "id"),
	       str(spec, "component") ? str(spec, "component") : "agent", str(ro, "build"), state);
	if (phase && phase[0])
		printf("  wave %lld/%zu (%s)", (long long)wave + 1, json_array_size(waves), phase);
	printf("\n");
	printf("created %s by %s; policy %s, soak %lld s, gate %lld s, failures %lld of budget "
	       "%lld\n",
	       created, str(ro, "actor"), str(spec, "policy"),
	       (long long)json_integer_value(json_object_get(spec, "soak_ms")) / 1000,
	       (long long)json_integer_value(json_object_get(spec, "gate_timeout_ms")) / 1000,
	       (long long)json_integer_value(json_object_get(ro, "failures")),
	       (long long)json_integer_value(json_object_get(spec, "failure_budget")));
	struct ctl_table t;
	size_t i, k;
	json_t *w, *id;
	ctl_table_init(&t, 4, headers);
	json_array_foreach(waves, i, w)
	{
		char num[16], cells[2048] = "";
		size_t n = 0;
		snprintf(num, sizeof num, "%zu", i + 1);
		json_array_foreach(json_object_get(w, "nodes"), k, id)
		{
			char one[600];
			rollout_node_cell(json_string_value(id),
			                  json_object_get(nodes, json_string_value(id)), worker,
			                  one, sizeof one);
			if (n < sizeof cells)
				n += (size_t)snprintf(cells + n, sizeof cells - n, "%s%s",
				                      k ? "; " : "", one);
		}
		const char *row[] = {num, str(w, "target"), str(w, "state"), cells};
		ctl_table_add(&t, row);
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
	if (str(ro, "reason") != NULL)
		printf("reason: %s\n", str(ro, "reason"));
}

static int cmd_rollout_status(struct ctl *x)
{
	const struct ctl_args *a = &x->args;
	char path[128], last[8192] = "";
	int transport_failures = 0;
	uint64_t start = yard_now_mono_ms();
	uint64_t deadline = a->timeout_s > 0 ? start + (uint64_t)(a->timeout_s * 1000) : 0;
	snprintf(path, sizeof path, "/v1/rollouts/%s", a->operand[0]);
	for (;;) {
		struct ctl_response r;
		int got = poll_get(x, path, a->watch, &transport_failures, &r);
		if (got < 0)
			return EXIT_FAILURE;
		if (got == 0) {
			const char *state = str(r.json, "state");
			int done = rollout_terminal(state);
			if (a->output == CTL_OUTPUT_JSON) {
				if (!a->watch || done)
					print_json(&r);
			} else {
				/* -w prints the view again whenever it changes */
				json_t *copy = json_deep_copy(r.json);
				json_t *nodes = json_object_get(copy, "nodes");
				const char *k;
				json_t *n;
				json_object_foreach(nodes, k, n)
				{
					json_object_del(json_object_get(n, "live"),
					                "last_heartbeat_ms_ago");
				}
				char *now = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
				json_decref(copy);
				if (now != NULL && strncmp(now, last, sizeof last - 1) != 0) {
					if (a->watch && last[0] != '\0')
						printf("\n");
					print_rollout(r.json);
					fflush(stdout);
					snprintf(last, sizeof last, "%s", now);
				}
				free(now);
			}
			int ok = state && strcmp(state, "completed") == 0;
			char ended[32];
			snprintf(ended, sizeof ended, "%s", state ? state : "?");
			ctl_response_free(&r); /* state pointed into it */
			if (!a->watch)
				return 0;
			if (done)
				return ok ? 0
				          : fail(x, "rollout %s ended %s", a->operand[0], ended);
		}
		uint64_t now = yard_now_mono_ms();
		if (deadline && now >= deadline)
			return fail(x, "timed out after %g s; rollout %s has not ended",
			            a->timeout_s, a->operand[0]);
		yard_sleep_ms(deadline ? YARD_MIN((uint64_t)WAIT_POLL_MS, deadline - now)
		                       : WAIT_POLL_MS);
	}
}

static void rollout_row(const json_t *ro, char buf[][96], const char **cells)
{
	snprintf(buf[3], sizeof buf[3], "%lld/%zu %s",
	         (long long)json_integer_value(json_object_get(ro, "wave")) + 1,
	         json_array_size(json_object_get(ro, "waves")), str(ro, "phase"));
	snprintf(buf[4], sizeof buf[4], "%zu", json_object_size(json_object_get(ro, "nodes")));
	ctl_format_time(json_integer_value(json_object_get(ro, "created_ms")), buf[6],
	                sizeof buf[6]);
	const char *row[] = {
	    str(ro, "id"), str(ro, "build"), str(ro, "state"),
	    buf[3],        buf[4],           cell(ro, "failures", buf[5], sizeof buf[5]),
	    buf[6]};
	memcpy(cells, row, sizeof row);
}

static void print_rollouts(const struct ctl *x, const json_t *doc)
{
	static const char *const headers[] = {"ID",    "BUILD",    "STATE",  "WAVE",
	                                      "NODES", "FAILURES", "CREATED"};
	print_table(json_object_get(doc, "rollouts"), 7, headers, rollout_row);
}

static int cmd_rollout_list(struct ctl *x)
{
	return request(x, READ, "GET", "/v1/rollouts", NULL, print_rollouts, NULL);
}

static void show_rollout_state(const struct ctl *x, const json_t *doc)
{
	printf("rollout %s: %s\n", x->args.operand[0], str(doc, "state") ? str(doc, "state") : "?");
}

static int cmd_rollout_control(struct ctl *x, const char *action)
{
	char path[160];
	snprintf(path, sizeof path, "/v1/rollouts/%s/%s", x->args.operand[0], action);
	return request(x, WRITE, "POST", path, "{}", show_rollout_state, NULL);
}

/* The message, then what of the usage concerns it: the entries of the command's group
 * (not all 80 lines, which scroll the message away), the list of commands with the global
 * flags when the command is unknown or the problem is global (argc 0: endpoints, token),
 * the whole text when nothing was given (argc 1). */
static int usage_error(const char *msg, int argc, char **argv)
{
	const char *word = argc > 1 ? ctl_args_command_word(argc, argv) : NULL;
	fprintf(stderr, "yardctl: %s\n\n", msg);
	if (argc == 1)
		fputs(ctl_usage(), stderr);
	else
		ctl_usage_part(stderr, ctl_group_known(word) ? word : NULL);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	static struct ctl x;
	struct yard_err err = {0};
	const char *endpoints, *token, *cacert, *cert, *key;
	int rc;

	yard_log_init("yardctl");
	if (ctl_args_parse(argc, argv, &x.args, &err) != 0)
		return usage_error(err.msg, argc, argv);
	if (x.args.command == CTL_HELP) {
		fputs(ctl_usage(), stdout);
		return 0;
	}
	if (x.args.verbose)
		yard_log_set_level(YARD_LOG_DEBUG);
	/* A bad job file is reported before anything about the cluster is needed. */
	if (x.args.command == CTL_JOB_SUBMIT || x.args.command == CTL_PLAN) {
		struct jobspec spec;
		if (jobspec_load_file(x.args.operand[0], &spec, &err) != 0)
			return fail(&x, "%s", err.msg);
		jobspec_free(&spec);
	}
	endpoints = x.args.endpoints ? x.args.endpoints : getenv("YARD_ENDPOINTS");
	token = x.args.token ? x.args.token : getenv("YARD_TOKEN");
	if (endpoints == NULL || endpoints[0] == '\0')
		return usage_error(
		    "no endpoints: set YARD_ENDPOINTS or pass --endpoints URL[,URL...]", 0, argv);
	if (token == NULL || token[0] == '\0')
		return usage_error("no token: set YARD_TOKEN or pass --token TOKEN", 0, argv);
	if (ctl_client_init(&x.client, endpoints, token, &err) != 0) {
		ctl_client_close(&x.client);
		return usage_error(err.msg, 0, argv);
	}
	cacert = x.args.cacert ? x.args.cacert : getenv("YARD_CACERT");
	if (cacert != NULL && cacert[0] != '\0' &&
	    ctl_client_set_ca_file(&x.client, cacert, &err) != 0) {
		ctl_client_close(&x.client);
		return usage_error(err.msg, 0, argv);
	}
	cert = x.args.cert ? x.args.cert : getenv("YARD_CERT");
	key = x.args.key ? x.args.key : getenv("YARD_KEY");
	if (((cert != NULL && cert[0] != '\0') || (key != NULL && key[0] != '\0')) &&
	    ctl_client_set_cert(&x.client, cert && cert[0] ? cert : NULL,
	                        key && key[0] ? key : NULL, &err) != 0) {
		ctl_client_close(&x.client);
		return usage_error(err.msg, 0, argv);
	}
	if (x.args.retries >= 0)
		x.client.retry_rounds = x.args.retries;

	switch (x.args.command) {
	case CTL_CLUSTER_STATUS:
		rc = cmd_cluster_status(&x);
		break;
	case CTL_CLUSTER_MEMBERS:
		rc = cmd_cluster_members(&x);
		break;
	case CTL_CLUSTER_ADD:
		rc = cmd_cluster_add(&x);
		break;
	case CTL_CLUSTER_REMOVE:
		rc = cmd_cluster_remove(&x);
		break;
	case CTL_CLUSTER_TRANSFER:
		rc = cmd_cluster_transfer(&x);
		break;
	case CTL_CLUSTER_BACKUP:
		rc = cmd_cluster_backup(&x);
		break;
	case CTL_JOB_SUBMIT:
		rc = cmd_job_submit(&x);
		break;
	case CTL_JOB_LIST:
		rc = cmd_job_list(&x);
		break;
	case CTL_JOB_SHOW:
		rc = cmd_job_show(&x);
		break;
	case CTL_JOB_CANCEL:
		rc = cmd_job_cancel(&x);
		break;
	case CTL_JOB_CHECKPOINT:
		rc = cmd_job_checkpoint(&x);
		break;
	case CTL_JOB_DELETE:
		rc = cmd_job_delete(&x);
		break;
	case CTL_JOB_WAIT:
	case CTL_JOB_WATCH:
		rc = cmd_job_wait(&x);
		break;
	case CTL_JOB_LOGS:
		rc = cmd_job_logs(&x);
		break;
	case CTL_JOB_TIMELINE:
		rc = cmd_job_timeline(&x);
		break;
	case CTL_NODE_LIST:
		rc = cmd_node_list(&x);
		break;
	case CTL_NODE_SHOW:
		rc = cmd_node_show(&x);
		break;
	case CTL_NODE_CORDON:
	case CTL_NODE_UNCORDON:
	case CTL_NODE_DRAIN:
	case CTL_NODE_PROBE:
		rc = cmd_node_change(&x);
		break;
	case CTL_EVENTS:
		rc = cmd_events(&x);
		break;
	case CTL_TOKEN_CREATE:
		rc = cmd_token_create(&x);
		break;
	case CTL_TOKEN_LIST:
		rc = cmd_token_list(&x);
		break;
	case CTL_TOKEN_REVOKE:
		rc = cmd_token_revoke(&x);
		break;
	case CTL_EVENTS_VERIFY:
		rc = cmd_events_verify(&x);
		break;
	case CTL_BUILD_UPLOAD:
		rc = cmd_build_upload(&x);
		break;
	case CTL_BUILD_LIST:
		rc = cmd_build_list(&x);
		break;
	case CTL_BUILD_SHOW:
		rc = cmd_build_show(&x);
		break;
	case CTL_BUILD_DOWNLOAD:
		rc = cmd_build_download(&x);
		break;
	case CTL_BUILD_DELETE:
		rc = cmd_build_delete(&x);
		break;
	case CTL_ADVISORY_CREATE:
		rc = cmd_advisory_create(&x);
		break;
	case CTL_ADVISORY_LIST:
		rc = cmd_advisory_list(&x);
		break;
	case CTL_ADVISORY_SHOW:
		rc = cmd_advisory_show(&x);
		break;
	case CTL_ADVISORY_EMBARGO:
	case CTL_ADVISORY_SHARE:
	case CTL_ADVISORY_PUBLISH:
		rc = cmd_advisory_change(&x);
		break;
	case CTL_AUDIT:
		rc = cmd_audit(&x);
		break;
	case CTL_ROLLOUT_START:
		rc = cmd_rollout_start(&x);
		break;
	case CTL_ROLLOUT_STATUS:
		rc = cmd_rollout_status(&x);
		break;
	case CTL_ROLLOUT_LIST:
		rc = cmd_rollout_list(&x);
		break;
	case CTL_ROLLOUT_PAUSE:
		rc = cmd_rollout_control(&x, "pause");
		break;
	case CTL_ROLLOUT_RESUME:
		rc = cmd_rollout_control(&x, "resume");
		break;
	case CTL_ROLLOUT_ABORT:
		rc = cmd_rollout_control(&x, "abort");
		break;
	case CTL_ROLLOUT_ROLLBACK:
		rc = cmd_rollout_control(&x, "rollback");
		break;
	case CTL_PLAN:
		rc = cmd_plan(&x);
		break;
	default:
		rc = usage_error("unhandled command", 0, argv);
	}
	ctl_client_close(&x.client);
	fflush(stdout);
	if (ferror(stdout)) {
		fprintf(stderr, "yardctl: error writing output\n");
		return EXIT_FAILURE;
	}
	return rc;
}
