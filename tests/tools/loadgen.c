/* loadgen.c: yard-loadgen, an HTTP load generator for the controller benchmarks (not a test).
 *
 *   yard-loadgen submit --endpoints URL[,URL..] --token T --clients N --requests R
 *                       [--body FILE] [--path /v1/jobs] [--cacert FILE]
 *       keeps N requests in flight (libcurl multi, keep-alive, 307s followed to the leader),
 *       sends R POSTs in all and prints one JSON line:
 *       {"clients":N,"requests":R,"ok":..,"errors":..,"seconds":..,"per_s":..,"p50_ms":..,"p99_ms":..}
 *   yard-loadgen until-write --endpoints URL[,URL..] --token T [--timeout-ms 10000]
 *                            [--kill-pid PID]
 *       sends SIGKILL to PID (when given), then retries one small write (every 5 ms, over
 *       every endpoint) until one succeeds and prints the milliseconds from the kill: the
 *       "time until the next write succeeds" of a failover measurement.
 * --cacert FILE: https:// endpoints are verified against these CA certificates.
 */
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_ENDPOINTS 16

static const char *ca_file; /* --cacert, NULL: the system's */

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static size_t discard(char *p, size_t s, size_t n, void *u)
{
	return s * n;
}

static size_t to_stderr(char *p, size_t s, size_t n, void *u)
{
	fwrite(p, s, n, stderr);
	return s * n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct slot {
	CURL *easy;
	double started_ms;
	int index;
	char request_id[48];
	struct curl_slist *headers;
};

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	long n;
	char *buf;
	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void setup_easy(struct slot *s, const char *url, const char *auth, const char *body, int seq)
{
	char rid[80];
	curl_easy_reset(s->easy);
	curl_slist_free_all(s->headers);
	s->headers = NULL;
	snprintf(rid, sizeof rid, "X-Request-Id: lg-%d-%d", (int)getpid(), seq);
	if (auth[0] != '\0') /* an empty token: no Authorization header (etcd's gateway) */
		s->headers = curl_slist_append(s->headers, auth);
	s->headers = curl_slist_append(s->headers, "Content-Type: application/json");
	s->headers = curl_slist_append(s->headers, rid);
	curl_easy_setopt(s->easy, CURLOPT_URL, url);
	curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->headers);
	curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(s->easy, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(s->easy, CURLOPT_POSTREDIR, (long)CURL_REDIR_POST_ALL);
	/* a follower's 307 names another member: the token goes along, as yardctl re-sends it
	 * (curl drops a custom Authorization header on a redirect to another host or port) */
	curl_easy_setopt(s->easy, CURLOPT_UNRESTRICTED_AUTH, 1L);
	curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(s->easy, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(s->easy, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
	curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s->easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
	if (ca_file != NULL)
		curl_easy_setopt(s->easy, CURLOPT_CAINFO, ca_file);
}

static int cmd_submit(const char *endpoint, const char *token, int clients, int requests,
                      const char *body, const char *path)
{
	char url[1024], auth[512];
	CURLM *multi = curl_multi_init();
	struct slot *slots = calloc((size_t)clients, sizeof *slots);
	double *lat = calloc((size_t)requests, sizeof *lat);
	int sent = 0, done = 0, ok = 0, errors = 0, running = 0;
	double t0;

	snprintf(url, sizeof url, "%s%s", endpoint, path);
	if (token[0] != '\0')
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
	else
		auth[0] = '\0';
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)clients);
	t0 = now_ms();
	for (int i = 0; i < clients && sent < requests; i++) {
		slots[i].easy = curl_easy_init();
		slots[i].index = i;
		setup_easy(&slots[i], url, auth, body, sent++);
		slots[i].started_ms = now_ms();
		curl_multi_add_handle(multi, slots[i].easy);
	}
	while (done < requests) {
		CURLMsg *msg;
		int left;
		curl_multi_perform(multi, &running);
		while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
			struct slot *s;
			long code = 0;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
			curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
			lat[done++] = now_ms() - s->started_ms;
			if (msg->data.result == CURLE_OK && code >= 200 && code < 300)
				ok++;
			else
				errors++;
			curl_multi_remove_handle(multi, s->easy);
			if (sent < requests) {
				setup_easy(s, url, auth, body, sent++);
				s->started_ms = now_ms();
				curl_multi_add_handle(multi, s->easy);
			}
		}
		if (done < requests)
			curl_multi_poll(multi, NULL, 0, 100, NULL);
	}
	{
		double secs = (now_ms() - t0) / 1e3;
		qsort(lat, (size_t)requests, sizeof *lat, cmp_double);
		printf("{\"clients\":%d,\"requests\":%d,\"ok\":%d,\"errors\":%d,\"seconds\":%.3f,"
		       "\"per_s\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f}\n",
		       clients, requests, ok, errors, secs, ok / secs, lat[requests / 2],
		       lat[(int)(requests * 0.99)]);
	}
	for (int i = 0; i < clients; i++)
		if (slots[i].easy != NULL) {
			curl_slist_free_all(slots[i].headers);
			curl_easy_cleanup(slots[i].easy);
		}
	curl_multi_cleanup(multi);
	free(slots);
	free(lat);
	return errors == 0 ? 0 : 1;
}

static int cmd_until_write(char endpoints[][512], int n_endpoints, const char *token,
                           double timeout_ms, int kill_pid)
{
	char auth[512];
	double t0 = now_ms();
	if (kill_pid > 0 && kill(kill_pid, SIGKILL) != 0) {
		perror("yard-loadgen: kill");
		return 1;
	}
	int attempt = 0;
	/* YARD_LOADGEN_TRACE=1: every attempt on stderr, to see where a failover's time goes */
	int trace = getenv("YARD_LOADGEN_TRACE") != NULL;
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
	while (now_ms() - t0 < timeout_ms) {
		for (int e = 0; e < n_endpoints; e++) {
			char url[1024];
			long code = 0;
			struct slot s = {0};
			CURLcode rc;
			s.easy = curl_easy_init();
			snprintf(url, sizeof url, "%s/v1/tokens", endpoints[e]);
			setup_easy(&s, url, auth, "{\"name\":\"failover-probe\",\"role\":\"user\"}",
			           attempt++);
			curl_easy_setopt(s.easy, CURLOPT_TIMEOUT_MS, 300L);
			curl_easy_setopt(s.easy, CURLOPT_CONNECTTIMEOUT_MS, 100L);
			if (trace)
				curl_easy_setopt(s.easy, CURLOPT_WRITEFUNCTION, to_stderr);
			double a0 = now_ms();
			rc = curl_easy_perform(s.easy);
			curl_easy_getinfo(s.easy, CURLINFO_RESPONSE_CODE, &code);
			if (trace) {
				char *eff = NULL;
				curl_easy_getinfo(s.easy, CURLINFO_EFFECTIVE_URL, &eff);
				fprintf(stderr,
				        "\nuntil-write: +%.1f ms %s (last %s): %s, HTTP %ld (%.1f "
				        "ms)\n",
				        a0 - t0, endpoints[e], eff ? eff : "-",
				        curl_easy_strerror(rc), code, now_ms() - a0);
			}
			curl_slist_free_all(s.headers);
			curl_easy_cleanup(s.easy);
			if (rc == CURLE_OK && code >= 200 && code < 300) {
				printf("%.1f\n", now_ms() - t0);
				return 0;
			}
		}
		usleep(5000);
	}
	printf("timeout\n");
	return 1;
}

static void usage(void)
{
	fprintf(stderr, "usage: yard-loadgen submit --endpoints URLS --token T --clients N "
	                "--requests R [--body FILE] [--path P]\n"
	                "       yard-loadgen until-write --endpoints URLS --token T "
	                "[--timeout-ms MS] [--kill-pid PID]\n");
}

int main(int argc, char **argv)
{
	char endpoints[MAX_ENDPOINTS][512];
	int n_endpoints = 0, clients = 16, requests = 1000, rc;
	const char *token = "", *body_file = NULL, *path = "/v1/jobs";
	char *body = NULL;
	double timeout_ms = 10000;
	int kill_pid = 0;

	if (argc < 2) {
		usage();
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--endpoints") == 0) {
			char *list = strdup(argv[i + 1]), *save = NULL;
			for (char *t = strtok_r(list, ",", &save); t && n_endpoints < MAX_ENDPOINTS;
			     t = strtok_r(NULL, ",", &save))
				snprintf(endpoints[n_endpoints++], sizeof endpoints[0], "%s", t);
			free(list);
		} else if (strcmp(argv[i], "--token") == 0)
			token = argv[i + 1];
		else if (strcmp(argv[i], "--clients") == 0)
			clients = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--requests") == 0)
			requests = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--body") == 0)
			body_file = argv[i + 1];
		else if (strcmp(argv[i], "--path") == 0)
			path = argv[i + 1];
		else if (strcmp(argv[i], "--timeout-ms") == 0)
			timeout_ms = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--kill-pid") == 0)
			kill_pid = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--cacert") == 0)
			ca_file = argv[i + 1];
		else {
			usage();
			return 2;
		}
	}
	if (n_endpoints == 0 || clients < 1 || requests < 1) {
		usage();
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (strcmp(argv[1], "submit") == 0) {
		body = body_file != NULL ? read_file(body_file) : NULL;
		if (body_file != NULL && body == NULL) {
			fprintf(stderr, "yard-loadgen: cannot read %s\n", body_file);
			return 1;
		}
		rc = cmd_submit(endpoints[0], token, clients, requests,
		                body != NULL ? body : "{\"name\":\"bench\"}", path);
	} else if (strcmp(argv[1], "until-write") == 0) {
		rc = cmd_until_write(endpoints, n_endpoints, token, timeout_ms, kill_pid);
	} else {
		usage();
		rc = 2;
	}
	free(body);
	curl_global_cleanup();
	return rc;
}
