/* client.c: the agent's HTTP calls to the controllers. The last URL that answered is tried
 * first; a 307 names the leader, which is followed once per hop (at most 3 hops); a refused
 * or timed-out connection moves on to the next controller. Answers are bounded (8 MiB, or
 * what the caller allows). */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/common.h"
#include "jobs/sha256.h"

#define CLIENT_MAX_RESPONSE (8u << 20)
#define CLIENT_MAX_URLS 16

struct response_buf {
	char *data;
	size_t len;
	size_t max;
	int overflow;
	char sha256[72]; /* the X-Yard-Sha256 header, when the answer has one */
};

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct response_buf *buf = userdata;
	size_t n = size * nmemb;
	char *grown;
	if (buf->len + n > buf->max) {
		buf->overflow = 1;
		return 0;
	}
	grown = realloc(buf->data, buf->len + n + 1);
	if (grown == NULL)
		return 0;
	buf->data = grown;
	memcpy(buf->data + buf->len, ptr, n);
	buf->len += n;
	buf->data[buf->len] = '\0';
	return n;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct response_buf *buf = userdata;
	size_t n = size * nmemb;
	static const char name[] = "x-yard-sha256:";
	if (n > sizeof name && strncasecmp(ptr, name, sizeof name - 1) == 0) {
		const char *v = ptr + sizeof name - 1;
		size_t len = n - (sizeof name - 1);
		while (len > 0 && (*v == ' ' || *v == '\t'))
			v++, len--;
		while (len > 0 && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
			len--;
		if (len < sizeof buf->sha256) {
			memcpy(buf->sha256, v, len);
			buf->sha256[len] = '\0';
		}
	}
	return n;
}

/* One connection cache for every request of the agent, whichever thread makes it: a
 * heartbeat, a watch or an upload goes over a connection an earlier request left open
 * instead of a new one each time (at 10,000 nodes, ten thousand connects and closes a
 * second for the leader). */
static CURLSH *share;
static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
static pthread_once_t share_once = PTHREAD_ONCE_INIT;

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *u)
{
	(void)h, (void)access, (void)u;
	pthread_mutex_lock(&share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *u)
{
	(void)h, (void)u;
	pthread_mutex_unlock(&share_locks[data]);
}

static void share_init(void)
{
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&share_locks[i], NULL);
	share = curl_share_init();
	if (share != NULL &&
	    (curl_share_setopt(share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
	     curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
	     curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK ||
	     curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
	     curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)) {
		curl_share_cleanup(share);
		share = NULL; /* each request then opens its own connection, as before */
	}
}

/* --cacert: the CA certificates https:// controllers are verified against ("": the
 * system's). Set once at start, before any request. */
static char ca_file[PATH_MAX];

void agent_http_set_ca_file(const char *path)
{
	snprintf(ca_file, sizeof ca_file, "%s", path);
}

/* --cert, --key: the client certificate for mutual TLS ("": none). Set once at start. */
static char cert_file[PATH_MAX], key_file[PATH_MAX];

void agent_http_set_client_cert(const char *cert, const char *key)
{
	snprintf(cert_file, sizeof cert_file, "%s", cert);
	snprintf(key_file, sizeof key_file, "%s", key);
}

/* The sockets of the agent's requests are close-on-exec: connections now outlive their
 * requests, and the ranks the agent starts must not inherit them. */
static curl_socket_t open_socket(void *data, curlsocktype purpose, struct curl_sockaddr *addr)
{
	(void)data, (void)purpose;
	return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

/* A handle for one request of the agent to url with the node's or join token: the shared
 * connection cache, close-on-exec sockets, HTTP/1.1, no signals, curl's detailed error in
 * why (CURL_ERROR_SIZE bytes), https verified against --cacert. *headers holds the
 * Authorization header (the caller may append more and frees the list); NULL without
 * memory. */
static CURL *easy_new(const char *url, const char *token, struct curl_slist **headers, char *why)
{
	char auth[300];
	CURL *curl = curl_easy_init();
	*headers = NULL;
	if (curl == NULL)
		return NULL;
	pthread_once(&share_once, share_init);
	if (share != NULL)
		curl_easy_setopt(curl, CURLOPT_SHARE, share);
	curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, open_socket);
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
	*headers = curl_slist_append(*headers, auth);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	why[0] = '\0';
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, why);
	if (ca_file[0] != '\0')
		curl_easy_setopt(curl, CURLOPT_CAINFO, ca_file);
	if (cert_file[0] != '\0') {
		curl_easy_setopt(curl, CURLOPT_SSLCERT, cert_file);
		curl_easy_setopt(curl, CURLOPT_SSLKEY, key_file);
	}
	return curl;
}

/* The status of a finished request and the target of its redirect ("" when none). */
static void answer_of(CURL *curl, long *status, char *location, size_t location_len)
{
	char *loc = NULL;
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
	location[0] = '\0';
	if (curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc != NULL)
		snprintf(location, location_len, "%s", loc);
}

/* curl's progress callback: non-zero aborts the transfer (rq->abort set). */
static int on_progress(void *data, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
	const struct agent_request *rq = data;
	return *rq->abort != 0;
}

/* One request to base_url+path. Returns 0 when an HTTP answer came (any status). */
static int request_once(const char *base_url, const struct agent_request *rq, long *status,
                        char *location, size_t location_len, struct response_buf *out, char *why,
                        size_t why_len)
{
	char url[1024], type[128], detail[CURL_ERROR_SIZE];
	struct curl_slist *headers = NULL;
	CURLcode rc;
	snprintf(url, sizeof url, "%s%s", base_url, rq->path);
	CURL *curl = easy_new(url, rq->token, &headers, detail);
	if (curl == NULL) {
		snprintf(why, why_len, "curl_easy_init failed");
		return -1;
	}
	snprintf(type, sizeof type, "Content-Type: %s",
	         rq->content_type != NULL ? rq->content_type : "application/json");
	headers = curl_slist_append(headers, type);
	headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, rq->method);
	if (strcmp(rq->method, "GET") != 0) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, rq->body != NULL ? rq->body : "");
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
	}
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, rq->timeout_ms > 0 ? rq->timeout_ms : 5000L);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(curl, CURLOPT_HEADERDATA, out);
	if (rq->abort != NULL) {
		curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(curl, CURLOPT_XFERINFODATA, (void *)rq);
		curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	}
	rc = curl_easy_perform(curl);
	if (rc == CURLE_OK) {
		answer_of(curl, status, location, location_len);
	} else {
		snprintf(why, why_len, "%s: %s%s", base_url,
		         detail[0] != '\0' ? detail : curl_easy_strerror(rc),
		         out->overflow ? " (answer too long)" : "");
	}
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);
	return rc == CURLE_OK ? 0 : -1;
}

/* "http://h:p/v1/x?y" → "http://h:p" */
static void url_origin(const char *url, char *out, size_t out_len)
{
	const char *p = strstr(url, "://");
	const char *slash = p != NULL ? strchr(p + 3, '/') : NULL;
	size_t n = slash != NULL ? (size_t)(slash - url) : strlen(url);
	if (n >= out_len)
		n = out_len - 1;
	memcpy(out, url, n);
	out[n] = '\0';
}

int agent_http_request(const char *controllers, char *leader_url, size_t leader_url_len,
                       const struct agent_request *rq, struct agent_response *rs,
                       struct yard_err *err)
{
	char urls[CLIENT_MAX_URLS][512];
	char list[1024], why[600] = "no controller configured";
	char *save = NULL, *tok;
	int n_urls = 0;

	memset(rs, 0, sizeof *rs);
	if (leader_url[0] != '\0')
		snprintf(urls[n_urls++], sizeof urls[0], "%s", leader_url);
	snprintf(list, sizeof list, "%s", controllers);
	for (tok = strtok_r(list, ",", &save); tok != NULL && n_urls < CLIENT_MAX_URLS;
	     tok = strtok_r(NULL, ",", &save)) {
		size_t len = strlen(tok);
		while (len > 0 && tok[len - 1] == '/')
			tok[--len] = '\0';
		if (len > 0 && strcmp(tok, leader_url) != 0)
			snprintf(urls[n_urls++], sizeof urls[0], "%s", tok);
	}
	for (int i = 0; i < n_urls; i++) {
		char target[512], location[1024];
		snprintf(target, sizeof target, "%s", urls[i]);
		for (int hop = 0; hop < 3; hop++) {
			struct response_buf out = {
			    .max = rq->max_response > 0 ? rq->max_response : CLIENT_MAX_RESPONSE};
			if (request_once(target, rq, &rs->status, location, sizeof location, &out,
			                 why, sizeof why) != 0) {
				free(out.data);
				break;
			}
			if ((rs->status == 307 || rs->status == 308) && location[0] != '\0') {
				free(out.data);
				url_origin(location, target, sizeof target);
				continue;
			}
			if (rs->status == 503) { /* no leader here right now: try the next member */
				snprintf(why, sizeof why, "%s: 503 %s", target,
				         out.data != NULL ? out.data : "");
				free(out.data);
				break;
			}
			rs->body = out.data;
			rs->len = out.len;
			snprintf(rs->sha256, sizeof rs->sha256, "%s", out.sha256);
			snprintf(leader_url, leader_url_len, "%s", target);
			return 0;
		}
	}
	leader_url[0] = '\0';
	return yard_err_set(err, YARD_EPEER, "%s %s: no controller answered (last: %s)", rq->method,
	                    rq->path, why);
}

int agent_http_post(const char *controllers, char *leader_url, size_t leader_url_len,
                    const char *token, const char *path, const json_t *body, long *status,
                    json_t **resp, struct yard_err *err)
{
	struct agent_response rs;
	char *body_text = json_dumps(body, JSON_COMPACT);
	if (body_text == NULL)
		return yard_err_set(err, YARD_ENOMEM, "cannot encode request body");
	struct agent_request rq = {.method = "POST",
	                           .path = path,
	                           .token = token,
	                           .body = body_text,
	                           .body_len = strlen(body_text)};
	int rc = agent_http_request(controllers, leader_url, leader_url_len, &rq, &rs, err);
	free(body_text);
	if (rc != 0)
		return rc;
	*status = rs.status;
	*resp = rs.len > 0 ? jsonx_loadb(rs.body, rs.len, 0, NULL) : NULL;
	free(rs.body);
	return 0;
}

struct download {
	FILE *out;
	struct sha256_ctx sha;
	int64_t bytes, max_bytes;
	int overflow, write_failed;
};

static size_t on_download(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct download *d = userdata;
	size_t n = size * nmemb;
	if (d->bytes + (int64_t)n > d->max_bytes) {
		d->overflow = 1;
		return 0;
	}
	if (fwrite(ptr, 1, n, d->out) != n) {
		d->write_failed = 1;
		return 0;
	}
	sha256_update(&d->sha, ptr, n);
	d->bytes += (int64_t)n;
	return n;
}

/* One GET of url into d (its file rewound and its digest restarted first). Returns the
 * curl code; *status the HTTP status, location the redirect's target ("" when none). */
static CURLcode download_once(const char *url, const char *token, struct download *d, long *status,
                              char *location, size_t location_len, char why[CURL_ERROR_SIZE])
{
	struct curl_slist *headers = NULL;
	CURL *curl = easy_new(url, token, &headers, why);
	*status = 0;
	location[0] = '\0';
	if (curl == NULL)
		return CURLE_OUT_OF_MEMORY;
	rewind(d->out);
	if (ftruncate(fileno(d->out), 0) != 0)
		d->write_failed = 1;
	d->bytes = 0;
	d->overflow = 0;
	sha256_init(&d->sha);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 120000L);
	curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_download);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, d);
	CURLcode rc = curl_easy_perform(curl);
	if (rc == CURLE_OK)
		answer_of(curl, status, location, location_len);
	else
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);
	return rc;
}

int agent_http_download(const char *url, const char *token, const char *path, int64_t max_bytes,
                        char sha256_hex[SHA256_HEX_LEN + 1], int64_t *bytes, struct yard_err *err)
{
	uint8_t digest[SHA256_DIGEST_LEN];
	struct download d = {.max_bytes = max_bytes};
	char target[1024], location[1024], why[CURL_ERROR_SIZE] = "";
	long status = 0;
	CURLcode rc = CURLE_OK;

	d.out = fopen(path, "wbe");
	if (d.out == NULL)
		return yard_err_set(err, YARD_EIO, "download to %s: %s", path, strerror(errno));
	/* a member that is no longer the leader answers 307 naming the one that is: followed
	 * here, at most 3 hops, with the node's token (curl itself would send the Authorization
	 * header only to the first host) */
	snprintf(target, sizeof target, "%s", url);
	for (int hop = 0; hop < 4; hop++) {
		rc = download_once(target, token, &d, &status, location, sizeof location, why);
		if (rc != CURLE_OK || (status != 307 && status != 308) || location[0] == '\0' ||
		    hop == 3)
			break;
		snprintf(target, sizeof target, "%s", location);
	}
	if (fflush(d.out) != 0 || fsync(fileno(d.out)) != 0)
		d.write_failed = 1;
	fclose(d.out);
	if (d.overflow)
		return yard_err_set(err, YARD_ECORRUPT,
		                    "download %s: more than the %lld bytes expected", target,
		                    (long long)max_bytes);
	if (d.write_failed)
		return yard_err_set(err, YARD_EIO, "download %s: cannot write %s: %s", target, path,
		                    strerror(errno));
	if (rc != CURLE_OK)
		return yard_err_set(err, YARD_EPEER, "download %s: %s%s%ld", target,
		                    why[0] != '\0' ? why : curl_easy_strerror(rc),
		                    status ? ": HTTP " : "", status);
	if (status != 200)
		return yard_err_set(err, YARD_EPEER, "download %s: HTTP %ld", target, status);
	sha256_final(&d.sha, digest);
	sha256_to_hex(digest, sha256_hex);
	*bytes = d.bytes;
	return 0;
}
