/* buildinfo.c: what this yard-agent or yard-worker binary says it is: its version and, for
 * tests of the rollout machinery, a deliberate fault. Each binary that calls these carries its
 * own pair of slots (the object is linked only into the binaries that use it).
 *
 * Both live in fixed-size slots in the binary's data, each starting with a unique marker, so
 * scripts/mark-build can make a real copy of a built binary that reports another version
 * (a "new build") or misbehaves on purpose (a "bad build") without recompiling. A marked copy
 * is byte-for-byte the same program otherwise; its sha256 changes like any new build's.
 * Faults (BUILD_FAULT_*), optionally limited to some nodes: "self-test" makes --self-test fail,
 * "crash" makes the agent abort right after start-up, "no-heartbeat" makes it run without ever
 * heartbeating, "slow-start" makes it wait BUILD_SLOW_START_MS before it starts (yard-worker
 * honours only "self-test"). Release builds carry "none". The slots
 * are read through volatile pointers so the compiler cannot fold the compiled-in values into
 * the code. */
#include <stdio.h>
#include <string.h>

#include "common/buildinfo.h"
#include "config.h"

#define VERSION_MARKER "YARD-BUILD-VERSION:"
#define FAULT_MARKER "YARD-BUILD-FAULT:"
#define SLOT_LEN 64

__attribute__((used)) static volatile const char version_slot[SLOT_LEN] =
    VERSION_MARKER PACKAGE_VERSION;
__attribute__((used)) static volatile const char fault_slot[SLOT_LEN] = FAULT_MARKER "none";

static void slot_value(const volatile char *slot, size_t marker_len, char *out, size_t out_len)
{
	size_t n = 0;
	for (size_t i = marker_len; i < SLOT_LEN && slot[i] != '\0' && n + 1 < out_len; i++)
		out[n++] = slot[i];
	out[n] = '\0';
}

void buildinfo_version(char *out, size_t out_len)
{
	slot_value(version_slot, sizeof VERSION_MARKER - 1, out, out_len);
	if (out[0] == '\0')
		snprintf(out, out_len, "%s", PACKAGE_VERSION);
}

/* The fault slot holds "KIND" or "KIND:NODE,NODE,...": the fault only on those nodes, so one
 * build can pass on a rollout's first wave and fail on its second. */
enum build_fault buildinfo_fault(const char *node)
{
	char fault[SLOT_LEN];
	slot_value(fault_slot, sizeof FAULT_MARKER - 1, fault, sizeof fault);
	char *nodes = strchr(fault, ':');
	if (nodes != NULL) {
		int listed = 0;
		*nodes++ = '\0';
		for (char *save = NULL, *n = strtok_r(nodes, ",", &save); n != NULL;
		     n = strtok_r(NULL, ",", &save))
			listed |= node != NULL && strcmp(n, node) == 0;
		if (!listed)
			return BUILD_FAULT_NONE;
	}
	if (strcmp(fault, "self-test") == 0)
		return BUILD_FAULT_SELF_TEST;
	if (strcmp(fault, "crash") == 0)
		return BUILD_FAULT_CRASH;
	if (strcmp(fault, "no-heartbeat") == 0)
		return BUILD_FAULT_NO_HEARTBEAT;
	if (strcmp(fault, "slow-start") == 0)
		return BUILD_FAULT_SLOW_START;
	return BUILD_FAULT_NONE;
}
