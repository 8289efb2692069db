/* comm.c: communicators: creation from a peer list, from the environment (peer list or a
 * rendezvous file), split into sub-groups, abort, destroy, and the sticky error state.
 * Transports are chosen per peer here (shm between equal host labels, else TCP); the bytes
 * move in transport_*.c and xfer.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "dataplane/dp.h"

static const char *const transport_names[YD_TRANSPORT_COUNT] = {"auto", "shm", "tcp", "rdma"};

const char *yd_transport_name(enum yd_transport t)
{
	return (unsigned)t < YD_TRANSPORT_COUNT ? transport_names[t] : "?";
}

int yd_transport_parse(const char *name)
{
	for (int i = 0; name && i < YD_TRANSPORT_COUNT; i++)
		if (strcmp(name, transport_names[i]) == 0)
			return i;
	return -1;
}

const char *dp_peer_desc(yd_comm *c, int rank, char *buf, size_t len)
{
	snprintf(buf, len, "peer rank %d (host %s)", rank,
	         rank >= 0 && rank < c->size ? c->peers[rank].endpoint : "?");
	return buf;
}

int dp_fail(yd_comm *c, int code, int culprit, const char *fmt, ...)
{
	va_list ap;
	int first = 0;
	pthread_mutex_lock(&c->err_lock);
	if (!atomic_load(&c->failed)) {
		va_start(ap, fmt);
		vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
		va_end(ap);
		atomic_store(&c->failed, code);
		first = 1;
	}
	code = atomic_load(&c->failed);
	pthread_mutex_unlock(&c->err_lock);
	if (first) {
		log_debug("rank %d: %s", c->rank, c->errmsg);
		dp_send_note(c, DP_NOTE_FAIL, culprit, code, c->errmsg);
		dp_wake(c);
	}
	return code;
}

void dp_wake(yd_comm *c)
{
	uint64_t one = 1;
	if (c->wake_fd >= 0) {
		ssize_t r = write(c->wake_fd, &one, sizeof one);
		(void)r;
	}
	if (c->doorbell)
		dp_shm_ring_doorbell(c->doorbell, c->waiting);
}

void *dp_scratch(yd_comm *c, size_t len)
{
	if (len <= c->scratch_len)
		return c->scratch;
	free(c->scratch);
	c->scratch_len = 0;
	c->scratch = malloc(len ? len : 1);
	if (c->scratch)
		c->scratch_len = len;
	return c->scratch;
}

static char *host_of_endpoint(const char *ep)
{
	const char *colon = strrchr(ep, ':');
	size_t n = colon ? (size_t)(colon - ep) : strlen(ep);
	char *h = malloc(n + 1);
	if (h) {
		memcpy(h, ep, n);
		h[n] = 0;
	}
	return h;
}

static uint64_t random_nonce(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof v, 0) != sizeof v)
		v = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ yard_now_mono_ns();
	return v;
}

static void comm_free(yd_comm *c)
{
	if (!c)
		return;
	for (int i = 0; c->peers && i < c->size; i++) {
		struct dp_peer *p = &c->peers[i];
		if (i != c->rank) {
			if (p->ctl_fd >= 0)
				close(p->ctl_fd);
			for (int k = 0; k < p->nsock; k++) {
				if (p->tx[k].fd >= 0)
					close(p->tx[k].fd);
				free(p->rx[k].piece);
			}
		}
		free(p->endpoint);
		free(p->label);
	}
	dp_shm_teardown(c);
	dp_rdma_teardown(c);
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	free(c->peers);
	free(c->host_of);
	free(c->scratch);
	dp_cuda_comm_free(c);
	pthread_mutex_destroy(&c->err_lock);
	pthread_mutex_destroy(&c->note_lock);
	pthread_mutex_destroy(&c->q_lock);
	pthread_cond_destroy(&c->q_cond);
	free(c);
}

/* A whole decimal integer in [lo, hi] from the environment into *out; unset or empty leaves
 * *out, anything else is YARD_EINVAL naming the variable and what it wants. */
static int env_int(const char *name, long lo, long hi, int *out, char *err, size_t errlen)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return 0;
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || *end || end == v || n < lo || n > hi) {
		snprintf(err, errlen, "%s=%s: want an integer in [%ld, %ld]", name, v, lo, hi);
		return YARD_EINVAL;
	}
	*out = (int)n;
	return 0;
}

/* An endpoint is HOST:PORT with a host and a decimal port in [0, 65535]. */
static int endpoint_ok(const char *ep)
{
	const char *colon = ep ? strrchr(ep, ':') : NULL;
	if (!colon || colon == ep || !colon[1] || strlen(colon + 1) > 5)
		return 0;
	for (const char *d = colon + 1; *d; d++)
		if (*d < '0' || *d > '9')
			return 0;
	return atoi(colon + 1) <= 65535;
}

/* Creates the communicator over an already-bound listening socket (which it closes). */
static int comm_create(const struct yd_config *cfg, int listen_fd, yd_comm **out, char *err,
                       size_t errlen)
{
	int rc;
	yd_comm *c = calloc(1, sizeof *c);
	if (!c) {
		close(listen_fd);
		return YARD_ENOMEM;
	}
	pthread_mutex_init(&c->err_lock, NULL);
	pthread_mutex_init(&c->note_lock, NULL);
	pthread_mutex_init(&c->q_lock, NULL);
	pthread_cond_init(&c->q_cond, NULL);
	c->wake_fd = -1;
	c->cuda_device = -1;
	c->rank = cfg->rank;
	c->size = cfg->world_size;
	c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
	c->algo = cfg->algo;
	c->transport_cfg = cfg->transport;
	c->socks_per_peer = cfg->tcp_sockets_per_peer > 0 ? cfg->tcp_sockets_per_peer : 1;
	if (c->socks_per_peer > DP_TCP_MAX_SOCKS)
		c->socks_per_peer = DP_TCP_MAX_SOCKS;
	c->nonce = random_nonce();
	c->peers = calloc((size_t)c->size, sizeof *c->peers);
	c->host_of = calloc((size_t)c->size, sizeof *c->host_of);
	if (!c->peers || !c->host_of) {
		rc = YARD_ENOMEM;
		goto fail;
	}
	for (int i = 0; i < c->size; i++) {
		struct dp_peer *p = &c->peers[i];
		p->rank = i;
		p->ctl_fd = -1;
		for (int k = 0; k < DP_TCP_MAX_SOCKS; k++)
			p->tx[k].fd = p->rx[k].fd = -1;
		p->endpoint = strdup(cfg->endpoints[i]);
		p->label = cfg->host_labels && cfg->host_labels[i]
		               ? strdup(cfg->host_labels[i])
		               : host_of_endpoint(cfg->endpoints[i]);
		if (!p->endpoint || !p->label) {
			rc = YARD_ENOMEM;
			goto fail;
		}
	}
	for (int i = 0; i < c->size; i++) {
		int h = -1;
		for (int j = 0; j < i && h < 0; j++)
			if (strcmp(c->peers[j].label, c->peers[i].label) == 0)
				h = c->host_of[j];
		c->host_of[i] = h >= 0 ? h : c->nhosts++;
	}
	/* shm between equal host labels (unless TCP or RDMA is forced), TCP otherwise; RDMA
	 * replaces TCP per pair in dp_rdma_setup (forced: every pair, or an error naming why) */
	for (int i = 0; i < c->size; i++) {
		int same = c->host_of[i] == c->host_of[c->rank];
		enum yd_transport t = YD_TRANSPORT_TCP;
		if (cfg->transport == YD_TRANSPORT_RDMA)
			t = YD_TRANSPORT_RDMA;
		else if (same && (cfg->transport == YD_TRANSPORT_AUTO ||
		                  cfg->transport == YD_TRANSPORT_SHM))
			t = YD_TRANSPORT_SHM;
		c->peers[i].transport = i == c->rank ? YD_TRANSPORT_AUTO : t;
	}
	if (cfg->transport == YD_TRANSPORT_RDMA) {
		char why[200];
		/* before connecting anyone: every rank of a forced-RDMA job fails the same way */
		if (!dp_rdma_device_present(why, sizeof why)) {
			snprintf(err, errlen, "transport rdma: %s", why);
			rc = YARD_EUNSUPPORTED;
			goto fail;
		}
	}
	c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->wake_fd < 0) {
		rc = YARD_EIO;
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		goto fail;
	}
	rc = dp_tcp_connect_mesh(c, listen_fd, err, errlen);
	close(listen_fd);
	listen_fd = -1;
	if (rc)
		goto fail;
	rc = dp_rdma_setup(c, err, errlen);
	if (rc)
		goto fail;
	rc = dp_shm_setup(c, err, errlen);
	if (rc)
		goto fail;
	c->costs.alpha_shm = 2e-6;
	c->costs.beta_shm = 0.4e-9;
	c->costs.alpha_tcp = 15e-6;
	c->costs.beta_tcp = 0.35e-9;
	c->costs.gamma = 0.25e-9;
	dp_algo_init(c);
	/* a CPU-only machine runs on, silently: every buffer is host memory there (the
	 * process's one debug line about the missing GPU comes from cuda.c) */
	if (cfg->cuda) {
		char why[200];
		dp_cuda_enable(c, why, sizeof why);
	}
	c->calibrate_cfg = cfg->calibrate;
	c->tune.on = cfg->tune >= 0;
	c->tune.max_bytes = DP_TUNE_MAX_BYTES;
	if (c->algo == YD_ALGO_AUTO && cfg->calibrate >= 0 && (rc = dp_calibrate(c)) != 0) {
		pthread_mutex_lock(&c->err_lock);
		snprintf(err, errlen, "calibrating the allreduce algorithms: %s",
		         c->errmsg[0] ? c->errmsg : yard_strerror(rc));
		pthread_mutex_unlock(&c->err_lock);
		goto fail;
	}
	*out = c;
	return 0;
fail:
	if (listen_fd >= 0)
		close(listen_fd);
	comm_free(c);
	return rc;
}

static int listen_on_endpoint(const char *ep, int *fd, char *err, size_t errlen)
{
	char *host = host_of_endpoint(ep);
	const char *colon = strrchr(ep, ':');
	int port_out, rc;
	if (!host)
		return YARD_ENOMEM;
	rc = dp_tcp_listen(host, colon ? atoi(colon + 1) : 0, fd, &port_out, err, errlen);
	free(host);
	return rc;
}

static int bad_config(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_config(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(err, errlen, "bad config: ");
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < errlen)
		vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return YARD_EINVAL;
}

static int check_config(const struct yd_config *cfg, char *err, size_t errlen)
{
	if (!cfg)
		return bad_config(err, errlen, "no config");
	if (cfg->world_size < 1)
		return bad_config(err, errlen, "world_size %d (want >= 1)", cfg->world_size);
	if (cfg->rank < 0 || cfg->rank >= cfg->world_size)
		return bad_config(err, errlen, "rank %d out of range [0, %d]", cfg->rank,
		                  cfg->world_size - 1);
	if (!cfg->endpoints)
		return bad_config(err, errlen, "no endpoints (one host:port per rank)");
	for (int i = 0; i < cfg->world_size; i++)
		if (!endpoint_ok(cfg->endpoints[i]))
			return bad_config(
			    err, errlen,
			    "endpoint of rank %d is '%s', want host:port (port 0-65535)", i,
			    cfg->endpoints[i] ? cfg->endpoints[i] : "(null)");
	if ((unsigned)cfg->transport >= YD_TRANSPORT_COUNT)
		return bad_config(err, errlen, "unknown transport %d", (int)cfg->transport);
	if ((unsigned)cfg->algo >= YD_ALGO_COUNT)
		return bad_config(err, errlen, "unknown algorithm %d", (int)cfg->algo);
	return 0;
}

int yd_comm_init(const struct yd_config *cfg, yd_comm **out, char *errbuf, size_t errbuf_len)
{
	char dummy[8];
	int fd, rc;
	if (!errbuf) {
		errbuf = dummy;
		errbuf_len = sizeof dummy;
	}
	errbuf[0] = 0;
	if (!out)
		return YARD_EINVAL;
	*out = NULL;
	if ((rc = check_config(cfg, errbuf, errbuf_len)) != 0)
		return rc;
	rc = listen_on_endpoint(cfg->endpoints[cfg->rank], &fd, errbuf, errbuf_len);
	if (rc)
		return rc;
	return comm_create(cfg, fd, out, errbuf, errbuf_len);
}

static char **split_list(const char *s, int *n)
{
	int cap = 8, cnt = 0;
	char **v = malloc(sizeof *v * (size_t)cap);
	const char *p = s;
	while (v && p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (cnt == cap) {
			char **nv = realloc(v, sizeof *v * (size_t)(cap *= 2));
			if (!nv)
				break;
			v = nv;
		}
		v[cnt] = strndup(p, len);
		cnt++;
		p = comma ? comma + 1 : NULL;
	}
	*n = cnt;
	return v;
}

static void free_list(char **v, int n)
{
	for (int i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* Appends "rank host:port" to the file and waits until every rank has done the same. */
static int rendezvous_file(const char *path, int rank, int world, const char *addr, int port,
                           int timeout_ms, char **eps, char *err, size_t errlen)
{
	char line[320];
	int n = snprintf(line, sizeof line, "%d %s:%d\n", rank, addr, port);
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(err, errlen, "rendezvous file %s: %s", path, strerror(errno));
		return YARD_EIO;
	}
	flock(fd, LOCK_EX);
	ssize_t w = write(fd, line, (size_t)n);
	flock(fd, LOCK_UN);
	close(fd);
	if (w != n) {
		snprintf(err, errlen, "rendezvous file %s: short write", path);
		return YARD_EIO;
	}
	uint64_t deadline = yard_now_mono_ms() + (uint64_t)timeout_ms;
	for (;;) {
		int have = 0;
		FILE *f = fopen(path, "r");
		if (f) {
			while (fgets(line, sizeof line, f)) {
				int r;
				char ep[300];
				if (sscanf(line, "%d %299s", &r, ep) == 2 && r >= 0 && r < world) {
					free(eps[r]);
					eps[r] = strdup(ep);
				}
			}
			fclose(f);
		}
		for (int i = 0; i < world; i++)
			have += eps[i] != NULL;
		if (have == world)
			return 0;
		if (yard_now_mono_ms() >= deadline) {
			size_t used = (size_t)snprintf(
			    err, errlen, "rendezvous: timed out after %d ms in %s; missing",
			    timeout_ms, path);
			for (int i = 0; i < world && used < errlen; i++)
				if (!eps[i])
					used += (size_t)snprintf(err + used, errlen - used,
					                         " rank %d", i);
			return YARD_ETIMEDOUT;
		}
		yard_sleep_ms(5);
	}
}

/* A 0/1 switch from the environment into *on; unset or empty leaves *on, anything else is
 * YARD_EINVAL naming the variable. */
static int env_switch(const char *name, int *on, char *errbuf, size_t len)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return 0;
	if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
		snprintf(errbuf, len, "%s=%s: want 0 or 1", name, v);
		return YARD_EINVAL;
	}
	*on = v[0] == '1';
	return 0;
}

int yd_comm_init_env(yd_comm **out, char *errbuf, size_t errbuf_len)
{
	char dummy[8];
	struct yd_config cfg;
	char **eps = NULL, **labels = NULL;
	int neps = 0, nlabels = 0, fd = -1, rc;
	if (!errbuf) {
		errbuf = dummy;
		errbuf_len = sizeof dummy;
	}
	errbuf[0] = 0;
	if (!out)
		return YARD_EINVAL;
	*out = NULL;
	memset(&cfg, 0, sizeof cfg);
	const char *rank_s = getenv("YARD_RANK"), *world_s = getenv("YARD_WORLD_SIZE");
	if (!rank_s || !*rank_s || !world_s || !*world_s) {
		snprintf(errbuf, errbuf_len, "YARD_RANK and YARD_WORLD_SIZE must be set");
		return YARD_EINVAL;
	}
	if ((rc = env_int("YARD_WORLD_SIZE", 1, INT_MAX, &cfg.world_size, errbuf, errbuf_len)) ||
	    (rc = env_int("YARD_RANK", 0, INT_MAX, &cfg.rank, errbuf, errbuf_len)) ||
	    (rc = env_int("YARD_TIMEOUT_MS", 0, INT_MAX, &cfg.timeout_ms, errbuf, errbuf_len)) ||
	    (rc = env_int("YARD_TCP_SOCKETS", 0, DP_TCP_MAX_SOCKS, &cfg.tcp_sockets_per_peer,
	                  errbuf, errbuf_len)))
		return rc;
	if (cfg.rank >= cfg.world_size) {
		snprintf(errbuf, errbuf_len, "YARD_RANK=%s out of range for YARD_WORLD_SIZE=%s",
		         rank_s, world_s);
		return YARD_EINVAL;
	}
	const char *t = getenv("YARD_TRANSPORT"), *a = getenv("YARD_ALGO");
	if (t && *t) {
		int v = yd_transport_parse(t);
		if (v < 0) {
			snprintf(errbuf, errbuf_len,
			         "YARD_TRANSPORT=%s: unknown (auto|shm|tcp|rdma)", t);
			return YARD_EINVAL;
		}
		cfg.transport = (enum yd_transport)v;
	}
	if (a && *a) {
		int v = yd_algo_parse(a);
		if (v < 0) {
			snprintf(
			    errbuf, errbuf_len,
			    "YARD_ALGO=%s: unknown (auto|ring|rd|hd|tree|naive|ps|hier|shared)", a);
			return YARD_EINVAL;
		}
		cfg.algo = (enum yd_algo)v;
	}
	int calibrate = 1, tune = 1;
	if ((rc = env_switch("YARD_CALIBRATE", &calibrate, errbuf, errbuf_len)) != 0 ||
	    (rc = env_switch("YARD_TUNE", &tune, errbuf, errbuf_len)) != 0 ||
	    (rc = env_switch("YARD_CUDA", &cfg.cuda, errbuf, errbuf_len)) != 0)
		return rc;
	cfg.calibrate = calibrate ? 0 : -1;
	cfg.tune = tune ? 0 : -1;
	const char *peers = getenv("YARD_PEERS"), *file = getenv("YARD_RENDEZVOUS_FILE");
	const char *hosts = getenv("YARD_HOSTS");
	if (hosts && *hosts) {
		labels = split_list(hosts, &nlabels);
		if (nlabels != cfg.world_size) {
			snprintf(errbuf, errbuf_len,
			         "YARD_HOSTS has %d labels, YARD_WORLD_SIZE is %d", nlabels,
			         cfg.world_size);
			rc = YARD_EINVAL;
			goto out;
		}
	}
	if (peers && *peers) {
		eps = split_list(peers, &neps);
		if (neps != cfg.world_size) {
			snprintf(errbuf, errbuf_len,
			         "YARD_PEERS has %d entries, YARD_WORLD_SIZE is %d", neps,
			         cfg.world_size);
			rc = YARD_EINVAL;
			goto out;
		}
		cfg.endpoints = (const char *const *)eps;
		if ((rc = check_config(&cfg, errbuf, errbuf_len)) != 0)
			goto out;
		rc = listen_on_endpoint(eps[cfg.rank], &fd, errbuf, errbuf_len);
	} else if (file && *file) {
		const char *addr = getenv("YARD_ADDR");
		int port;
		if (!addr || !*addr)
			addr = "127.0.0.1";
		neps = cfg.world_size;
		eps = calloc((size_t)neps, sizeof *eps);
		if (!eps) {
			rc = YARD_ENOMEM;
			goto out;
		}
		rc = dp_tcp_listen(addr, 0, &fd, &port, errbuf, errbuf_len);
		if (rc == 0)
			rc = rendezvous_file(file, cfg.rank, cfg.world_size, addr, port,
			                     cfg.timeout_ms > 0 ? cfg.timeout_ms : 30000, eps,
			                     errbuf, errbuf_len);
		cfg.endpoints = (const char *const *)eps;
	} else {
		snprintf(errbuf, errbuf_len, "set YARD_PEERS or YARD_RENDEZVOUS_FILE");
		rc = YARD_EINVAL;
		goto out;
	}
	cfg.host_labels = (const char *const *)labels;
	if (rc == 0)
		rc = comm_create(&cfg, fd, out, errbuf, errbuf_len);
	else if (fd >= 0)
		close(fd);
out:
	free_list(eps, neps);
	free_list(labels, nlabels);
	return rc;
}

struct split_rec {
	int32_t color, key, port, pad;
};

static int cmp_member(const void *a, const void *b)
{
	const int32_t *x = a, *y = b; /* {key, rank} */
	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

int yd_comm_split(yd_comm *comm, int color, int key, yd_comm **out)
{
	char err[512];
	int fd = -1, port = 0, rc;
	if (!comm || !out)
		return YARD_EINVAL;
	*out = NULL;
	char *host = host_of_endpoint(comm->peers[comm->rank].endpoint);
	if (!host)
		return YARD_ENOMEM;
	rc = dp_tcp_listen(host, 0, &fd, &port, err, sizeof err);
	free(host);
	if (rc)
		return dp_fail(comm, rc, -1, "split: %s", err);
	struct split_rec *recs = calloc((size_t)comm->size, sizeof *recs);
	if (!recs) {
		close(fd);
		return YARD_ENOMEM;
	}
	recs[comm->rank] = (struct split_rec){color < 0 ? -1 : color, key, port, 0};
	struct dp_op o = {.kind = DP_SPLIT,
	                  .sendbuf = NULL,
	                  .recvbuf = recs,
	                  .count = 4,
	                  .dtype = YD_I32,
	                  .op = YD_SUM,
	                  .root = 0};
	rc = dp_run_blocking(comm, &o);
	if (rc || color < 0) {
		close(fd);
		free(recs);
		return rc;
	}
	int n = 0;
	int32_t *mem = calloc((size_t)comm->size, 2 * sizeof *mem);
	char **eps = calloc((size_t)comm->size, sizeof *eps);
	const char **labels = calloc((size_t)comm->size, sizeof *labels);
	if (!mem || !eps || !labels) {
		rc = YARD_ENOMEM;
		goto out;
	}
	for (int i = 0; i < comm->size; i++)
		if (recs[i].color == color) {
			mem[2 * n] = recs[i].key;
			mem[2 * n + 1] = i;
			n++;
		}
	qsort(mem, (size_t)n, 2 * sizeof *mem, cmp_member);
	struct yd_config cfg = {0};
	for (int i = 0; i < n; i++) {
		int r = mem[2 * i + 1];
		char *h = host_of_endpoint(comm->peers[r].endpoint);
		char ep[320];
		snprintf(ep, sizeof ep, "%s:%d", h ? h : "127.0.0.1", recs[r].port);
		free(h);
		eps[i] = strdup(ep);
		labels[i] = comm->peers[r].label;
		if (r == comm->rank)
			cfg.rank = i;
	}
	cfg.world_size = n;
	cfg.endpoints = (const char *const *)eps;
	cfg.host_labels = labels;
	cfg.timeout_ms = comm->timeout_ms;
	cfg.transport = comm->transport_cfg;
	cfg.algo = comm->algo;
	cfg.tcp_sockets_per_peer = comm->socks_per_peer;
	cfg.cuda = comm->cuda_enabled;
	cfg.calibrate = comm->calibrate_cfg;
	cfg.tune = comm->tune.on ? 0 : -1;
	rc = comm_create(&cfg, fd, out, err, sizeof err);
	fd = -1;
	if (rc)
		rc = dp_fail(comm, rc, -1, "split (color %d): %s", color, err);
out:
	if (fd >= 0)
		close(fd);
	for (int i = 0; eps && i < n; i++)
		free(eps[i]);
	free(eps);
	free(labels);
	free(mem);
	free(recs);
	return rc;
}

void yd_comm_abort(yd_comm *c)
{
	if (!c)
		return;
	atomic_store(&c->aborted, 1);
	dp_fail(c, YARD_EABORTED, c->rank, "rank %d aborted the communicator", c->rank);
	for (int i = 0; i < c->size; i++) {
		struct dp_peer *p = &c->peers[i];
		if (i == c->rank)
			continue;
		if (p->ctl_fd >= 0)
			shutdown(p->ctl_fd, SHUT_RDWR);
		for (int k = 0; k < p->nsock; k++)
			if (p->tx[k].fd >= 0)
				shutdown(p->tx[k].fd, SHUT_RDWR);
	}
	dp_wake(c);
}

void yd_comm_destroy(yd_comm *c)
{
	if (!c)
		return;
	dp_progress_stop(c);
	if (!atomic_load(&c->failed))
		dp_send_note(c, DP_NOTE_GOODBYE, -1, 0, "goodbye");
	comm_free(c);
}

int yd_comm_rank(const yd_comm *c)
{
	return c ? c->rank : -1;
}
int yd_comm_size(const yd_comm *c)
{
	return c ? c->size : 0;
}
const char *yd_comm_last_error(const yd_comm *c)
{
	return c ? c->errmsg : "no communicator";
}

enum yd_transport yd_comm_transport(const yd_comm *c, int peer)
{
	if (!c || peer < 0 || peer >= c->size || peer == c->rank)
		return YD_TRANSPORT_AUTO;
	return c->peers[peer].transport;
}

void yd_comm_set_timeout(yd_comm *c, int timeout_ms)
{
	if (c)
		c->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
}

void yd_comm_set_algo(yd_comm *c, enum yd_algo algo)
{
	if (c && (unsigned)algo < YD_ALGO_COUNT)
		c->algo = algo;
}
