/* http.h: yardctl's HTTP client for the yardd API (docs/api.md). One logical request may
 * visit several controllers: it follows 307 leader redirects and remembers the leader for
 * the rest of the invocation, moves to the next endpoint when one refuses or times out, and
 * retries after 503 with back-off. Writes carry one X-Request-Id for all their attempts, so
 * the controller applies a retried write once. */
#ifndef YARD_CTL_HTTP_H
#define YARD_CTL_HTTP_H

#include <jansson.h>
#include <stddef.h>

#include "common/err.h"

#define CTL_ENDPOINTS_MAX 16
#define CTL_URL_MAX 256
#define CTL_REQUEST_ID_LEN 32
#define CTL_REDIRECTS_MAX 5

struct ctl_client {
	char endpoints[CTL_ENDPOINTS_MAX][CTL_URL_MAX]; /* base URLs, no trailing '/' */
	int endpoint_count;
	int next_endpoint;        /* where the next attempt without a known leader goes */
	char leader[CTL_URL_MAX]; /* base URL of the leader, "" while unknown */
	char auth_header[512];    /* "Authorization: Bearer ..." */
	long connect_timeout_ms;  /* per connection attempt */
	long request_timeout_ms;  /* per attempt, connection included */
	int retry_rounds;         /* passes over all endpoints after the first */
	long backoff_first_ms;    /* sleep after a failed pass, doubling up to backoff_max_ms */
	long backoff_max_ms;
	char ca_file[4096];        /* PEM CA bundle for https:// endpoints, "" for the system's */
	char cert_file[4096];      /* client certificate (PEM) for mutual TLS, "" for none */
	char key_file[4096];       /* its private key */
	void *curl;                /* CURL *, reused so connections stay open */
	size_t max_response_bytes; /* 0: 16 MiB; larger for build downloads */
};

/* A request body: data[0..len) sent as content_type (NULL: application/json). */
struct ctl_body {
	const void *data;
	size_t len;
	const char *content_type;
};

struct ctl_response {
	long status; /* HTTP status of the final answer */
	char *body;  /* owned, NUL-terminated */
	size_t body_len;
	json_t *json;               /* body parsed, NULL when it is not JSON (owned) */
	char endpoint[CTL_URL_MAX]; /* base URL of the controller that answered */
};

/* Splits "http://a:1, http://b:2/" into base URLs (trimmed, trailing '/' removed). Only
 * http:// and https:// URLs with a host are accepted; err names the bad entry. */
int ctl_endpoints_parse(const char *list, char out[][CTL_URL_MAX], int max, int *count,
                        struct yard_err *err);

/* The leader's base URL from a redirect's Location for a request to path ("/v1/jobs?x"):
 * Location minus the path when it ends with it, else its scheme://host[:port]. Refuses
 * anything but an absolute http(s) URL. */
int ctl_redirect_base(const char *location, const char *path, char *base, size_t base_len,
                      struct yard_err *err);

/* A random request id of CTL_REQUEST_ID_LEN hex characters. */
void ctl_request_id(char out[CTL_REQUEST_ID_LEN + 1]);

/* endpoints: the comma-separated list; token: the bearer token (no CR/LF). */
int ctl_client_init(struct ctl_client *c, const char *endpoints, const char *token,
                    struct yard_err *err);
void ctl_client_close(struct ctl_client *c);
/* Verifies https:// controllers against the CA certificates in path (PEM) instead of the
 * system's; an unreadable file is an error naming it. A controller whose certificate does
 * not verify ends the request at once (a wrong CA is not a transient failure). */
int ctl_client_set_ca_file(struct ctl_client *c, const char *path, struct yard_err *err);
/* Presents the certificate in cert (PEM) with its key to controllers that ask for one
 * (yardd --tls-client-ca); an unreadable file is an error naming it. */
int ctl_client_set_cert(struct ctl_client *c, const char *cert, const char *key,
                        struct yard_err *err);

/* Sends method (GET, POST, DELETE) path (with query) and body (may be NULL) until a
 * controller gives a final answer. request_id (NULL for reads) goes out as X-Request-Id on
 * every attempt. Returns 0 with *resp filled for any final HTTP status but 503 (errors
 * included); when every attempt failed to connect or got 503, returns an error naming each
 * endpoint tried and what it said. */
int ctl_client_request(struct ctl_client *c, const char *method, const char *path, const char *body,
                       const char *request_id, struct ctl_response *resp, struct yard_err *err);
/* The same with any body (binary chunks). */
int ctl_client_send(struct ctl_client *c, const char *method, const char *path,
                    const struct ctl_body *body, const char *request_id, struct ctl_response *resp,
                    struct yard_err *err);
void ctl_response_free(struct ctl_response *r);

/* "400 from http://...: <error> (field <field>)" for an error response. */
void ctl_response_describe(const struct ctl_response *r, char *out, size_t out_len);

#endif
