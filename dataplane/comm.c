/* comm.c: communicator lifecycle: yd_comm_init (listen, connect, start the progress thread),
 * split (an allgather of (color, key) on the parent; the child multiplexes over the parent's
 * connections under a new comm id), abort, destroy and the accessors. Environment-driven init
 * and the rendezvous file are in comm_env.c. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "dataplane/yd_impl.h"

#define DEFAULT_TIMEOUT_MS 30000

uint64_t comm_deadline(const yd_comm *comm)
{
	return yard_now_mono_ns() + (uint64_t)comm->timeout_ms * 1000000ull;
}

int comm_check(yd_comm *comm)
{
	pthread_mutex_lock(&comm->net->mu);
	int rc = comm->failed_rc;
	pthread_mutex_unlock(&comm->net->mu);
	return rc;
}

static yd_comm *comm_new(struct yd_net *net, uint64_t id, int rank, int size)
{
	yd_comm *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->net_rank = calloc((size_t)size, sizeof *c->net_rank);
	c->labels = calloc((size_t)size, sizeof *c->labels);
	if (!c->net_rank || !c->labels) {
		free(c->net_rank);
		free(c->labels);
		free(c);
		return NULL;
	}
	c->net = net;
	c->id = id;
	c->rank = rank;
	c->size = size;
	c->timeout_ms = net->timeout_ms;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->worker_cond, &ca);
	pthread_condattr_destroy(&ca);
	return c;
}

static void comm_register(yd_comm *c)
{
	struct yd_net *net = c->net;
	pthread_mutex_lock(&net->mu);
	c->net_next = net->comms;
	net->comms = c;
	net->refs++;
	pthread_mutex_unlock(&net->mu);
}

static void set_err(char *errbuf, size_t len, const char *msg)
{
	if (errbuf && len)
		snprintf(errbuf, len, "%s", msg);
}

static void host_of(const char *endpoint, char *out, size_t len)
{
	snprintf(out, len, "%s", endpoint);
	char *colon = strrchr(out, ':');
	if (colon)
		*colon = 0;
}

/* Shared by yd_comm_init and yd_comm_init_env (which listens before it knows its peers). */
int comm_init_listening(const struct yd_config *cfg, int listen_fd, yd_comm **out, char *errbuf,
                        size_t errbuf_len)
{
	char err[1024] = "";
	*out = NULL;
	if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size ||
	    !cfg->endpoints) {
		set_err(errbuf, errbuf_len, "init: invalid rank/world_size/endpoints");
		if (listen_fd >= 0)
			close(listen_fd);
		return YARD_EINVAL;
	}
	struct yd_net *net = calloc(1, sizeof *net);
	if (!net)
		return YARD_ENOMEM;
	pthread_mutex_init(&net->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&net->cond, &ca);
	pthread_condattr_destroy(&ca);
	net->rank = cfg->rank;
	net->world = cfg->world_size;
	net->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
	net->wake_fd = -1;
	net->peers = calloc((size_t)cfg->world_size, sizeof *net->peers);
	if (!net->peers) {
		net_free(net);
		return YARD_ENOMEM;
	}
	for (int p = 0; p < cfg->world_size; p++) {
		struct net_peer *pp = &net->peers[p];
		pp->fd = -1;
		if (!cfg->endpoints[p]) {
			snprintf(err, sizeof err, "init: no endpoint for rank %d", p);
			set_err(errbuf, errbuf_len, err);
			net_free(net);
			return YARD_EINVAL;
		}
		snprintf(pp->addr, sizeof pp->addr, "%s", cfg->endpoints[p]);
		if (cfg->host_labels && cfg->host_labels[p])
			snprintf(pp->label, sizeof pp->label, "%s", cfg->host_labels[p]);
		else
			host_of(pp->addr, pp->label, sizeof pp->label);
	}
	int rc = 0;
	if (listen_fd < 0 && cfg->world_size > 1) {
		int port;
		rc = net_listen(cfg->endpoints[cfg->rank], &listen_fd, &port, err, sizeof err);
		if (rc) {
			char msg[1100];
			snprintf(msg, sizeof msg, "init: rank %d: %s", cfg->rank, err);
			set_err(errbuf, errbuf_len, msg);
			net_free(net);
			return rc;
		}
	}
	if (cfg->world_size > 1) {
		uint64_t deadline = yard_now_mono_ns() + (uint64_t)net->timeout_ms * 1000000ull;
		rc = net_connect_all(net, listen_fd, deadline, err, sizeof err);
	}
	if (listen_fd >= 0)
		close(listen_fd);
	if (rc) {
		char msg[1100];
		snprintf(msg, sizeof msg, "init: rank %d of %d: %s", cfg->rank, cfg->world_size,
		         err);
		set_err(errbuf, errbuf_len, msg);
		net_free(net);
		return rc;
	}
	rc = net_start(net);
	yd_comm *c = rc ? NULL : comm_new(net, 1, cfg->rank, cfg->world_size);
	if (!c) {
		set_err(errbuf, errbuf_len, "init: out of memory");
		net_free(net);
		return YARD_ENOMEM;
	}
	for (int i = 0; i < c->size; i++) {
		c->net_rank[i] = i;
		c->labels[i] = net->peers[i].label;
	}
	c->algo = cfg->algo;
	comm_register(c);
	*out = c;
	return 0;
}

int yd_comm_init(const struct yd_config *cfg, yd_comm **out, char *errbuf, size_t errbuf_len)
{
	if (!cfg || !out)
		return YARD_EINVAL;
	return comm_init_listening(cfg, -1, out, errbuf, errbuf_len);
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

int yd_allgather_internal(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                          enum yd_dtype dt, enum coll_kind kind, uint64_t *seq_out);

int yd_comm_split(yd_comm *comm, int color, int key, yd_comm **out)
{
	if (!comm || !out)
		return YARD_EINVAL;
	*out = NULL;
	int32_t mine[2] = {color < 0 ? -1 : color, key};
	int32_t *all = calloc((size_t)comm->size * 2, sizeof *all);
	if (!all)
		return YARD_ENOMEM;
	uint64_t seq = 0;
	int rc = yd_allgather_internal(comm, mine, all, 2, YD_I32, COLL_SPLIT, &seq);
	if (rc || color < 0) {
		free(all);
		return rc;
	}
	int n = 0, my_new = 0;
	int *members = calloc((size_t)comm->size, sizeof *members);
	if (!members) {
		free(all);
		return YARD_ENOMEM;
	}
	for (int r = 0; r < comm->size; r++) {
		if (all[2 * r] != color)
			continue;
		/* insertion by (key, old rank) */
		int pos = n++;
		while (pos > 0) {
			int q = members[pos - 1];
			if (all[2 * q + 1] < all[2 * r + 1] ||
			    (all[2 * q + 1] == all[2 * r + 1] && q < r))
				break;
			members[pos] = q;
			pos--;
		}
		members[pos] = r;
	}
	for (int i = 0; i < n; i++)
		if (members[i] == comm->rank)
			my_new = i;
	uint64_t id = mix64(comm->id ^ mix64(seq * 0x9e3779b97f4a7c15ull + (uint64_t)color + 1));
	yd_comm *c = comm_new(comm->net, id, my_new, n);
	if (!c) {
		free(all);
		free(members);
		return YARD_ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		c->net_rank[i] = comm->net_rank[members[i]];
		c->labels[i] = comm->labels[members[i]];
	}
	c->timeout_ms = comm->timeout_ms;
	c->algo = comm->algo;
	free(all);
	free(members);
	comm_register(c);
	*out = c;
	return 0;
}

void yd_comm_abort(yd_comm *comm)
{
	if (!comm)
		return;
	struct yd_net *net = comm->net;
	pthread_mutex_lock(&net->mu);
	comm_fail_locked(comm, YARD_EABORTED, 1, "rank %d aborted the communicator", comm->rank);
	int is_world = comm->id == 1;
	if (is_world)
		for (yd_comm *c = net->comms; c; c = c->net_next)
			comm_fail_locked(c, YARD_EABORTED, 0,
			                 "rank %d aborted the world communicator", comm->rank);
	pthread_mutex_unlock(&net->mu);
	if (is_world)
		net_shutdown_sockets(net);
}

void yd_comm_destroy(yd_comm *comm)
{
	if (!comm)
		return;
	struct yd_net *net = comm->net;
	coll_stop_worker(comm);
	pthread_mutex_lock(&net->mu);
	for (yd_comm **pp = &net->comms; *pp; pp = &(*pp)->net_next)
		if (*pp == comm) {
			*pp = comm->net_next;
			break;
		}
	/* drop unexpected messages nobody will receive */
	for (struct unexp **up = &net->unexp, *prev = NULL; *up;) {
		struct unexp *u = *up;
		if (u->hdr.comm_id != comm->id || !u->complete || u->claimed) {
			prev = u;
			up = &u->next;
			continue;
		}
		*up = u->next;
		if (net->unexp_tail == u)
			net->unexp_tail = prev;
		free(u->data);
		free(u);
	}
	int last = --net->refs == 0;
	pthread_mutex_unlock(&net->mu);
	for (int i = 0; i < 3; i++)
		free(comm->scratch[i]);
	pthread_cond_destroy(&comm->worker_cond);
	free(comm->net_rank);
	free(comm->labels);
	free(comm);
	if (last)
		net_free(net);
}

int yd_comm_rank(const yd_comm *comm)
{
	return comm->rank;
}

int yd_comm_size(const yd_comm *comm)
{
	return comm->size;
}

const char *yd_comm_last_error(const yd_comm *comm)
{
	return comm->last_error;
}

enum yd_transport yd_comm_transport(const yd_comm *comm, int peer)
{
	(void)comm;
	(void)peer;
	return YD_TRANSPORT_TCP;
}

void yd_comm_set_timeout(yd_comm *comm, int timeout_ms)
{
	comm->timeout_ms = timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS;
}

void yd_comm_set_algo(yd_comm *comm, enum yd_algo algo)
{
	if ((unsigned)algo < YD_ALGO_COUNT)
		comm->algo = algo;
}
