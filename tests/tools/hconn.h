/* hconn.h: a pool of keep-alive HTTP/1.1 connections on the caller's epoll set, one request
 * in flight on each, for yard-simnodes' heartbeats (a benchmark tool, not part of
 * trainyard). libcurl cost the simulator more CPU per heartbeat than the leader spent
 * answering it, on the same two cores: a fresh easy handle per request, its connection
 * cache searched, its socket re-registered with epoll twice per transfer. This client writes
 * a request with one writev and reads its answer by Content-Length; nothing else of HTTP
 * (no chunked answers, no pipelining, no TLS), which is all the controller's API needs here.
 */
#ifndef YARD_HCONN_H
#define YARD_HCONN_H

#include <stddef.h>
#include <stdint.h>

/* The answer to a request: status 0 with err set when there was none (err names why). body
 * is NUL-terminated, valid during the call. */
typedef void (*hconn_done_cb)(void *user, int status, const char *body, size_t len,
                              const char *err);

struct hconn_pool;

/* size connections (at most size requests in flight) registered on epfd with
 * data.u64 = (uint64_t)tag << 32 | connection index. NULL without memory. */
struct hconn_pool *hconn_pool_new(int epfd, uint32_t tag, int size, hconn_done_cb done);
void hconn_pool_free(struct hconn_pool *p);

/* Where requests go from now on ("http://HOST:PORT", numeric or resolvable host); the
 * idle connections to the old address are closed, busy ones finish first. 0, or -1 with err
 * naming what was wrong with url. */
int hconn_set_endpoint(struct hconn_pool *p, const char *url, char *err, size_t err_len);

/* Starts POST path with the bearer token and JSON body on an idle connection (connecting it
 * when needed). 0; -1 when no connection is idle or it cannot connect (err says which). */
int hconn_post(struct hconn_pool *p, const char *path, const char *token, const char *body,
               size_t len, void *user, char *err, size_t err_len);

/* The same on connection index (0..size-1), which must be idle: for a caller that keeps a
 * connection per client (a watch per node), so that finding one costs no scan of the pool. */
int hconn_post_on(struct hconn_pool *p, int index, const char *path, const char *token,
                  const char *body, size_t len, void *user, char *err, size_t err_len);

/* Handles an epoll event whose tag is the pool's (index: the low 32 bits). */
void hconn_event(struct hconn_pool *p, uint32_t index, uint32_t events);

/* Ends the requests in flight for longer than timeout_ms (done with err "no answer ..."). */
void hconn_expire(struct hconn_pool *p, uint64_t timeout_ms);

#endif
