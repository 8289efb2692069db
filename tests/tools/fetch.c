/* fetch.c: yard-fetch, a node's download of a build as yard-agent makes it (agent_http_download
 * of agent/client.c), for the integration tests: it may be sent to any member, and a member
 * that is not the leader answers 307.
 *
 *   yard-fetch URL TOKEN OUT MAX_BYTES
 *
 * Writes the body to OUT and prints its size and sha256; exits 1 naming what failed. */
#include <stdio.h>
#include <stdlib.h>

#include "agent/agent.h"
#include "common/common.h"
#include "jobs/sha256.h"

int main(int argc, char **argv)
{
	char sha[SHA256_HEX_LEN + 1];
	int64_t bytes = 0;
	struct yard_err err = {0};
	char *end = NULL;
	long long max = argc == 5 ? strtoll(argv[4], &end, 10) : 0;
	if (argc != 5 || end == argv[4] || *end != '\0' || max <= 0) {
		fprintf(stderr, "usage: yard-fetch URL TOKEN OUT MAX_BYTES\n");
		return 2;
	}
	if (agent_http_download(argv[1], argv[2], argv[3], max, sha, &bytes, &err) != 0) {
		fprintf(stderr, "yard-fetch: %s\n", err.msg);
		return 1;
	}
	printf("%lld %s\n", (long long)bytes, sha);
	return 0;
}
