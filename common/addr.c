/* addr.c: "a.b.c.d:port" checked whole (addr.h). */
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "common/addr.h"

int yard_addr_parse(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = s ? strrchr(s, ':') : NULL;
	char h[INET_ADDRSTRLEN];
	struct in_addr a;
	if (colon == NULL || (size_t)(colon - s) >= sizeof h)
		return -1;
	memcpy(h, s, (size_t)(colon - s));
	h[colon - s] = '\0';
	if (inet_pton(AF_INET, h, &a) != 1)
		return -1;
	long p = 0;
	const char *d = colon + 1;
	for (; *d >= '0' && *d <= '9' && p <= 65535; d++)
		p = p * 10 + (*d - '0');
	if (d == colon + 1 || *d != '\0' || p < 1 || p > 65535)
		return -1;
	if (host != NULL) {
		if (strlen(h) >= hostlen)
			return -1;
		snprintf(host, hostlen, "%s", h);
	}
	if (port != NULL)
		*port = (int)p;
	return 0;
}
