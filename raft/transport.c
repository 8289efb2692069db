/* transport.c: TCP_NODELAY wrapper around raft_uv_tcp (see transport.h). It forwards
 * calls, sets uv_tcp_nodelay on each stream handed to raft, and remembers the sockets it
 * connects to peers so the TCP state of a peer's connection can be asked for. */
#include "raft/transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/log.h"

struct connect_req {
	struct raft_uv_connect inner;
	struct raft_uv_connect *outer;
	raft_uv_connect_cb cb;
	struct nodelay_transport *t;
	raft_id id;
};

static void tune(struct nodelay_transport *t, struct uv_stream_s *stream)
{
	if (stream != NULL && stream->type == UV_TCP) {
		int rc = uv_tcp_nodelay((uv_tcp_t *)stream, 1);
		if (rc != 0)
			log_warn("raft transport: TCP_NODELAY failed: %s", uv_strerror(rc));
		else
			t->streams_tuned++;
	}
}

/* Remembers the socket of a new connection to peer id (replacing an older one). */
static void remember(struct nodelay_transport *t, raft_id id, uv_stream_t *stream)
{
	uv_os_fd_t fd;
	int slot = -1;
	if (uv_fileno((uv_handle_t *)stream, &fd) != 0)
		return;
	for (int i = 0; i < NODELAY_PEERS_MAX; i++) {
		if (t->peers[i].id == id)
			t->peers[i].id = 0;
		if (t->peers[i].id == 0 && slot < 0)
			slot = i;
	}
	if (slot < 0)
		return;
	t->peers[slot].peer_len = sizeof t->peers[slot].peer;
	if (getpeername(fd, (struct sockaddr *)&t->peers[slot].peer, &t->peers[slot].peer_len) != 0)
		return;
	t->peers[slot].id = id;
	t->peers[slot].fd = fd;
	t->peers[slot].reported = 0;
}

int nodelay_transport_peer_closed(struct nodelay_transport *t, raft_id id)
{
	for (int i = 0; i < NODELAY_PEERS_MAX; i++) {
		if (t->peers[i].id != id || id == 0)
			continue;
		if (t->peers[i].reported)
			return 0;
		struct tcp_info info;
		socklen_t len = sizeof info;
		struct sockaddr_storage now;
		socklen_t now_len = sizeof now;
		memset(&info, 0, sizeof info);
		if (getsockopt(t->peers[i].fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
			return 0; /* closed by raft_uv (and not reused): it reconnects */
		/* CLOSE_WAIT: the peer sent FIN; CLOSE: a reset (or raft_uv is closing it) */
		if (info.tcpi_state != TCP_CLOSE_WAIT && info.tcpi_state != TCP_CLOSE)
			return 0;
		/* a reset socket has no peer name left; a reused descriptor has another one */
		if (getpeername(t->peers[i].fd, (struct sockaddr *)&now, &now_len) == 0 &&
		    (now_len != t->peers[i].peer_len ||
		     memcmp(&now, &t->peers[i].peer, now_len) != 0))
			return 0;
		t->peers[i].reported = 1;
		return 1;
	}
	return 0;
}

static struct nodelay_transport *outer_of(struct raft_uv_transport *inner)
{
	return inner->data;
}

static int t_init(struct raft_uv_transport *super, raft_id id, const char *address)
{
	struct nodelay_transport *t = (struct nodelay_transport *)super;
	int rc = t->inner.init(&t->inner, id, address);
	if (rc != 0)
		memcpy(super->errmsg, t->inner.errmsg, sizeof super->errmsg);
	return rc;
}

static void accept_cb(struct raft_uv_transport *inner, raft_id id, const char *address,
                      struct uv_stream_s *stream)
{
	struct nodelay_transport *t = outer_of(inner);
	tune(t, stream);
	t->accept_cb(&t->super, id, address, stream);
}

static int t_listen(struct raft_uv_transport *super, raft_uv_accept_cb cb)
{
	struct nodelay_transport *t = (struct nodelay_transport *)super;
	t->accept_cb = cb;
	int rc = t->inner.listen(&t->inner, accept_cb);
	if (rc != 0)
		memcpy(super->errmsg, t->inner.errmsg, sizeof super->errmsg);
	return rc;
}

static void connect_cb(struct raft_uv_connect *inner_req, struct uv_stream_s *stream, int status)
{
	struct connect_req *req = inner_req->data;
	if (status == 0) {
		tune(req->t, stream);
		remember(req->t, req->id, stream);
	}
	raft_uv_connect_cb cb = req->cb;
	struct raft_uv_connect *outer = req->outer;
	free(req);
	cb(outer, stream, status);
}

static int t_connect(struct raft_uv_transport *super, struct raft_uv_connect *outer, raft_id id,
                     const char *address, raft_uv_connect_cb cb)
{
	struct nodelay_transport *t = (struct nodelay_transport *)super;
	struct connect_req *req = calloc(1, sizeof *req);
	if (req == NULL)
		return RAFT_NOMEM;
	req->inner.data = req;
	req->outer = outer;
	req->cb = cb;
	req->t = t;
	req->id = id;
	int rc = t->inner.connect(&t->inner, &req->inner, id, address, connect_cb);
	if (rc != 0) {
		memcpy(super->errmsg, t->inner.errmsg, sizeof super->errmsg);
		free(req);
	}
	return rc;
}

static void close_cb(struct raft_uv_transport *inner)
{
	struct nodelay_transport *t = outer_of(inner);
	if (t->close_cb != NULL)
		t->close_cb(&t->super);
}

static void t_close(struct raft_uv_transport *super, raft_uv_transport_close_cb cb)
{
	struct nodelay_transport *t = (struct nodelay_transport *)super;
	t->close_cb = cb;
	t->inner.close(&t->inner, close_cb);
}

int nodelay_transport_init(struct nodelay_transport *t, struct uv_loop_s *loop)
{
	memset(t, 0, sizeof *t);
	int rc = raft_uv_tcp_init(&t->inner, loop);
	if (rc != 0)
		return rc;
	t->inner.data = t;
	t->super.init = t_init;
	t->super.listen = t_listen;
	t->super.connect = t_connect;
	t->super.close = t_close;
	return 0;
}

void nodelay_transport_close(struct nodelay_transport *t)
{
	raft_uv_tcp_close(&t->inner);
}
