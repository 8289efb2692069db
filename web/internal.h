/* internal.h: what web/http.c (server, gate, responses, metrics) and web/api.c (route
 * handlers) share. Private to web/. */
#ifndef YARD_WEB_INTERNAL_H
#define YARD_WEB_INTERNAL_H

#include <h2o.h>
#include <jansson.h>
#include <limits.h>

#include "common/hist.h"
#include "scheduler/leader.h"
#include "web/http.h"

/* ROLE_AGENT: a join token (role "agent" in the tokens table), which may only register a node;
 * ROLE_NODE: a node token (bound to one node by node.register), which may only heartbeat. */
enum {
	ROLE_ADMIN = 1,
	ROLE_OPERATOR = 2,
	ROLE_USER = 4,
	ROLE_SECURITY = 8,
	ROLE_AGENT = 16,
	ROLE_NODE = 32
};
#define ROLES_ANY (ROLE_ADMIN | ROLE_OPERATOR | ROLE_USER | ROLE_SECURITY)
#define ROLES_JOBS (ROLE_ADMIN | ROLE_OPERATOR | ROLE_USER)
/* rollouts move patched builds: operators run them, the security team may too */
#define ROLES_ROLLOUT (ROLE_ADMIN | ROLE_OPERATOR | ROLE_SECURITY)

/* LOCAL: served by whichever member receives it; READ: linearizable unless ?stale=1
 * (barrier on the leader, 307 on a follower); WRITE: leader only; DEFERRED_WRITE: leader
 * only, gated and run between loop iterations, a budget at a time (the agents' heartbeats:
 * see http.c). */
enum route_kind { ROUTE_LOCAL, ROUTE_READ, ROUTE_WRITE, ROUTE_DEFERRED_WRITE };

/* HANDLER: the handler reads (and checks) the body it takes. NONE: an action that takes no
 * arguments (cancel, cordon, a DELETE): a body other than none, whitespace or {} is refused
 * with a 400 naming its first field, as an unknown field in any other body is, rather than
 * ignored. */
enum route_body { BODY_HANDLER, BODY_NONE };

struct call;
typedef void (*handler_fn)(struct call *call);

struct route {
	const char *method;
	const char *pattern; /* '*' matches one path segment */
	unsigned roles;      /* 0: no token needed */
	enum route_kind kind;
	handler_fn fn;
	/* the query parameters it takes, space-separated ("*": any, as static files do); every
	 * GET route also takes "stale". Any other, or one given twice, is refused with a 400
	 * that names it: a mistyped ?stat=running must not list every job */
	const char *query;
	enum route_body body;
};

struct route_metrics {
	uint64_t by_code[6]; /* index: code / 100 (1xx..5xx), [0] unused */
	uint64_t codes[600]; /* exact status codes */
	struct yard_hist latency;
};

struct http_server {
	uv_loop_t *loop;
	struct consensus *cons;
	struct fsm *fsm;
	h2o_globalconf_t config;
	h2o_context_t ctx;
	h2o_accept_ctx_t accept_ctx;
	uv_tcp_t listener;
	int listening;
	/* the loop's iterations: the time each spent running callbacks rather than waiting for
	 * events, which is how long an event that arrives can wait for its turn */
	uv_check_t loop_check;
	/* deferred calls, oldest first, and the idle handle that runs them */
	struct call *defer_head, *defer_tail;
	int n_deferred, max_deferred;
	uint64_t deferred_total, deferred_dropped; /* queued; dropped: the client went away */
	uv_idle_t defer_idle;
	uint64_t loop_last_ns, loop_last_idle_ns;
	struct yard_hist loop_busy_ms;
	struct route_metrics *metrics; /* one per route, plus one for unrouted requests */
	struct sched *sched;           /* the leader's scheduler: heartbeats and soft state */
	uint64_t connections_total;    /* TCP connections accepted */
	/* the TLS files, read again by http_server_reload_tls ("" for none) */
	char tls_cert[PATH_MAX], tls_key[PATH_MAX], tls_client_ca[PATH_MAX];
};

struct call_guard {
	struct call *call;
};

struct call {
	struct http_server *s;
	h2o_req_t *req; /* NULL once h2o disposed the request */
	struct call_guard *guard;
	int route_index;
	const struct route *route;
	char actor[FSM_NAME_MAX + 1];
	char role[16];
	char params[4][72]; /* path wildcards, in order */
	int stale;
	uint64_t start_ns;
	struct call *next_deferred; /* the queue of deferred calls (http.c) */
	void (*resume)(struct call *); /* run in its turn instead of the route (http_defer) */
	char request_id[FSM_REQUEST_ID_MAX + 1];
	/* per-route scratch */
	char secret[SHA256_HEX_LEN + 1];
	char hash[SHA256_HEX_LEN + 1];
	uint64_t member_id;
	char member_addr[CONSENSUS_ADDR_MAX];
	char member_url[256];
	int member_voter;
	/* a watch that asked for the desired set: its version, tag and desired_shared */
	int watch_desired, watch_shared;
	int64_t watch_version;
	char watch_tag[24];
	char warning[256]; /* added to a successful answer as "warnings": [warning] ("": none) */
	char allow[48];    /* a 405's Allow header: the path's methods ("": none sent) */
	uint64_t sched_token; /* a submission the scheduler follows (sched_submit_begin), 0: none */
	/* an embargoed read, answered once audit.read commits (owned; freed with the call) */
	json_t *audited_json;
	unsigned char *audited_bytes;
	size_t audited_len;
};

extern const struct route api_routes[];
extern const int api_routes_count;

/* Queues fn(call) behind the deferred requests (the agents' heartbeats), run between loop
 * iterations in their budget: work an answer needs that should not hold up what called
 * for it. fn answers the call; a call whose client went away meanwhile is freed instead. */
void http_defer(struct call *call, void (*fn)(struct call *));

/* Responses (each finishes the call; the call is freed). body is stolen. */
void call_json(struct call *call, int status, json_t *body);
void call_error(struct call *call, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void call_yard_error(struct call *call, const struct yard_err *err);
/* 1 when the job of the route's first parameter exists; else answers its error (404) and is 0. */
int api_job_known(struct call *call);
void call_text(struct call *call, int status, const char *content_type, char *text, size_t len);
/* Maps a YARD_E* code to an HTTP status. */
int http_status_of(int code);

/* Parses the request body as a JSON object; on failure answers 400 and returns NULL. */
json_t *call_body_object(struct call *call);
/* Query parameter (URL-decoded) into out; 0 if present. */
int call_query(struct call *call, const char *key, char *out, size_t out_len);

/* Integer query parameter in [min, max] into *out (unchanged when absent): 0, or -1 after
 * answering 400. */
int call_query_int(struct call *call, const char *key, int64_t min, int64_t max, int64_t *out);

/* Yes/no query parameter into *out (unchanged when absent): 1, true or bare (?stale) for 1,
 * 0 or false for 0; 0, or -1 after answering 400 naming it. */
int call_query_flag(struct call *call, const char *key, int *out);

/* Replicates a command (op, args stolen) and answers with the FSM's result. */
void call_submit(struct call *call, const char *op, json_t *args,
                 void (*on_result)(struct call *call, const json_t *result));
/* Default on_result: {"status", "body"|"error"} → the HTTP response. */
void call_answer_result(struct call *call, const json_t *result);

/* api_store.c: builds, advisories, the audit log and events verify. */
void h_builds_create(struct call *call);
void h_builds_chunk(struct call *call);
void h_builds_commit(struct call *call);
void h_builds_delete(struct call *call);
void h_builds_list(struct call *call);
void h_builds_get(struct call *call);
void h_builds_binary(struct call *call);
void h_advisories_create(struct call *call);
void h_advisories_list(struct call *call);
void h_advisories_get(struct call *call);
void h_advisories_embargo(struct call *call);
void h_advisories_share(struct call *call);
void h_advisories_publish(struct call *call);
void h_audit(struct call *call);
void h_events_verify(struct call *call);
void h_database(struct call *call);

/* api_ckpt.c: checkpoints of the "controller" store. */
void h_checkpoints_list(struct call *call);
void h_checkpoint_shard_declare(struct call *call);
void h_checkpoint_shard_chunk(struct call *call);
void h_checkpoint_shard_commit(struct call *call);
void h_checkpoint_shard_get(struct call *call);

char *metrics_render(struct http_server *s, size_t *len);

/* api_rollout.c: the rollout routes (listed in api.c's table). */
void h_rollouts_start(struct call *call);
void h_rollouts_list(struct call *call);
void h_rollouts_get(struct call *call);
void h_rollouts_pause(struct call *call);
void h_rollouts_resume(struct call *call);
void h_rollouts_abort(struct call *call);
void h_rollouts_rollback(struct call *call);

#endif
