/* http.c: yardctl's leader-following, retrying HTTP client over libcurl (http.h).
 *
 * Redirects are followed here, not by curl: curl would drop the Authorization header when
 * the host changes, and we want to remember the leader for the next request. What this file
 * does not do: decide whether an answer is a success (the commands read the status).
 */
#include "config.h"

#include "ctl/http.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/common.h"

#define BODY_MAX_BYTES (16u << 20)

static int has_http_scheme(const char *url, size_t *scheme_len)
{
	if (strncmp(url, "http://", 7) == 0)
		*scheme_len = 7;
	else if (strncmp(url, "https://", 8) == 0)
		*scheme_len = 8;
	else
		return 0;
	return 1;
}

/* A base URL: http(s)://host[:port][/prefix], no whitespace or control characters. */
static int check_base_url(const char *url, struct yard_err *err)
{
	size_t scheme_len;
	if (!has_http_scheme(url, &scheme_len))
		return yard_err_set(err, YARD_EINVAL, "\"%s\" is not an http:// or https:// URL",
		                    url);
	if (url[scheme_len] == '\0' || url[scheme_len] == '/' || url[scheme_len] == ':')
		return yard_err_set(err, YARD_EINVAL, "\"%s\" has no host", url);
	for (const char *p = url; *p; p++)
		if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p) || *p == '?' ||
		    *p == '#')
			return yard_err_set(err, YARD_EINVAL,
			                    "\"%s\" must be a plain base URL (no spaces, query or "
			                    "fragment)",
			                    url);
	return 0;
}

int ctl_endpoints_parse(const char *list, char out[][CTL_URL_MAX], int max, int *count,
                        struct yard_err *err)
{
	const char *p = list;
	*count = 0;
	if (list == NULL)
		return yard_err_set(err, YARD_EINVAL, "no endpoints given");
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		while (len > 0 && isspace((unsigned char)*p)) {
			p++;
			len--;
		}
		while (len > 0 && isspace((unsigned char)p[len - 1]))
			len--;
		while (len > 0 && p[len - 1] == '/' && !(len >= 2 && p[len - 2] == ':') &&
		       !(len >= 3 && p[len - 2] == '/' && p[len - 3] == ':'))
			len--; /* trailing slashes, but not those of "http://" */
		if (len > 0) {
			char url[CTL_URL_MAX];
			int rc;
			if (len >= CTL_URL_MAX)
				return yard_err_set(err, YARD_EINVAL,
				                    "endpoint \"%.40s...\" is longer than %d bytes",
				                    p, CTL_URL_MAX - 1);
			if (*count == max)
				return yard_err_set(err, YARD_EINVAL, "more than %d endpoints",
				                    max);
			memcpy(url, p, len);
			url[len] = '\0';
			struct yard_err uerr = {0};
			if ((rc = check_base_url(url, &uerr)) != 0)
				return yard_err_set(err, rc, "endpoint %s", uerr.msg);
			memcpy(out[(*count)++], url, len + 1);
		}
		if (end == NULL)
			break;
		p = end + 1;
	}
	if (*count == 0)
		return yard_err_set(err, YARD_EINVAL, "no endpoints given (\"%s\")", list);
	return 0;
}

int ctl_redirect_base(const char *location, const char *path, char *base, size_t base_len,
                      struct yard_err *err)
{
	size_t scheme_len, loc_len, path_len = strlen(path), len;
	if (location == NULL || location[0] == '\0')
		return yard_err_set(err, YARD_EINVAL, "redirect without a Location");
	if (!has_http_scheme(location, &scheme_len))
		return yard_err_set(err, YARD_EINVAL, "redirect to \"%s\", not an http(s) URL",
		                    location);
	loc_len = strlen(location);
	if (loc_len > path_len + scheme_len && strcmp(location + loc_len - path_len, path) == 0)
		len = loc_len - path_len;
	else
		len = scheme_len + strcspn(location + scheme_len, "/?#");
	while (len > scheme_len && location[len - 1] == '/')
		len--;
	if (len >= base_len || len >= CTL_URL_MAX)
		return yard_err_set(err, YARD_EINVAL, "redirect URL \"%.60s...\" is too long",
		                    location);
	memcpy(base, location, len);
	base[len] = '\0';
	struct yard_err uerr = {0};
	int rc = check_base_url(base, &uerr);
	if (rc != 0)
		return yard_err_set(err, rc, "redirect: %s", uerr.msg);
	return 0;
}

void ctl_request_id(char out[CTL_REQUEST_ID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[CTL_REQUEST_ID_LEN / 2];
	size_t got = 0;
	while (got < sizeof raw) {
		ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got < sizeof raw) { /* no getrandom: time and pid still make collisions unlikely */
		uint64_t seed = yard_now_mono_ns() ^ ((uint64_t)getpid() << 32);
		for (size_t i = got; i < sizeof raw; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			raw[i] = (unsigned char)(seed >> 56);
		}
	}
	for (size_t i = 0; i < sizeof raw; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[CTL_REQUEST_ID_LEN] = '\0';
}

int ctl_client_init(struct ctl_client *c, const char *endpoints, const char *token,
                    struct yard_err *err)
{
	int rc;
	memset(c, 0, sizeof *c);
	if ((rc = ctl_endpoints_parse(endpoints, c->endpoints, CTL_ENDPOINTS_MAX,
	                              &c->endpoint_count, err)) != 0)
		return rc;
	if (token == NULL || token[0] == '\0')
		return yard_err_set(err, YARD_EINVAL, "no token given");
	for (const char *p = token; *p; p++)
		if (!isgraph((unsigned char)*p))
			return yard_err_set(err, YARD_EINVAL,
			                    "the token contains a space or control character");
	if ((size_t)snprintf(c->auth_header, sizeof c->auth_header, "Authorization: Bearer %s",
	                     token) >= sizeof c->auth_header)
		return yard_err_set(err, YARD_EINVAL, "the token is too long");
	c->connect_timeout_ms = 1000;
	c->request_timeout_ms = 15000;
	c->retry_rounds = 4;
	c->backoff_first_ms = 200;
	c->backoff_max_ms = 2000;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return yard_err_set(err, YARD_EINTERNAL, "curl_global_init failed");
	c->curl = curl_easy_init();
	if (c->curl == NULL)
		return yard_err_set(err, YARD_ENOMEM, "curl_easy_init failed");
	return 0;
}

/* Copies path, a readable file, into out (what names it in errors: "CA file"). */
static int set_file(char *out, size_t out_len, const char *what, const char *path,
                    struct yard_err *err)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return yard_err_set(err, YARD_EINVAL, "%s %s: %s", what, path, strerror(errno));
	fclose(f);
	if ((size_t)snprintf(out, out_len, "%s", path) >= out_len)
		return yard_err_set(err, YARD_EINVAL, "%s %s: path too long", what, path);
	return 0;
}

int ctl_client_set_ca_file(struct ctl_client *c, const char *path, struct yard_err *err)
{
	return set_file(c->ca_file, sizeof c->ca_file, "CA file", path, err);
}

int ctl_client_set_cert(struct ctl_client *c, const char *cert, const char *key,
                        struct yard_err *err)
{
	if (cert == NULL || key == NULL)
		return yard_err_set(err, YARD_EINVAL,
		                    "a client certificate needs both --cert and --key");
	int rc = set_file(c->cert_file, sizeof c->cert_file, "certificate file", cert, err);
	return rc != 0 ? rc : set_file(c->key_file, sizeof c->key_file, "key file", key, err);
}

/* What a connection closed without an answer may mean, for the message. A controller
 * closes a plain HTTP connection to its TLS port, and (yardd --tls-client-ca) a TLS one
 * without a client certificate its CA signed, without a word (h2o sends no alert). */
static const char *closed_hint(const struct ctl_client *c, const char *base, CURLcode cc)
{
	if (cc != CURLE_GOT_NOTHING && cc != CURLE_RECV_ERROR && cc != CURLE_SSL_CONNECT_ERROR &&
	    cc != CURLE_SEND_ERROR)
		return "";
	if (strncmp(base, "http://", 7) == 0)
		return cc == CURLE_GOT_NOTHING ? "; a controller serving TLS closes plain HTTP "
		                                 "connections: is it https://?"
		                               : "";
	return c->cert_file[0] ? "; a controller that requires client certificates closes "
	                         "connections whose certificate its CA did not sign"
	                       : "; a controller that requires client certificates closes "
	                         "connections without one: --cert and --key?";
}

void ctl_client_close(struct ctl_client *c)
{
	if (c->curl != NULL)
		curl_easy_cleanup(c->curl);
	c->curl = NULL;
}

void ctl_response_free(struct ctl_response *r)
{
	free(r->body);
	json_decref(r->json);
	memset(r, 0, sizeof *r);
}

struct body_buf {
	char *data;
	size_t len, cap, max;
	int too_big;
};

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct body_buf *b = userdata;
	size_t n = size * nmemb;
	if (b->len + n + 1 > b->max) {
		b->too_big = 1;
		return 0;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *d = realloc(b->data, cap);
		if (d == NULL)
			return 0;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

/* One HTTP exchange with base+path. Returns 0 with resp filled when a status came back, or
 * an error describing the transport failure. */
static int perform(struct ctl_client *c, const char *base, const char *method, const char *path,
                   const struct ctl_body *body, const char *request_id, struct ctl_response *resp,
                   char *location, size_t location_len, struct yard_err *err)
{
	CURL *curl = c->curl;
	struct curl_slist *headers = NULL;
	struct body_buf buf = {.max =
	                           c->max_response_bytes ? c->max_response_bytes : BODY_MAX_BYTES};
	char content_type[96];
	char url[CTL_URL_MAX + 2048], rid_header[CTL_REQUEST_ID_LEN + 32];
	char why[CURL_ERROR_SIZE] = "";
	CURLcode cc;
	int rc = 0;

	if ((size_t)snprintf(url, sizeof url, "%s%s", base, path) >= sizeof url)
		return yard_err_set(err, YARD_EINVAL, "URL too long");
	curl_easy_reset(curl);
	headers = curl_slist_append(headers, c->auth_header);
	headers = curl_slist_append(headers, "Accept: application/json");
	if (body != NULL) {
		snprintf(content_type, sizeof content_type, "Content-Type: %s",
		         body->content_type ? body->content_type : "application/json");
		headers = curl_slist_append(headers, content_type);
	}
	if (request_id != NULL) {
		snprintf(rid_header, sizeof rid_header, "X-Request-Id: %s", request_id);
		headers = curl_slist_append(headers, rid_header);
	}
	headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, c->request_timeout_ms);
	curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "yardctl/" PACKAGE_VERSION);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &buf);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, why);
	if (c->ca_file[0] != '\0')
		curl_easy_setopt(curl, CURLOPT_CAINFO, c->ca_file);
	if (c->cert_file[0] != '\0') {
		curl_easy_setopt(curl, CURLOPT_SSLCERT, c->cert_file);
		curl_easy_setopt(curl, CURLOPT_SSLKEY, c->key_file);
	}
	if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
	} else {
		curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body ? body->data : "");
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)(body ? body->len : 0));
	}
	cc = curl_easy_perform(curl);
	curl_slist_free_all(headers);
	if (cc != CURLE_OK) {
		if (buf.too_big)
			rc = yard_err_set(err, YARD_EIO, "response over %zu bytes", buf.max);
		else if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE)
			rc = yard_err_set(
			    err, YARD_EPERM, "TLS: %s%s", why[0] ? why : curl_easy_strerror(cc),
			    c->ca_file[0]
			        ? ""
			        : " (give the cluster's CA with --cacert or YARD_CACERT)");
		else
			rc = yard_err_set(
			    err, cc == CURLE_OPERATION_TIMEDOUT ? YARD_ETIMEDOUT : YARD_EIO, "%s%s",
			    why[0] ? why : curl_easy_strerror(cc), closed_hint(c, base, cc));
		free(buf.data);
		return rc;
	}
	memset(resp, 0, sizeof *resp);
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp->status);
	location[0] = '\0';
	if (resp->status >= 300 && resp->status < 400) {
		char *loc = NULL;
		if (curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc)
			snprintf(location, location_len, "%s", loc);
	}
	resp->body = buf.data ? buf.data : strdup("");
	resp->body_len = buf.len;
	if (resp->body_len > 0)
		resp->json = json_loadb(resp->body, resp->body_len, 0, NULL);
	snprintf(resp->endpoint, sizeof resp->endpoint, "%s", base);
	return 0;
}

/* Failures seen so far, one per endpoint, for the final message. */
struct attempt_log {
	char text[400];
};

static void log_failure(struct attempt_log *log, const char *base, const char *what)
{
	size_t n = strlen(log->text);
	char entry[CTL_URL_MAX + 128];
	snprintf(entry, sizeof entry, "%s (%s)", base, what);
	if (strstr(log->text, entry) != NULL)
		return;
	snprintf(log->text + n, sizeof log->text - n, "%s%s", n ? ", " : "", entry);
}

int ctl_client_request(struct ctl_client *c, const char *method, const char *path, const char *body,
                       const char *request_id, struct ctl_response *resp, struct yard_err *err)
{
	struct ctl_body json = {body, body ? strlen(body) : 0, NULL};
	return ctl_client_send(c, method, path, body ? &json : NULL, request_id, resp, err);
}

int ctl_client_send(struct ctl_client *c, const char *method, const char *path,
                    const struct ctl_body *body, const char *request_id, struct ctl_response *resp,
                    struct yard_err *err)
{
	struct attempt_log log = {{0}};
	int saw_503 = 0;
	int redirects = 0, failures = 0, rounds = 0;
	long backoff_ms = c->backoff_first_ms;

	memset(resp, 0, sizeof *resp);
	for (;;) {
		struct yard_err aerr = {0};
		char location[CTL_URL_MAX + 2048], base[CTL_URL_MAX];
		snprintf(base, sizeof base, "%s",
		         c->leader[0] ? c->leader : c->endpoints[c->next_endpoint]);
		log_debug("%s %s%s", method, base, path);
		int rc = perform(c, base, method, path, body, request_id, resp, location,
		                 sizeof location, &aerr);
		if (rc == 0 && resp->status == 307) {
			char leader[CTL_URL_MAX];
			struct yard_err rerr = {0};
			const char *target = location;
			json_t *url = json_object_get(resp->json, "leader_url");
			if (target[0] == '\0' && json_is_string(url))
				target = json_string_value(url);
			rc = ctl_redirect_base(target, path, leader, sizeof leader, &rerr);
			if (rc != 0) {
				ctl_response_free(resp);
				return yard_err_set(err, rc, "%s sent a bad %s", base, rerr.msg);
			}
			if (++redirects > CTL_REDIRECTS_MAX) {
				ctl_response_free(resp);
				return yard_err_set(
				    err, YARD_EIO,
				    "more than %d leader redirects (last from %s to %s): "
				    "the cluster is changing leaders",
				    CTL_REDIRECTS_MAX, base, leader);
			}
			log_debug("%s: leader is %s", base, leader);
			snprintf(c->leader, sizeof c->leader, "%s", leader);
			ctl_response_free(resp);
			continue;
		}
		if (rc == 0 && resp->status != 503)
			return 0;
		if (rc == YARD_EPERM) /* a certificate that does not verify: not transient */
			return yard_err_set(err, rc, "%s: %s", base, aerr.msg);
		/* No answer, or 503 (no leader yet, shutting down): try elsewhere. */
		if (rc == 0) {
			json_t *e = json_object_get(resp->json, "error");
			char what[200];
			snprintf(what, sizeof what, "503: %s",
			         json_is_string(e) ? json_string_value(e) : "unavailable");
			log_failure(&log, base, what);
			ctl_response_free(resp);
			saw_503 = 1;
		} else {
			log_failure(&log, base, aerr.msg);
		}
		log_debug("%s: %s", base, rc == 0 ? "503" : aerr.msg);
		/* Every failure counts, a remembered leader's too: while an election runs, a
		 * follower may keep redirecting to the dead leader, and only the failure budget
		 * (with back-off) bounds that. A pure redirect loop is bounded by redirects. */
		c->leader[0] = '\0';
		redirects = 0;
		c->next_endpoint = (c->next_endpoint + 1) % c->endpoint_count;
		if (++failures % c->endpoint_count != 0)
			continue;
		if (rounds++ >= c->retry_rounds) {
			return yard_err_set(err, YARD_EIO, "no controller %s %s %s; tried %s",
			                    saw_503 ? "could serve" : "answered", method, path,
			                    log.text);
		}
		log_debug("all endpoints failed; retrying in %ld ms", backoff_ms);
		yard_sleep_ms((uint64_t)backoff_ms);
		backoff_ms = YARD_MIN(backoff_ms * 2, c->backoff_max_ms);
	}
}

void ctl_response_describe(const struct ctl_response *r, char *out, size_t out_len)
{
	json_t *e = json_object_get(r->json, "error");
	json_t *f = json_object_get(r->json, "field");
	if (json_is_string(e) && json_is_string(f))
		snprintf(out, out_len, "%ld from %s: %s (field %s)", r->status, r->endpoint,
		         json_string_value(e), json_string_value(f));
	else if (json_is_string(e))
		snprintf(out, out_len, "%ld from %s: %s", r->status, r->endpoint,
		         json_string_value(e));
	else
		snprintf(out, out_len, "%ld from %s: %.200s", r->status, r->endpoint,
		         r->body && r->body[0] ? r->body : "(empty body)");
}
