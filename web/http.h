/* http.h: yardd's HTTP/1.1 JSON API (docs/api.md) served by libh2o on the controller's
 * libuv loop, next to raft.
 *
 * Every request passes the same gate in this order: route lookup (404/405), bearer-token
 * authentication against the replicated token hashes (401 from the ready leader; a member
 * that may not have applied every token yet sends an unknown one there: 307 or 503), the
 * route's role set (403), then leader routing: writes and linearizable reads on a follower
 * get 307 to the leader's API URL, or 503 without a leader. Writes become replicated commands
 * stamped with the token's name as actor; strong reads run after a raft_barrier.
 *
 * HTTP/2 is deliberately off: h2o 2.2.5 would accept cleartext HTTP/2 with prior knowledge
 * (raft-probe.md §7) and its 2018 HTTP/2 code has known bugs (rapid reset). With
 * http1.upgrade_to_http2 = 0 a "PRI * HTTP/2.0" preface is not a valid HTTP/1 request and
 * the connection is closed; "Upgrade: h2c" is ignored. Over TLS no ALPN protocol is offered,
 * so a client asking for h2 gets HTTP/1.1 too. */
#ifndef YARD_WEB_HTTP_H
#define YARD_WEB_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/err.h"
#include "jobs/fsm.h"
#include "raft/consensus.h"

#define HTTP_MAX_BODY (1u << 20) /* larger bodies get 413 (h2o refuses them; http.c words it) */
#define HTTP_MAX_DEPTH 32

struct http_server;

/* TLS for the API: PEM files of the certificate chain (leaf first) and its private key;
 * client_ca_file, when not NULL, the CA certificates every client must present a certificate
 * signed by (mutual TLS, as etcd's --client-cert-auth: tokens still decide what it may do). */
struct http_tls {
	const char *cert_file;
	const char *key_file;
	const char *client_ca_file;
};

/* 0 when tls's files load and match (what http_server_start will need); else an error
 * naming the file, for a start that stops before anything is written. */
int http_tls_check(const struct http_tls *tls, struct yard_err *err);

/* Starts listening on api_address (a.b.c.d:port), over TLS 1.2 or later when tls is not
 * NULL (a certificate or key that cannot be loaded, or that do not match, is an error
 * naming the file). */
struct http_server *http_server_start(uv_loop_t *loop, struct consensus *c, struct fsm *f,
                                      const char *api_address, const struct http_tls *tls,
                                      struct yard_err *err);
struct sched;
/* Gives the server the scheduler that answers heartbeats and adds soft state to reads. */
void http_server_set_sched(struct http_server *s, struct sched *sched);
/* Reads the TLS files named at start again (a renewed certificate, key or client CA): new
 * connections get the new context, those open keep theirs. On an error (naming the file)
 * the context in use stays. */
int http_server_reload_tls(struct http_server *s, struct yard_err *err);
/* Stops accepting connections (graceful shutdown starts here). */
void http_server_stop(struct http_server *s);

#endif
