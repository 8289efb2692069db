/* transport.h: a raft_uv transport that forwards to raft_uv_tcp and sets TCP_NODELAY on
 * every connected and accepted stream. raft 0.15 never does, and Nagle plus delayed ACKs
 * add 40 ms stalls to replication (shared/research/raft-probe.md §4.2). */
#ifndef YARD_RAFT_TRANSPORT_H
#define YARD_RAFT_TRANSPORT_H

#include <raft.h>
#include <raft/uv.h>

struct nodelay_transport {
	struct raft_uv_transport super; /* what raft_uv_init gets; must stay first */
	struct raft_uv_transport inner; /* raft_uv_tcp */
	raft_uv_accept_cb accept_cb;
	raft_uv_transport_close_cb close_cb;
	unsigned long streams_tuned; /* streams that got TCP_NODELAY (for tests and metrics) */
};

/* Initializes the wrapper and the raft_uv_tcp transport inside it. */
int nodelay_transport_init(struct nodelay_transport *t, struct uv_loop_s *loop);
/* Releases the inner transport's memory, after raft_uv has closed it. */
void nodelay_transport_close(struct nodelay_transport *t);

#endif
