/* comm_env.c: yd_comm_init_env. Reads YARD_RANK, YARD_WORLD_SIZE, YARD_PEERS or
 * YARD_RENDEZVOUS_FILE, YARD_HOSTS, YARD_TIMEOUT_MS, YARD_TRANSPORT, YARD_ALGO.
 *
 * The rendezvous file: each rank listens on port 0 (on YARD_BIND, default all interfaces),
 * appends "rank host:port\n" under flock, then polls the file until every rank is listed or
 * the deadline passes ("missing ranks 2, 5"). The advertised host is YARD_ADDR, else the
 * machine's host name. A rank listed twice takes its last line (a restarted rank). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/clock.h"
#include "dataplane/yd_impl.h"

int comm_init_listening(const struct yd_config *cfg, int listen_fd, yd_comm **out, char *errbuf,
                        size_t errbuf_len);

static int env_int(const char *name, int dflt, int *out)
{
	const char *v = getenv(name);
	if (!v || !*v) {
		*out = dflt;
		return 0;
	}
	char *end;
	long x = strtol(v, &end, 10);
	if (*end || x < 0 || x > 1000000000)
		return YARD_EINVAL;
	*out = (int)x;
	return 0;
}

/* Splits "a,b,c" into exactly n strings (copies into *storage). */
static int split_list(const char *s, int n, char ***out, char **storage)
{
	*storage = strdup(s);
	char **v = calloc((size_t)n, sizeof *v);
	if (!*storage || !v) {
		free(v);
		return YARD_ENOMEM;
	}
	int i = 0;
	char *save = NULL;
	for (char *tok = strtok_r(*storage, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (i >= n) {
			free(v);
			return YARD_EINVAL;
		}
		v[i++] = tok;
	}
	if (i != n) {
		free(v);
		return YARD_EINVAL;
	}
	*out = v;
	return 0;
}

static int rendezvous(const char *path, int rank, int world, const char *my_endpoint,
                      int timeout_ms, char ***endpoints_out, char **storage, char *err,
                      size_t errlen)
{
	int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(err, errlen, "rendezvous file %s: %s", path, strerror(errno));
		return YARD_EIO;
	}
	char line[300];
	int len = snprintf(line, sizeof line, "%d %s\n", rank, my_endpoint);
	flock(fd, LOCK_EX);
	ssize_t w = write(fd, line, (size_t)len);
	flock(fd, LOCK_UN);
	if (w != len) {
		close(fd);
		snprintf(err, errlen, "rendezvous file %s: write failed", path);
		return YARD_EIO;
	}
	char **eps = calloc((size_t)world, sizeof *eps);
	*storage = NULL;
	if (!eps) {
		close(fd);
		return YARD_ENOMEM;
	}
	uint64_t deadline = yard_now_mono_ms() + (uint64_t)timeout_ms;
	for (;;) {
		for (int i = 0; i < world; i++) {
			free(eps[i]);
			eps[i] = NULL;
		}
		flock(fd, LOCK_SH);
		FILE *f = fopen(path, "r");
		if (f) {
			int r;
			char ep[260];
			while (fscanf(f, "%d %259s", &r, ep) == 2)
				if (r >= 0 && r < world) {
					free(eps[r]);
					eps[r] = strdup(ep);
				}
			fclose(f);
		}
		flock(fd, LOCK_UN);
		int have = 0;
		for (int i = 0; i < world; i++)
			have += eps[i] != NULL;
		if (have == world)
			break;
		if (yard_now_mono_ms() >= deadline) {
			size_t off = (size_t)snprintf(
			    err, errlen, "rendezvous %s: timed out after %d ms; missing rank(s)",
			    path, timeout_ms);
			for (int i = 0; i < world && off < errlen; i++)
				if (!eps[i])
					off += (size_t)snprintf(err + off, errlen - off, " %d", i);
			for (int i = 0; i < world; i++)
				free(eps[i]);
			free(eps);
			close(fd);
			return YARD_ETIMEDOUT;
		}
		yard_sleep_ms(10);
	}
	close(fd);
	*endpoints_out = eps;
	return 0;
}

int yd_comm_init_env(yd_comm **out, char *errbuf, size_t errbuf_len)
{
	char err[1024] = "";
	int rank, world, timeout_ms;
	struct yd_config cfg = {0};
	char **eps = NULL, **labels = NULL, *eps_storage = NULL, *labels_storage = NULL;
	int eps_owned = 0, listen_fd = -1, rc;
	*out = NULL;
	if (env_int("YARD_RANK", -1, &rank) || env_int("YARD_WORLD_SIZE", 0, &world) ||
	    env_int("YARD_TIMEOUT_MS", 0, &timeout_ms) || rank < 0 || world < 1 || rank >= world) {
		snprintf(errbuf, errbuf_len,
		         "init: YARD_RANK / YARD_WORLD_SIZE / YARD_TIMEOUT_MS missing or invalid");
		return YARD_EINVAL;
	}
	cfg.rank = rank;
	cfg.world_size = world;
	cfg.timeout_ms = timeout_ms;
	const char *t = getenv("YARD_TRANSPORT"), *a = getenv("YARD_ALGO");
	if (t && *t && (rc = yd_transport_parse(t)) < 0) {
		snprintf(errbuf, errbuf_len, "init: YARD_TRANSPORT=%s is not auto|shm|tcp|rdma", t);
		return YARD_EINVAL;
	}
	cfg.transport = t && *t ? (enum yd_transport)yd_transport_parse(t) : YD_TRANSPORT_AUTO;
	if (a && *a && yd_algo_parse(a) < 0) {
		snprintf(errbuf, errbuf_len,
		         "init: YARD_ALGO=%s is not auto|ring|rd|hd|tree|naive|ps|hier", a);
		return YARD_EINVAL;
	}
	cfg.algo = a && *a ? (enum yd_algo)yd_algo_parse(a) : YD_ALGO_AUTO;
	const char *peers = getenv("YARD_PEERS"), *rdv = getenv("YARD_RENDEZVOUS_FILE");
	const char *hosts = getenv("YARD_HOSTS");
	if (peers && *peers) {
		if ((rc = split_list(peers, world, &eps, &eps_storage))) {
			snprintf(errbuf, errbuf_len,
			         "init: YARD_PEERS needs %d comma-separated host:port", world);
			free(eps_storage);
			return rc;
		}
	} else if (rdv && *rdv) {
		const char *bind_host = getenv("YARD_BIND");
		char bind_ep[300], my_ep[300], host[256];
		int port;
		snprintf(bind_ep, sizeof bind_ep, "%s:0",
		         bind_host && *bind_host ? bind_host : "*");
		if ((rc = net_listen(bind_ep, &listen_fd, &port, err, sizeof err))) {
			snprintf(errbuf, errbuf_len, "init: rank %d: %s", rank, err);
			return rc;
		}
		const char *addr = getenv("YARD_ADDR");
		if (addr && *addr)
			snprintf(host, sizeof host, "%s", addr);
		else if (gethostname(host, sizeof host) != 0)
			snprintf(host, sizeof host, "127.0.0.1");
		snprintf(my_ep, sizeof my_ep, "%s:%d", host, port);
		rc = rendezvous(rdv, rank, world, my_ep, timeout_ms > 0 ? timeout_ms : 30000, &eps,
		                &eps_storage, err, sizeof err);
		if (rc) {
			close(listen_fd);
			snprintf(errbuf, errbuf_len, "init: rank %d of %d: %s", rank, world, err);
			return rc;
		}
		eps_owned = 1;
	} else {
		snprintf(errbuf, errbuf_len, "init: set YARD_PEERS or YARD_RENDEZVOUS_FILE");
		return YARD_EINVAL;
	}
	if (hosts && *hosts && split_list(hosts, world, &labels, &labels_storage)) {
		snprintf(errbuf, errbuf_len, "init: YARD_HOSTS needs %d comma-separated labels",
		         world);
		rc = YARD_EINVAL;
		if (listen_fd >= 0)
			close(listen_fd);
		goto out;
	}
	cfg.endpoints = (const char *const *)eps;
	cfg.host_labels = (const char *const *)labels;
	rc = comm_init_listening(&cfg, listen_fd, out, errbuf, errbuf_len);
out:
	if (eps_owned)
		for (int i = 0; i < world; i++)
			free(eps[i]);
	free(eps);
	free(eps_storage);
	free(labels);
	free(labels_storage);
	return rc;
}
