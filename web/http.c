/* http.c: the HTTP server: h2o on the controller's loop, the per-request gate (route,
 * authentication, authorisation, leader routing: see http.h), JSON responses with a guard
 * against late callbacks, and Prometheus metrics. The routes themselves are in api.c. */
#include <malloc.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/clock.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "jobs/sha256.h"
#include "web/internal.h"

/* ---- responses ---- */

static void call_free(struct call *call)
{
	if (call->guard != NULL)
		call->guard->call = NULL;
	json_decref(call->audited_json);
	free(call->audited_bytes);
	free(call);
}

static void metrics_note(struct http_server *s, int route_index, int status, uint64_t start_ns)
{
	struct route_metrics *m = &s->metrics[route_index < 0 ? api_routes_count : route_index];
	double ms = (double)(yard_now_mono_ns() - start_ns) / 1e6;
	if (status >= 100 && status < 600) {
		m->by_code[status / 100]++;
		m->codes[status]++;
	}
	yard_hist_note(&m->latency, ms);
}

/* The status line's reason phrase (RFC 9110's for the codes this server sends). */
static const char *reason_of(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 202:
		return "Accepted";
	case 307:
		return "Temporary Redirect";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 409:
		return "Conflict";
	case 413:
		return "Content Too Large";
	case 429:
		return "Too Many Requests";
	case 500:
		return "Internal Server Error";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	default:
		return status < 300 ? "OK" : status < 400 ? "Redirect" : "Error";
	}
}

/* The answer's status line and headers (the request is there). */
static void answer_head(struct call *call, int status, const char *content_type, size_t len)
{
	h2o_req_t *req = call->req;
	req->res.status = status;
	req->res.reason = reason_of(status);
	req->res.content_length = len;
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type,
	               strlen(content_type));
	if (status == 405 && call->allow[0] != '\0')
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, call->allow,
		               strlen(call->allow));
}

static void send_body(struct call *call, int status, const char *content_type, const char *body,
                      size_t len)
{
	metrics_note(call->s, call->route_index, status, call->start_ns);
	if (call->req == NULL) { /* the client went away; nothing to answer */
		call_free(call);
		return;
	}
	answer_head(call, status, content_type, len);
	h2o_send_inline(call->req, body, len);
	call_free(call);
}

static void text_dispose(void *slot)
{
	free(*(char **)slot);
}

/* Like send_body, but the answer is text itself, handed to h2o and freed with the request's
 * pool instead of copied into it: a heartbeat answer that carries a large job's peers (a
 * megabyte a node at 8,000 ranks) was copied into fresh pages for every node. */
void call_text(struct call *call, int status, const char *content_type, char *text, size_t len)
{
	static h2o_generator_t generator = {NULL, NULL};
	h2o_req_t *req = call->req;
	char **slot =
	    req != NULL ? h2o_mem_alloc_shared(&req->pool, sizeof *slot, text_dispose) : NULL;
	if (slot == NULL) {
		send_body(call, status, content_type, text, len);
		free(text);
		return;
	}
	*slot = text;
	metrics_note(call->s, call->route_index, status, call->start_ns);
	answer_head(call, status, content_type, len);
	h2o_iovec_t buf = h2o_iovec_init(text, len);
	h2o_start_response(req, &generator);
	if (h2o_memis(req->input.method.base, req->input.method.len, H2O_STRLIT("HEAD")))
		h2o_send(req, NULL, 0, H2O_SEND_STATE_FINAL);
	else
		h2o_send(req, &buf, 1, H2O_SEND_STATE_FINAL);
	call_free(call);
}

void call_json(struct call *call, int status, json_t *body)
{
	size_t len;
	char *text = jsonx_dumps_compact(body, 0, &len);
	json_decref(body);
	if (text == NULL) {
		send_body(call, 500, "application/json",
		          "{\"error\":\"cannot encode the response\"}", 39);
		return;
	}
	call_text(call, status, "application/json", text, len);
}

void call_error(struct call *call, int status, const char *field, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* a message quotes what the client sent, and the cut at sizeof msg can split a
	 * character: neither may leave an error without its answer */
	jsonx_utf8_sanitize(msg);
	json_t *body = json_pack("{s:s}", "error", msg);
	if (field != NULL && field[0] != '\0')
		json_object_set_new(body, "field", json_string(field));
	call_json(call, status, body);
}

int http_status_of(int code)
{
	switch (code) {
	case YARD_EINVAL:
		return 400;
	case YARD_EPERM:
		return 403;
	case YARD_ENOTFOUND:
		return 404;
	case YARD_EEXIST:
	case YARD_EBUSY:
		return 409;
	case YARD_ETIMEDOUT:
		return 504;
	case YARD_ENOTLEADER:
	case YARD_EUNKNOWN:
	case YARD_ENOSPACE:
	case YARD_EABORTED:
		return 503;
	default:
		return 500;
	}
}

void call_yard_error(struct call *call, const struct yard_err *err)
{
	char field[128];
	fsm_err_field(err, field, sizeof field);
	call_error(call, http_status_of(err->code), field, "%s", err->msg);
}

/* ---- request parsing ---- */

json_t *call_body_object(struct call *call)
{
	struct yard_err err = {0};
	h2o_iovec_t e = call->req->entity;
	json_t *v = jsonx_parse(e.base ? e.base : "", e.len, HTTP_MAX_BODY, HTTP_MAX_DEPTH, &err);
	if (v == NULL) {
		call_error(call, e.len > HTTP_MAX_BODY ? 413 : 400, NULL, "%s", err.msg);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		call_error(call, 400, NULL, "body must be a JSON object");
		return NULL;
	}
	return v;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int call_query(struct call *call, const char *key, char *out, size_t out_len)
{
	h2o_req_t *req = call->req;
	if (req->query_at == SIZE_MAX)
		return -1;
	const char *p = req->path.base + req->query_at + 1, *end = req->path.base + req->path.len;
	size_t klen = strlen(key);
	while (p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *stop = amp ? amp : end;
		const char *eq = memchr(p, '=', (size_t)(stop - p));
		const char *kend = eq ? eq : stop;
		if ((size_t)(kend - p) == klen && memcmp(p, key, klen) == 0) {
			size_t n = 0;
			for (const char *v = eq ? eq + 1 : stop; v < stop && n + 1 < out_len; v++) {
				if (*v == '%' && v + 2 < stop && hexval(v[1]) >= 0 &&
				    hexval(v[2]) >= 0) {
					out[n++] = (char)(hexval(v[1]) * 16 + hexval(v[2]));
					v += 2;
				} else {
					out[n++] = *v == '+' ? ' ' : *v;
				}
			}
			out[n] = '\0';
			return 0;
		}
		p = stop + 1;
	}
	return -1;
}

/* 1 when the space-separated words of list hold key (len bytes). */
static int word_listed(const char *list, const char *key, size_t len)
{
	while (list != NULL && *list != '\0') {
		size_t n = strcspn(list, " ");
		if (n == len && memcmp(list, key, len) == 0)
			return 1;
		list += n;
		list += strspn(list, " ");
	}
	return 0;
}

/* The query parameter that starts at p (before end): the length of its key; *stop: where
 * it ends (its '&' or end). */
static size_t param_key(const char *p, const char *end, const char **stop)
{
	const char *amp = memchr(p, '&', (size_t)(end - p));
	*stop = amp ? amp : end;
	const char *eq = memchr(p, '=', (size_t)(*stop - p));
	return (size_t)((eq ? eq : *stop) - p);
}

/* Refuses, with a 400 naming it, a query parameter the route does not take or one given
 * twice (struct route's query). -1: answered. */
static int query_check(struct call *call)
{
	h2o_req_t *req = call->req;
	const char *takes = call->route->query;
	if (req->query_at == SIZE_MAX || (takes != NULL && strcmp(takes, "*") == 0))
		return 0;
	int get = strcmp(call->route->method, "GET") == 0;
	char list[160];
	snprintf(list, sizeof list, "%s%s%s", takes ? takes : "", takes && get ? " " : "",
	         get ? "stale" : "");
	const char *start = req->path.base + req->query_at + 1;
	const char *end = req->path.base + req->path.len;
	for (const char *p = start, *stop; p < end; p = stop + 1) {
		size_t len = param_key(p, end, &stop);
		if (len == 0)
			continue; /* "?&limit=1", "?=x": nothing named */
		char key[72];
		size_t k = 0;
		for (; k < len && k + 1 < sizeof key; k++) /* quoted, in plain ASCII */
			key[k] = p[k] > ' ' && p[k] < 127 ? p[k] : '?';
		key[k] = '\0';
		if (!word_listed(list, p, len)) {
			call_error(call, 400, key, "unknown query parameter '%s' (%s %s takes %s)",
			           key, call->route->method, call->route->pattern,
			           list[0] != '\0' ? list : "none");
			return -1;
		}
		/* given twice: which one counts would be a guess */
		for (const char *q = start, *qstop; q < p; q = qstop + 1)
			if (param_key(q, p, &qstop) == len && memcmp(q, p, len) == 0) {
				call_error(call, 400, key, "query parameter '%s' is given twice",
				           key);
				return -1;
			}
	}
	return 0;
}

/* Refuses, with a 400, a body sent to a route that takes none (BODY_NONE):
 * nothing, whitespace or an empty object pass, since clients send {} to say "no arguments";
 * an object's first field is named as an unknown one. -1: answered. */
static int body_check(struct call *call)
{
	h2o_iovec_t e = call->req->entity;
	size_t i = 0;
	if (call->route->body != BODY_NONE)
		return 0;
	while (i < e.len &&
	       (e.base[i] == ' ' || e.base[i] == '\t' || e.base[i] == '\r' || e.base[i] == '\n'))
		i++;
	if (i == e.len)
		return 0;
	json_t *v = call_body_object(call);
	if (v == NULL)
		return -1;
	const char *key = json_object_iter_key(json_object_iter(v));
	if (key == NULL) {
		json_decref(v);
		return 0;
	}
	char quoted[72];
	size_t k = 0;
	for (; key[k] != '\0' && k + 1 < sizeof quoted; k++) /* quoted, in plain ASCII */
		quoted[k] = key[k] > ' ' && key[k] < 127 ? key[k] : '?';
	quoted[k] = '\0';
	call_error(call, 400, quoted, "%s: unknown field (%s %s takes no body, or {})", quoted,
	           call->route->method, call->route->pattern);
	json_decref(v);
	return -1;
}

int call_query_int(struct call *call, const char *key, int64_t min, int64_t max, int64_t *out)
{
	char buf[32], *end;
	if (call_query(call, key, buf, sizeof buf) != 0)
		return 0;
	long long v = strtoll(buf, &end, 10);
	if (buf[0] == '\0' || *end != '\0' || v < min || v > max) {
		call_error(call, 400, key, "%s: '%s' must be an integer in [%lld, %lld]", key, buf,
		           (long long)min, (long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

int call_query_flag(struct call *call, const char *key, int *out)
{
	char buf[16]; /* longer values are cut, and then match no word */
	if (call_query(call, key, buf, sizeof buf) != 0)
		return 0;
	if (strcmp(buf, "1") == 0 || strcmp(buf, "true") == 0 || buf[0] == '\0') {
		*out = 1;
	} else if (strcmp(buf, "0") == 0 || strcmp(buf, "false") == 0) {
		*out = 0;
	} else {
		call_error(call, 400, key, "%s: '%s' must be 1 or true, 0 or false", key, buf);
		return -1;
	}
	return 0;
}

/* ---- replication plumbing ---- */

struct submit_ctx {
	struct call *call;
	void (*on_result)(struct call *call, const json_t *result);
};

void call_answer_result(struct call *call, const json_t *result)
{
	int status = (int)json_integer_value(json_object_get(result, "status"));
	const char *error = json_string_value(json_object_get(result, "error"));
	if (error != NULL) {
		call_error(call, status ? status : 500,
		           json_string_value(json_object_get(result, "field")), "%s", error);
		return;
	}
	json_t *body = json_object_get(result, "body");
	call_json(call, status ? status : 200, json_incref(body ? body : json_object()));
}

/* Tells the scheduler how a submission it follows ended (sched_submit_done), once. */
static void sched_follow_done(struct call *call, int status, const json_t *result)
{
	if (call->sched_token != 0 && call->s->sched != NULL)
		sched_submit_done(call->s->sched, call->sched_token, status, result);
	call->sched_token = 0;
}

static void submit_done(void *data, int status, const void *result)
{
	struct submit_ctx *ctx = data;
	struct call *call = ctx->call;
	void (*on_result)(struct call *, const json_t *) = ctx->on_result;
	free(ctx);
	sched_follow_done(call, status, result);
	if (status != 0) {
		struct yard_err err = {0};
		yard_err_set(&err, status, "%s",
		             status == YARD_EUNKNOWN     ? "leadership changed before the write "
		                                           "committed: outcome unknown, retry with "
		                                           "the same X-Request-Id"
		             : status == YARD_ENOTLEADER ? "not the leader (leadership changed)"
		                                         : yard_strerror(status));
		call_yard_error(call, &err);
		return;
	}
	on_result(call, result);
}

void call_submit(struct call *call, const char *op, json_t *args,
                 void (*on_result)(struct call *call, const json_t *result))
{
	struct yard_err err = {0};
	size_t len = 0;
	char *cmd = fsm_command_encode_own(call->s->fsm, op, args,
	                                   call->request_id[0] ? call->request_id : NULL,
	                                   yard_now_wall_ms(), call->actor, call->role, &len);
	if (cmd == NULL) {
		sched_follow_done(call, YARD_EINVAL, NULL);
		call_error(call, 500, NULL, "cannot encode command %s", op);
		return;
	}
	struct submit_ctx *ctx = malloc(sizeof *ctx);
	ctx->call = call;
	ctx->on_result = on_result;
	int rc = consensus_submit(call->s->cons, cmd, len, submit_done, ctx, &err);
	if (rc != 0)
		fsm_command_unsent(call->s->fsm, cmd, len);
	free(cmd);
	if (rc != 0) {
		free(ctx);
		sched_follow_done(call, err.code ? err.code : YARD_EINVAL, NULL);
		call_yard_error(call, &err);
	}
}

static void barrier_done(void *data, int status, const char *msg)
{
	struct call *call = data;
	if (status != 0) {
		call_error(call, 503, NULL, "linearizable read failed: %s; retry or use ?stale=1",
		           msg);
		return;
	}
	if (call->req == NULL) {
		metrics_note(call->s, call->route_index, 499, call->start_ns);
		call_free(call);
		return;
	}
	call->route->fn(call);
}

/* ---- the gate ---- */

static int segment_match(const char *pattern, const char *path, size_t path_len, char params[4][72])
{
	size_t pi = 0, si = 0;
	int np = 0;
	size_t plen = strlen(pattern);
	while (pi < plen && si < path_len) {
		if (pattern[pi] == '*') {
			size_t start = si;
			while (si < path_len && path[si] != '/')
				si++;
			if (si == start || si - start >= 72 || np >= 4)
				return 0;
			memcpy(params[np], path + start, si - start);
			params[np][si - start] = '\0';
			np++;
			pi++;
			continue;
		}
		if (pattern[pi] != path[si])
			return 0;
		pi++, si++;
	}
	return pi == plen && si == path_len;
}

static int path_segment_ok(const char *seg)
{
	for (const char *p = seg; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return 0;
	return jsonx_utf8_valid(seg, strlen(seg));
}

static void guard_dispose(void *p)
{
	struct call_guard *g = p;
	if (g->call != NULL)
		g->call->req = NULL;
}

static int route_to_leader(struct call *call);

static int authenticate(struct call *call)
{
	h2o_req_t *req = call->req;
	ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
	if (i < 0) {
		call_error(call, 401, NULL, "missing Authorization: Bearer <token>");
		return -1;
	}
	h2o_iovec_t v = req->headers.entries[i].value;
	if (v.len < 8 || strncasecmp(v.base, "Bearer ", 7) != 0 || v.len - 7 > 256) {
		call_error(call, 401, NULL, "Authorization must be 'Bearer <token>'");
		return -1;
	}
	char hash[SHA256_HEX_LEN + 1];
	sha256_hex(v.base + 7, v.len - 7, hash);
	struct yard_err err = {0};
	if (fsm_auth_lookup(call->s->fsm, hash, yard_now_wall_ms(), call->role, call->actor,
	                    &err) == 0)
		return 0;
	if (err.code == YARD_EPERM) { /* an expired token: says which, and since when */
		call_error(call, 401, NULL, "%s", err.msg);
		return -1;
	}
	/* Only the ready leader's state holds every committed token: a member that has just
	 * started (it applies its log once a leader tells it the commit index), a follower behind,
	 * or a leader before its barrier may not know a token yet. They send the caller to the
	 * leader (307), or ask it to retry (503), rather than refuse a valid token: an agent
	 * told 401 registers again. */
	if (!consensus_is_ready(call->s->cons) && route_to_leader(call) != 0)
		return -1;
	call_error(call, 401, NULL, "unknown or revoked token");
	return -1;
}

static unsigned role_bit(const char *role)
{
	static const char *const names[] = {"admin",    "operator", "user",
	                                    "security", "agent",    "node"};
	for (unsigned i = 0; i < 6; i++)
		if (strcmp(role, names[i]) == 0)
			return 1u << i;
	return 0;
}

/* Writes and strong reads need the ready leader; elsewhere answer 307 or 503. */
static int route_to_leader(struct call *call)
{
	struct consensus *c = call->s->cons;
	if (consensus_is_ready(c))
		return 0;
	uint64_t leader = 0;
	char url[256];
	consensus_leader(c, &leader, NULL);
	if (leader != 0 && leader != c->cfg.id &&
	    fsm_member_api_url(call->s->fsm, leader, url, sizeof url) == 0) {
		h2o_req_t *req = call->req;
		char *location = h2o_mem_alloc_pool(&req->pool, strlen(url) + req->path.len + 1);
		memcpy(location, url, strlen(url));
		memcpy(location + strlen(url), req->path.base, req->path.len);
		location[strlen(url) + req->path.len] = '\0';
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_LOCATION, NULL, location,
		               strlen(location));
		call_json(call, 307,
		          json_pack("{s:s,s:I,s:s}", "error", "not the leader", "leader_id",
		                    (json_int_t)leader, "leader_url", url));
		return -1;
	}
	if (leader == c->cfg.id)
		call_error(call, 503, NULL, "leader elected but not ready yet; retry");
	else
		call_error(
		    call, 503, NULL,
		    "no leader known for %.1f s (member %llu is a %s in term %llu; a majority "
		    "of the voters must answer to elect one); retry shortly",
		    (double)consensus_leaderless_ms(c) / 1000, (unsigned long long)c->cfg.id,
		    consensus_state(c) == RAFT_CANDIDATE ? "candidate" : "follower",
		    (unsigned long long)c->raft.current_term);
	return -1;
}

static int valid_request_id(const char *s, size_t n)
{
	if (n == 0 || n > FSM_REQUEST_ID_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_'))
			return 0;
	return 1;
}

/* Steps 2-5 for a routed call: authentication, authorisation, request id, leader routing
 * (and the barrier of a strong read), then the route's handler. Each step that refuses
 * answers the call. */
static void gate_and_run(struct call *call)
{
	struct http_server *s = call->s;
	h2o_req_t *req = call->req;
	h2o_iovec_t path = req->path_normalized;
	/* 2. authentication and 3. authorisation: the one place both are decided */
	if (call->route->roles != 0) {
		if (authenticate(call) != 0)
			return;
		if ((role_bit(call->role) & call->route->roles) == 0) {
			call_error(call, 403, NULL, "role %s may not %.*s %.*s", call->role,
			           (int)req->method.len, req->method.base, (int)path.len,
			           path.base);
			return;
		}
	}
	ssize_t rid = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
	if (rid >= 0) {
		h2o_iovec_t v = req->headers.entries[rid].value;
		if (!valid_request_id(v.base, v.len)) {
			call_error(call, 400, "X-Request-Id",
			           "X-Request-Id: must be 1-64 characters of [A-Za-z0-9_-]");
			return;
		}
		memcpy(call->request_id, v.base, v.len);
	}
	if (query_check(call) != 0 || body_check(call) != 0)
		return;
	if (call_query_flag(call, "stale", &call->stale) != 0)
		return;
	/* 4. leader routing */
	if (call->route->kind == ROUTE_WRITE || call->route->kind == ROUTE_DEFERRED_WRITE ||
	    (call->route->kind == ROUTE_READ && !call->stale)) {
		if (route_to_leader(call) != 0)
			return;
	}
	if (call->route->kind == ROUTE_READ && !call->stale) {
		struct yard_err err = {0};
		if (consensus_barrier(s->cons, barrier_done, call, &err) != 0)
			call_yard_error(call, &err);
		return;
	}
	call->route->fn(call);
}

/* Deferred routes (the agents' heartbeats, thousands a second at scale) are gated and run
 * from an idle handle, DEFER_BUDGET_NS of them per loop iteration, oldest first, rather than
 * where h2o read them: a burst of them no longer holds the loop in one iteration while raft
 * messages (the acknowledgements every commit waits for) wait behind them. A call whose
 * client went away meanwhile is dropped; leadership is checked when it runs. */
#define DEFER_BUDGET_NS 2000000

static void on_defer_idle(uv_idle_t *h)
{
	struct http_server *s = h->data;
	uint64_t t0 = yard_now_mono_ns();
	do {
		struct call *call = s->defer_head;
		s->defer_head = call->next_deferred;
		if (s->defer_head == NULL)
			s->defer_tail = NULL;
		s->n_deferred--;
		if (call->req == NULL) { /* the client went away; nothing to answer */
			s->deferred_dropped++;
			call_free(call);
		} else if (call->resume != NULL) {
			void (*fn)(struct call *) = call->resume;
			call->resume = NULL;
			fn(call);
		} else {
			gate_and_run(call);
		}
	} while (s->defer_head != NULL && yard_now_mono_ns() - t0 < DEFER_BUDGET_NS);
	if (s->defer_head == NULL)
		uv_idle_stop(h);
}

static void defer_call(struct http_server *s, struct call *call)
{
	if (!s->listening) {
		call_error(call, 503, NULL, "controller shutting down");
		return;
	}
	call->next_deferred = NULL;
	if (s->defer_tail != NULL)
		s->defer_tail->next_deferred = call;
	else
		s->defer_head = call;
	s->defer_tail = call;
	s->deferred_total++;
	if (++s->n_deferred > s->max_deferred)
		s->max_deferred = s->n_deferred;
	uv_idle_start(&s->defer_idle, on_defer_idle);
}

void http_defer(struct call *call, void (*fn)(struct call *))
{
	call->resume = fn;
	defer_call(call->s, call);
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
	struct http_server *s = *(struct http_server **)(self + 1);
	struct call *call = calloc(1, sizeof *call);
	if (call == NULL)
		return -1;
	call->s = s;
	call->req = req;
	call->route_index = -1;
	call->start_ns = yard_now_mono_ns();
	call->guard = h2o_mem_alloc_shared(&req->pool, sizeof *call->guard, guard_dispose);
	call->guard->call = call;

	/* 1. route */
	h2o_iovec_t path = req->path_normalized;
	int path_found = 0;
	for (int i = 0; i < api_routes_count; i++) {
		char params[4][72];
		if (!segment_match(api_routes[i].pattern, path.base, path.len, params))
			continue;
		path_found = 1;
		if (h2o_memis(req->method.base, req->method.len, api_routes[i].method,
		              strlen(api_routes[i].method))) {
			call->route_index = i;
			call->route = &api_routes[i];
			memcpy(call->params, params, sizeof params);
			break;
		}
	}
	if (call->route == NULL) {
		/* a 405 names the path's methods (Allow), each once (GET: / and its files; no
		 * method is part of another); only here, not for every request */
		for (int i = 0; path_found && i < api_routes_count; i++) {
			char params[4][72];
			size_t used = strlen(call->allow);
			if (segment_match(api_routes[i].pattern, path.base, path.len, params) &&
			    strstr(call->allow, api_routes[i].method) == NULL)
				snprintf(call->allow + used, sizeof call->allow - used, "%s%s",
				         used ? ", " : "", api_routes[i].method);
		}
		if (path_found)
			call_error(call, 405, NULL, "method %.*s not allowed on %.*s (allowed: %s)",
			           (int)req->method.len, req->method.base, (int)path.len, path.base,
			           call->allow);
		else
			call_error(call, 404, NULL, "no route %.*s", (int)path.len, path.base);
		return 0;
	}
	/* handlers quote path segments in answers and pass them to commands as JSON strings */
	int nparams = 0;
	for (const char *c = call->route->pattern; *c; c++)
		nparams += *c == '*';
	for (int i = 0; i < nparams && i < 4; i++) {
		if (!path_segment_ok(call->params[i])) {
			call_error(call, 400, "path",
			           "path segment '%s': must be UTF-8 without control characters",
			           call->params[i]);
			return 0;
		}
	}
	if (call->route->kind == ROUTE_DEFERRED_WRITE) {
		defer_call(s, call);
		return 0;
	}
	gate_and_run(call);
	return 0;
}

/* ---- answers h2o makes itself ----
 *
 * h2o refuses a body over max_request_entity_size (413) before any handler runs, and answers
 * it through the host's fallback path with a text/plain body. This filter, on that path only,
 * turns such an answer into the API's JSON error, counted under "unrouted" in the metrics.
 * (Input that is not HTTP at all is answered by h2o's parser without any path: that 400
 * stays text.) */

struct h2o_answer_filter {
	h2o_filter_t super;
	struct http_server *s;
};

struct h2o_answer_ostream {
	h2o_ostream_t super;
	struct http_server *s;
	uint64_t start_ns;
};

static void h2o_answer_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt,
                            h2o_send_state_t state)
{
	struct h2o_answer_ostream *o = (struct h2o_answer_ostream *)self;
	if (state != H2O_SEND_STATE_FINAL) { /* never seen: h2o sends its answers whole */
		h2o_ostream_send_next(self, req, bufs, bufcnt, state);
		return;
	}
	json_t *body;
	if (req->res.status == 413) {
		char msg[96];
		snprintf(msg, sizeof msg, "request body over the limit of %u bytes", HTTP_MAX_BODY);
		body = json_pack("{s:s, s:s}", "error", msg, "field", "body");
	} else { /* h2o's text is its status line's reason ("Bad Request") */
		body = json_pack("{s:s}", "error", req->res.reason ? req->res.reason : "refused");
	}
	char *out = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	h2o_iovec_t buf = h2o_strdup(&req->pool, out != NULL ? out : "{}", SIZE_MAX);
	free(out);
	req->res.content_length = buf.len;
	ssize_t ct = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
	if (ct >= 0)
		req->res.headers.entries[ct].value = h2o_iovec_init(H2O_STRLIT("application/json"));
	else
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
		               H2O_STRLIT("application/json"));
	metrics_note(o->s, -1, req->res.status, o->start_ns);
	h2o_ostream_send_next(self, req, &buf, 1, state);
}

static void h2o_answer_setup(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
	struct h2o_answer_filter *f = (struct h2o_answer_filter *)self;
	if (req->res.status >= 400) {
		struct h2o_answer_ostream *o =
		    (struct h2o_answer_ostream *)h2o_add_ostream(req, sizeof *o, slot);
		o->s = f->s;
		o->start_ns = yard_now_mono_ns();
		o->super.do_send = h2o_answer_send;
		slot = &o->super.next;
	}
	h2o_setup_next_ostream(req, slot);
}

/* ---- metrics ---- */

static const char *route_label(int i)
{
	static char buf[96];
	if (i == api_routes_count)
		return "unrouted";
	snprintf(buf, sizeof buf, "%s %s", api_routes[i].method, api_routes[i].pattern);
	return buf;
}

/* gperftools' tcmalloc, where configure linked yardd with it: weak, so that a binary on the
 * C library's malloc (the tests', a --without-tcmalloc build) resolves it to NULL */
extern int MallocExtension_GetNumericProperty(const char *property, size_t *value)
    __attribute__((weak));
/* ASan's allocator, in a sanitizer build (its malloc leaves glibc's counts at 0) */
extern size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

/* Where a member's memory goes: resident pages, what the allocator has handed out and not
 * taken back (tcmalloc's own count, or glibc's mallinfo2), and of that the state machine's
 * SQLite image. */
static void memory_render(FILE *f, struct fsm *fsm)
{
	unsigned long long pages = 0, resident = 0;
	FILE *statm = fopen("/proc/self/statm", "r");
	if (statm != NULL) {
		if (fscanf(statm, "%llu %llu", &pages, &resident) != 2)
			resident = 0;
		fclose(statm);
	}
	long page = sysconf(_SC_PAGESIZE);
	fprintf(f,
	        "# HELP yard_process_resident_bytes This process's resident memory.\n"
	        "# TYPE yard_process_resident_bytes gauge\nyard_process_resident_bytes %llu\n",
	        resident * (unsigned long long)(page > 0 ? page : 4096));
	size_t allocated = 0;
	const char *allocator = "tcmalloc";
	if (__sanitizer_get_current_allocated_bytes != NULL) {
		allocated = __sanitizer_get_current_allocated_bytes();
		allocator = "sanitizer";
	} else if (MallocExtension_GetNumericProperty == NULL ||
	           !MallocExtension_GetNumericProperty("generic.current_allocated_bytes",
	                                               &allocated)) {
		struct mallinfo2 mi = mallinfo2();
		allocated = mi.uordblks + mi.hblkhd; /* in use from the arenas, and mmapped */
		allocator = "libc";
	}
	fprintf(f,
	        "# HELP yard_malloc_allocated_bytes Memory the allocator has handed out and not "
	        "had back (the rest of the resident memory: its caches and free pages, stacks, "
	        "code).\n# TYPE yard_malloc_allocated_bytes gauge\n"
	        "yard_malloc_allocated_bytes{allocator=\"%s\"} %zu\n",
	        allocator, allocated);
	const unsigned char *image = NULL;
	size_t image_len = 0;
	if (fsm != NULL && fsm_image(fsm, &image, &image_len) != 0)
		image_len = 0;
	fprintf(f,
	        "# HELP yard_fsm_db_bytes The state machine's SQLite database (jobs, nodes, "
	        "events, checkpoints...), part of the allocated memory.\n"
	        "# TYPE yard_fsm_db_bytes gauge\nyard_fsm_db_bytes %zu\n",
	        image_len);
	size_t used = 0;
	if (fsm != NULL && fsm_state_bytes(fsm, &used, NULL) == 0)
		fprintf(f,
		        "# HELP yard_fsm_db_used_bytes Of yard_fsm_db_bytes, the pages in use (the "
		        "rest was freed by deletions and is reused first): what --max-state-mb and "
		        "the state machine's own line judge.\n"
		        "# TYPE yard_fsm_db_used_bytes gauge\nyard_fsm_db_used_bytes %zu\n",
		        used);
}

char *metrics_render(struct http_server *s, size_t *len)
{
	char *out = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&out, &size);
	struct consensus *c = s->cons;
	uint64_t leader = 0;
	consensus_leader(c, &leader, NULL);
	fprintf(f, "# HELP yard_raft_term Current raft term.\n# TYPE yard_raft_term gauge\n");
	fprintf(f, "yard_raft_term %llu\n", (unsigned long long)c->raft.current_term);
	fprintf(f, "# TYPE yard_raft_commit_index gauge\nyard_raft_commit_index %llu\n",
	        (unsigned long long)c->raft.commit_index);
	fprintf(f, "# TYPE yard_raft_applied_index gauge\nyard_raft_applied_index %llu\n",
	        (unsigned long long)raft_last_applied(&c->raft));
	fprintf(f, "# TYPE yard_raft_last_index gauge\nyard_raft_last_index %llu\n",
	        (unsigned long long)raft_last_index(&c->raft));
	fprintf(f, "# TYPE yard_raft_state gauge\nyard_raft_state %d\n", consensus_state(c));
	fprintf(f, "# TYPE yard_raft_is_leader gauge\nyard_raft_is_leader %d\n",
	        consensus_is_ready(c));
	fprintf(f, "# TYPE yard_raft_leader_id gauge\nyard_raft_leader_id %llu\n",
	        (unsigned long long)leader);
	fprintf(f, "# HELP yard_raft_leader_changes_total Times this member learned of a new "
	           "leader, or of one elected again in a later term.\n");
	fprintf(
	    f,
	    "# TYPE yard_raft_leader_changes_total counter\nyard_raft_leader_changes_total %llu\n",
	    (unsigned long long)c->stats.leader_changes);
	fprintf(f, "# HELP yard_raft_leader_regained_total Times this member lost the leader "
	           "it knew (its election timer ran out) and heard from it again in the same "
	           "term: no election, not a leader change.\n");
	fprintf(f,
	        "# TYPE yard_raft_leader_regained_total counter\nyard_raft_leader_regained_total "
	        "%llu\n",
	        (unsigned long long)c->stats.leader_regained);
	fprintf(f, "# HELP yard_raft_leader_conn_lost_total Times the leader's end of this "
	           "follower's raft connection closed (an election follows at once).\n");
	fprintf(f,
	        "# TYPE yard_raft_leader_conn_lost_total counter\nyard_raft_leader_conn_lost_total "
	        "%llu\n",
	        (unsigned long long)c->stats.leader_conn_lost);
	fprintf(f, "# TYPE yard_raft_applies_total counter\nyard_raft_applies_total %llu\n",
	        (unsigned long long)c->stats.applies);
	fprintf(f, "# HELP yard_fsm_own_commands_total Commands this member applied as leader from "
	           "the objects it printed them from (not parsed again).\n");
	fprintf(f, "# TYPE yard_fsm_own_commands_total counter\nyard_fsm_own_commands_total %llu\n",
	        (unsigned long long)s->fsm->own_taken);
	fprintf(
	    f, "# HELP yard_raft_commands_total Commands applied (a batch entry holds several).\n");
	fprintf(f, "# TYPE yard_raft_commands_total counter\nyard_raft_commands_total %llu\n",
	        (unsigned long long)c->stats.commands);
	fprintf(f, "# HELP yard_raft_batches_sent_total Batch entries proposed as leader.\n");
	fprintf(f,
	        "# TYPE yard_raft_batches_sent_total counter\nyard_raft_batches_sent_total %llu\n",
	        (unsigned long long)c->stats.batches_sent);
	fprintf(f,
	        "# TYPE yard_raft_batched_commands_total counter\nyard_raft_batched_commands_total "
	        "%llu\n",
	        (unsigned long long)c->stats.batched_commands);
	yard_hist_render(f, "yard_raft_commit_duration_ms",
	                 "This member's own commands as leader, from their submission to their "
	                 "apply here (queueing, the log write here and on a majority, the apply).",
	                 1, "", &c->stats.commit_ms);
	yard_hist_render(f, "yard_raft_replicate_duration_ms",
	                 "Of those, from the entry's proposal to raft to the start of its apply "
	                 "(the log write here and on a majority, and the entries ahead of it).",
	                 1, "", &c->stats.replicate_ms);
	yard_hist_render(f, "yard_raft_apply_duration_ms",
	                 "Every entry's apply to the state machine (a batch entry: all its "
	                 "commands), as leader or follower.",
	                 1, "", &c->stats.apply_ms);
	yard_hist_render(f, "yard_loop_iteration_busy_ms",
	                 "Each iteration of the controller's event loop: the time it ran callbacks "
	                 "(requests, raft messages, applies, scheduling passes) rather than wait "
	                 "for events; an event that arrives waits up to that long for its turn.",
	                 1, "", &s->loop_busy_ms);
	memory_render(f, s->fsm);
	fprintf(f, "# TYPE yard_raft_snapshots_total counter\nyard_raft_snapshots_total %llu\n",
	        (unsigned long long)c->stats.snapshots);
	fprintf(f, "# HELP yard_raft_snapshots_prepared_total Snapshots copied into memory "
	           "prepared off the loop.\n");
	fprintf(f,
	        "# TYPE yard_raft_snapshots_prepared_total counter\n"
	        "yard_raft_snapshots_prepared_total %llu\n",
	        (unsigned long long)c->stats.snapshots_prepared);
	fprintf(f, "# HELP yard_raft_snapshot_last_seconds How long the last snapshot held the "
	           "loop.\n");
	fprintf(f,
	        "# TYPE yard_raft_snapshot_last_seconds gauge\nyard_raft_snapshot_last_seconds "
	        "%.6f\n",
	        (double)c->stats.snapshot_last_us / 1e6);
	fprintf(f,
	        "# HELP yard_raft_snapshot_installs_total Snapshots installed from the leader.\n");
	fprintf(f,
	        "# TYPE yard_raft_snapshot_installs_total "
	        "counter\nyard_raft_snapshot_installs_total %llu\n",
	        (unsigned long long)c->stats.restores);
	fprintf(f,
	        "# TYPE yard_raft_corrupt_entries_total counter\nyard_raft_corrupt_entries_total "
	        "%llu\n",
	        (unsigned long long)c->stats.corrupt_entries);
	fprintf(f,
	        "# HELP yard_raft_sends_to_nobody_total Messages raft addressed to no server "
	        "(a reply to a leader a step-down forgot), refused before the transport.\n"
	        "# TYPE yard_raft_sends_to_nobody_total counter\nyard_raft_sends_to_nobody_total "
	        "%llu\n",
	        (unsigned long long)c->stats.sends_to_nobody);
	fprintf(f,
	        "# TYPE yard_raft_tcp_nodelay_streams_total "
	        "counter\nyard_raft_tcp_nodelay_streams_total %lu\n",
	        c->transport.streams_tuned);
	fprintf(f,
	        "# HELP yard_http_connections_total TCP connections accepted by the API (clients "
	        "that keep theirs open make one for many requests).\n"
	        "# TYPE yard_http_connections_total counter\nyard_http_connections_total %llu\n",
	        (unsigned long long)s->connections_total);
	fprintf(f, "# TYPE yard_http_requests_total counter\n");
	for (int i = 0; i <= api_routes_count; i++)
		for (int code = 100; code < 600; code++)
			if (s->metrics[i].codes[code])
				fprintf(f,
				        "yard_http_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
				        route_label(i), code,
				        (unsigned long long)s->metrics[i].codes[code]);
	fprintf(f,
	        "# HELP yard_http_deferred_total Requests (agents' heartbeats) run between loop "
	        "iterations rather than where they were read.\n"
	        "# TYPE yard_http_deferred_total counter\nyard_http_deferred_total %llu\n"
	        "# HELP yard_http_deferred_waiting Deferred requests waiting now.\n"
	        "# TYPE yard_http_deferred_waiting gauge\nyard_http_deferred_waiting %d\n"
	        "# HELP yard_http_deferred_waiting_max The most deferred requests that waited at "
	        "once.\n# TYPE yard_http_deferred_waiting_max gauge\n"
	        "yard_http_deferred_waiting_max %d\n"
	        "# HELP yard_http_deferred_dropped_total Deferred requests whose client went away "
	        "before their turn.\n# TYPE yard_http_deferred_dropped_total counter\n"
	        "yard_http_deferred_dropped_total %llu\n",
	        (unsigned long long)s->deferred_total, s->n_deferred, s->max_deferred,
	        (unsigned long long)s->deferred_dropped);
	int first = 1;
	for (int i = 0; i <= api_routes_count; i++) {
		struct route_metrics *m = &s->metrics[i];
		if (yard_hist_count(&m->latency) == 0)
			continue;
		char labels[112];
		snprintf(labels, sizeof labels, "route=\"%s\"", route_label(i));
		yard_hist_render(f, "yard_http_request_duration_ms",
		                 first ? "Time from a request's arrival to its answer, by route."
		                       : NULL,
		                 first, labels, &m->latency);
		first = 0;
	}
	if (s->sched != NULL)
		sched_metrics_render(s->sched, f);
	fclose(f);
	*len = size;
	return out;
}

/* ---- server ---- */

/* After each loop iteration's poll: the iteration's busy time, its wall time less the time
 * it slept in the kernel (uv_metrics_idle_time). */
static void on_loop_check(uv_check_t *h)
{
	struct http_server *s = h->data;
	uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(s->loop);
	if (s->loop_last_ns != 0) {
		uint64_t wall = now - s->loop_last_ns, slept = idle - s->loop_last_idle_ns;
		yard_hist_note(&s->loop_busy_ms, (double)(wall > slept ? wall - slept : 0) / 1e6);
	}
	s->loop_last_ns = now;
	s->loop_last_idle_ns = idle;
}

static void on_connection(uv_stream_t *listener, int status)
{
	struct http_server *s = listener->data;
	if (status != 0)
		return;
	uv_tcp_t *conn = malloc(sizeof *conn);
	if (conn == NULL)
		return;
	uv_tcp_init(listener->loop, conn);
	if (uv_accept(listener, (uv_stream_t *)conn) != 0) {
		uv_close((uv_handle_t *)conn, (uv_close_cb)free);
		return;
	}
	uv_tcp_nodelay(conn, 1);
	s->connections_total++;
	h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)conn, (uv_close_cb)free);
	h2o_accept(&s->accept_ctx, sock);
}

/* The reason of OpenSSL's latest error, for a message naming the file it came from. */
static const char *ssl_reason(char *buf, size_t len)
{
	unsigned long e = ERR_peek_last_error();
	if (e == 0)
		snprintf(buf, len, "unknown error");
	else
		ERR_error_string_n(e, buf, len);
	ERR_clear_error();
	return buf;
}

/* Mutual TLS: a handshake without a client certificate signed by a CA of client_ca_file
 * fails. The session id context lets verified sessions resume. */
static int require_client_certs(SSL_CTX *ctx, const struct http_tls *tls, struct yard_err *err)
{
	static const unsigned char sid_ctx[] = "yardd";
	char why[256];
	STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(tls->client_ca_file);
	if (names == NULL || SSL_CTX_load_verify_locations(ctx, tls->client_ca_file, NULL) != 1) {
		if (names != NULL)
			sk_X509_NAME_pop_free(names, X509_NAME_free);
		return yard_err_set(err, YARD_EINVAL, "--tls-client-ca %s: %s", tls->client_ca_file,
		                    ssl_reason(why, sizeof why));
	}
	SSL_CTX_set_client_CA_list(ctx, names);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
	return 0;
}

/* A server context for tls: TLS 1.2 or later, the certificate chain and its key, checked to
 * match; no ALPN, so every connection speaks HTTP/1.1 (http.h). NULL with err set. */
static SSL_CTX *tls_context(const struct http_tls *tls, struct yard_err *err)
{
	char why[256];
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (ctx == NULL) {
		yard_err_set(err, YARD_ENOMEM, "TLS: %s", ssl_reason(why, sizeof why));
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
	                             SSL_OP_CIPHER_SERVER_PREFERENCE);
	if (SSL_CTX_use_certificate_chain_file(ctx, tls->cert_file) != 1)
		yard_err_set(err, YARD_EINVAL, "--tls-cert %s: %s", tls->cert_file,
		             ssl_reason(why, sizeof why));
	else if (SSL_CTX_use_PrivateKey_file(ctx, tls->key_file, SSL_FILETYPE_PEM) != 1) {
		int mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
		yard_err_set(err, YARD_EINVAL, "--tls-key %s%s: %s", tls->key_file,
		             mismatch ? " does not match --tls-cert" : "",
		             ssl_reason(why, sizeof why));
	} else if (SSL_CTX_check_private_key(ctx) != 1)
		yard_err_set(err, YARD_EINVAL, "--tls-key %s does not match --tls-cert %s: %s",
		             tls->key_file, tls->cert_file, ssl_reason(why, sizeof why));
	else if (tls->client_ca_file == NULL || require_client_certs(ctx, tls, err) == 0)
		return ctx;
	SSL_CTX_free(ctx);
	return NULL;
}

/* Logs the subject and expiry of ctx's certificate ("loaded" or "reloaded"); a warning
 * when it expires within a week or has expired. */
static void log_certificate(SSL_CTX *ctx, const char *path, const char *how)
{
	X509 *x = SSL_CTX_get0_certificate(ctx);
	char subject[256] = "?", until[32] = "?";
	struct tm tm;
	int days = 0, secs = 0;
	if (x == NULL)
		return;
	X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof subject);
	if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1)
		strftime(until, sizeof until, "%Y-%m-%dT%H:%M:%SZ", &tm);
	ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(x));
	double left = days + secs / 86400.0;
	if (left < 7)
		log_warn("http: TLS certificate %s %s (%s): %s %s (%.1f days)", how, path, subject,
		         left < 0 ? "expired" : "expires", until, left);
	else
		log_info("http: TLS certificate %s %s (%s), valid until %s", how, path, subject,
		         until);
}

int http_server_reload_tls(struct http_server *s, struct yard_err *err)
{
	if (s->accept_ctx.ssl_ctx == NULL)
		return yard_err_set(err, YARD_EINVAL,
		                    "the API is not served over TLS (no --tls-cert)");
	struct http_tls tls = {s->tls_cert, s->tls_key,
	                       s->tls_client_ca[0] != '\0' ? s->tls_client_ca : NULL};
	SSL_CTX *ctx = tls_context(&tls, err);
	if (ctx == NULL)
		return err->code;
	SSL_CTX *old = s->accept_ctx.ssl_ctx;
	s->accept_ctx.ssl_ctx = ctx;
	SSL_CTX_free(old); /* the connections made with it hold references of their own */
	log_certificate(ctx, s->tls_cert, "reloaded from");
	return 0;
}

int http_tls_check(const struct http_tls *tls, struct yard_err *err)
{
	SSL_CTX *ctx = tls_context(tls, err);
	if (ctx == NULL)
		return err != NULL ? err->code : YARD_EINVAL;
	SSL_CTX_free(ctx);
	return 0;
}

struct http_server *http_server_start(uv_loop_t *loop, struct consensus *c, struct fsm *f,
                                      const char *api_address, const struct http_tls *tls,
                                      struct yard_err *err)
{
	char host[64];
	int port;
	struct sockaddr_in addr;
	if (yard_addr_parse(api_address, host, sizeof host, &port) != 0) {
		yard_err_set(
		    err, YARD_EINVAL,
		    "--api-address %s: want a.b.c.d:port (an IPv4 address, a port 1-65535)",
		    api_address);
		return NULL;
	}
	if (uv_ip4_addr(host, port, &addr) != 0) {
		yard_err_set(err, YARD_EINVAL, "--api-address %s: not a numeric IPv4 address",
		             api_address);
		return NULL;
	}
	SSL_CTX *ssl_ctx = NULL;
	if (tls != NULL && (ssl_ctx = tls_context(tls, err)) == NULL)
		return NULL;
	struct http_server *s = calloc(1, sizeof *s);
	s->metrics = calloc((size_t)api_routes_count + 1, sizeof *s->metrics);
	s->loop = loop;
	s->cons = c;
	s->fsm = f;
	h2o_config_init(&s->config);
	s->config.max_request_entity_size = HTTP_MAX_BODY;
	s->config.http1.upgrade_to_http2 = 0; /* HTTP/1.1 only: see http.h */
	s->config.server_name = h2o_iovec_init(H2O_STRLIT("yardd"));
	h2o_hostconf_t *host_conf =
	    h2o_config_register_host(&s->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
	h2o_pathconf_t *path_conf = h2o_config_register_path(host_conf, "/", 0);
	struct h2o_answer_filter *answer_filter = (struct h2o_answer_filter *)h2o_create_filter(
	    &host_conf->fallback_path, sizeof *answer_filter);
	answer_filter->s = s;
	answer_filter->super.on_setup_ostream = h2o_answer_setup;
	h2o_handler_t *handler = h2o_create_handler(path_conf, sizeof *handler + sizeof s);
	*(struct http_server **)(handler + 1) = s;
	handler->on_req = on_req;
	h2o_context_init(&s->ctx, loop, &s->config);
	s->accept_ctx.ctx = &s->ctx;
	s->accept_ctx.hosts = s->config.hosts;
	s->accept_ctx.ssl_ctx = ssl_ctx;
	if (ssl_ctx != NULL) {
		snprintf(s->tls_cert, sizeof s->tls_cert, "%s", tls->cert_file);
		snprintf(s->tls_key, sizeof s->tls_key, "%s", tls->key_file);
		if (tls->client_ca_file != NULL)
			snprintf(s->tls_client_ca, sizeof s->tls_client_ca, "%s",
			         tls->client_ca_file);
		log_certificate(ssl_ctx, tls->cert_file, "loaded from");
	}

	/* Connections waiting to be accepted: thousands of agents reconnect at once after a
	 * leader change (a heartbeat and a watch each); those a full queue drops retry their SYN
	 * only after 1 s, then 3 s. With 256, 10,000 simulated nodes opening their watches
	 * overflowed it (TcpExtListenOverflows). The kernel caps it at net.core.somaxconn. */
	enum { API_LISTEN_BACKLOG = 4096 };
	uv_tcp_init(loop, &s->listener);
	s->listener.data = s;
	int rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&s->listener, API_LISTEN_BACKLOG, on_connection);
	if (rc != 0) {
		yard_err_set(err, YARD_EIO, "cannot listen on %s: %s", api_address,
		             uv_strerror(rc));
		uv_close((uv_handle_t *)&s->listener, NULL);
		return NULL;
	}
	s->listening = 1;
	uv_idle_init(loop, &s->defer_idle);
	s->defer_idle.data = s;
	if (uv_loop_configure(loop, UV_METRICS_IDLE_TIME) == 0) {
		uv_check_init(loop, &s->loop_check);
		s->loop_check.data = s;
		uv_check_start(&s->loop_check, on_loop_check);
		uv_unref((uv_handle_t *)&s->loop_check);
	}
	log_info("http: listening on %s://%s (HTTP/1.1 only%s%s)", ssl_ctx ? "https" : "http",
	         api_address, ssl_ctx ? ", TLS 1.2 or later" : "",
	         tls != NULL && tls->client_ca_file != NULL ? ", client certificates required"
	                                                    : "");
	return s;
}

void http_server_set_sched(struct http_server *s, struct sched *sched)
{
	s->sched = sched;
}

void http_server_stop(struct http_server *s)
{
	if (s != NULL && s->listening) {
		s->listening = 0;
		uv_close((uv_handle_t *)&s->listener, NULL);
		if (uv_is_active((uv_handle_t *)&s->loop_check))
			uv_close((uv_handle_t *)&s->loop_check, NULL);
		while (s->defer_head != NULL) {
			struct call *call = s->defer_head;
			s->defer_head = call->next_deferred;
			call_error(call, 503, NULL, "controller shutting down");
		}
		s->defer_tail = NULL;
		s->n_deferred = 0;
		uv_close((uv_handle_t *)&s->defer_idle, NULL);
	}
}
