/* fuzz_fsm.c: the replicated state machine applying commands. The input is a sequence of
 * commands, one per line (the JSON text a raft entry carries, as fsm_apply gets it), applied
 * in order, each as its own raft entry, to two fresh state machines. Properties: apply never
 * fails (a result for every command), both machines end with the same database (apply is
 * deterministic), the event hash chain verifies, and the reads the API serves from that state
 * (jobs, nodes, events, running slots, members, tokens) answer. */
#include "config.h"

#include <string.h>

#include <sqlite3.h>

#include "jobs/fsm.h"
#include "tests/fuzz/fuzz.h"

#define COMMANDS_MAX 256

static void apply_all(struct fsm *f, const uint8_t *data, size_t size)
{
	size_t at = 0;
	for (int k = 0; at < size && k < COMMANDS_MAX; k++) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
		fsm_apply_batch_begin(f);
		if (fsm_apply(f, data + at, len) == NULL)
			fuzz_fail("command %d: no result", k);
		if (fsm_apply_batch_end(f) != 0)
			fuzz_fail("command %d: the entry's commit failed", k);
		at += len + 1;
	}
}

static void read_all(struct fsm *f)
{
	struct yard_err err = {0};
	json_decref(fsm_jobs_list(f, NULL, NULL, 100, &err));
	json_decref(fsm_jobs_list(f, "running", NULL, 100, &err));
	json_decref(fsm_nodes_list(f, &err));
	json_decref(fsm_events_list(f, 0, 100, NULL, &err));
	json_decref(fsm_audit_list(f, 0, 100, 0, &err));
	json_decref(fsm_jobs_active(f));
	json_decref(fsm_running_slots(f));
	json_decref(fsm_members_list(f, &err));
	json_decref(fsm_tokens_list(f, &err));
	json_decref(fsm_builds_list(f, &err));
	const int64_t *rowids;
	int n = 0;
	if (fsm_jobs_changed_take(f, &rowids, &n) == 0)
		for (int i = 0; i < n && i < 64; i++)
			json_decref(fsm_job_by_rowid(f, rowids[i]));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fsm a, b;
	struct yard_err err = {0};
	unsigned char *ia, *ib;
	size_t la, lb;
	if (fsm_init(&a, &err) != 0 || fsm_init(&b, &err) != 0)
		fuzz_fail("fsm_init: %s", err.msg);
	apply_all(&a, data, size);
	apply_all(&b, data, size);
	/* the images, compared byte for byte (what fsm_digest hashes) */
	if (fsm_serialize(&a, &ia, &la, &err) != 0 || fsm_serialize(&b, &ib, &lb, &err) != 0)
		fuzz_fail("fsm_serialize: %s", err.msg);
	if (la != lb || memcmp(ia, ib, la) != 0)
		fuzz_fail("two state machines fed the same commands hold different databases");
	sqlite3_free(ia);
	sqlite3_free(ib);
	if (fsm_events_verify(&a, &err) != 0)
		fuzz_fail("the event chain does not verify: %s", err.msg);
	read_all(&a);
	fsm_close(&a);
	fsm_close(&b);
	return 0;
}
