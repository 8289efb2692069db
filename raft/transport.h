/* transport.h: a raft_uv transport that forwards to raft_uv_tcp and sets TCP_NODELAY on
 * every connected and accepted stream. raft 0.15 never does, and Nagle plus delayed ACKs
 * add 40 ms stalls to replication (shared/research/raft-probe.md §4.2).
 *
 * It also remembers the socket of each connection raft_uv opens to a peer, so that a
 * caller can ask whether the peer's end has been closed (nodelay_transport_peer_closed).
 * When a peer's process dies (SIGKILL, OOM kill, segfault) its kernel closes that end at
 * once, long before an election timeout says the peer is silent. raft_uv only writes on
 * these streams and reacts to errors in its write callbacks, so the wrapper never reads
 * them (a read error would make libuv refuse raft_uv's next write synchronously, which
 * raft 0.15 turns into RAFT_UNAVAILABLE): it asks the kernel for the TCP state instead.
 * A peer machine that goes silent without closing anything is found by raft's timeouts. */
#ifndef YARD_RAFT_TRANSPORT_H
#define YARD_RAFT_TRANSPORT_H

#include <raft.h>
#include <raft/uv.h>
#include <sys/socket.h>

#define NODELAY_PEERS_MAX 16 /* peer connections remembered (raft_uv has one per peer) */

struct nodelay_transport {
	struct raft_uv_transport super; /* what raft_uv_init gets; must stay first */
	struct raft_uv_transport inner; /* raft_uv_tcp */
	raft_uv_accept_cb accept_cb;
	raft_uv_transport_close_cb close_cb;
	unsigned long streams_tuned; /* streams that got TCP_NODELAY (for tests and metrics) */
	struct {
		raft_id id; /* 0: free */
		int fd;     /* the socket when connected; may be closed and reused since */
		int reported;
		struct sockaddr_storage peer; /* to tell a reused descriptor from ours */
		socklen_t peer_len;
	} peers[NODELAY_PEERS_MAX];
};

/* Initializes the wrapper and the raft_uv_tcp transport inside it. */
int nodelay_transport_init(struct nodelay_transport *t, struct uv_loop_s *loop);
/* 1 once per connection: the latest connection raft_uv opened to peer id has been closed
 * by the peer's end (FIN or RST received). 0 otherwise, also when nothing is known. */
int nodelay_transport_peer_closed(struct nodelay_transport *t, raft_id id);
/* Releases the inner transport's memory, after raft_uv has closed it. */
void nodelay_transport_close(struct nodelay_transport *t);

#endif
