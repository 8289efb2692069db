/* addr.h: the IPv4 address and port form every listening address and raft address takes,
 * "a.b.c.d:port", checked whole: a port with trailing text ("7001x") or out of range, or a
 * host that is not a dotted IPv4 address, is refused rather than read as far as it parses. */
#ifndef YARD_ADDR_H
#define YARD_ADDR_H

#include <stddef.h>

/* 0 when s is "a.b.c.d:port" with a dotted-quad IPv4 host and a decimal port from 1 to 65535
 * (host, if not NULL, gets "a.b.c.d" in hostlen bytes; port, if not NULL, the port); -1
 * otherwise, nothing written. */
int yard_addr_parse(const char *s, char *host, size_t hostlen, int *port);

#endif
