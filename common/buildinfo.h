/* buildinfo.h: what a yard-agent or yard-worker binary says it is (its version) and, for tests
 * of the rollout machinery, the deliberate fault it carries (see buildinfo.c). */
#ifndef YARD_BUILDINFO_H
#define YARD_BUILDINFO_H

#include <stddef.h>

/* the start-up delay of a build marked "slow-start": past the 5 s within which a rank's
 * yard-report once had to be read, so that a test sees a rank report through the restart */
#define BUILD_SLOW_START_MS 5500

enum build_fault {
	BUILD_FAULT_NONE,
	BUILD_FAULT_SELF_TEST,    /* --self-test fails */
	BUILD_FAULT_CRASH,        /* yard-agent aborts right after start-up */
	BUILD_FAULT_NO_HEARTBEAT, /* yard-agent runs without ever heartbeating */
	BUILD_FAULT_SLOW_START    /* yard-agent waits BUILD_SLOW_START_MS before it starts */
};

/* The version in the binary's slot (PACKAGE_VERSION unless scripts/mark-build changed it). */
void buildinfo_version(char *out, size_t out_len);
/* The fault this build carries on node (NULL: a node-less context). */
enum build_fault buildinfo_fault(const char *node);

#endif
