/* api_store.c: the routes for builds (the blob store), advisories, the audit log and the
 * event chain check (docs/api.md). The route table, and so the role check, stays in api.c;
 * what is decided here is what the embargo hides from a principal the role check let in:
 *
 *  - content of an advisory that is not public (and the notes, advisory link, size, sha256
 *    and bytes of a build that fixes one) is shown only to admin, security and the
 *    advisory's visibility list; a node sees a build it is assigned by a rollout;
 *  - everyone else gets a redacted "maintenance" entry in listings and 403 on the object;
 *  - every such read by an allowed principal is first recorded (audit.read, replicated),
 *    then answered; a stale read on a follower cannot record, so it is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/jsonx.h"
#include "web/internal.h"

#define REDACTED_TITLE "maintenance"

/* ---- embargo decisions ---- */

enum sight {
	SIGHT_OPEN,    /* nothing embargoed */
	SIGHT_ALLOWED, /* embargoed, and this principal may see it: audit the read */
	SIGHT_DENIED,  /* embargoed, and this principal may not */
};

static enum sight advisory_sight(struct call *call, const char *id)
{
	struct fsm *f = call->s->fsm;
	if (id == NULL || !fsm_advisory_restricted(f, id))
		return SIGHT_OPEN;
	return fsm_advisory_visible(f, id, call->actor, call->role) ? SIGHT_ALLOWED : SIGHT_DENIED;
}

static enum sight build_sight(struct call *call, const json_t *build)
{
	const char *advisory = json_string_value(json_object_get(build, "advisory"));
	enum sight s = advisory_sight(call, advisory);
	if (s == SIGHT_DENIED && strcmp(call->role, "node") == 0 &&
	    fsm_build_assigned_to_node(
	        call->s->fsm, json_string_value(json_object_get(build, "version")), call->actor))
		return SIGHT_ALLOWED;
	return s;
}

/* What a principal outside the circle sees of a build. */
static json_t *build_redacted(const json_t *b)
{
	return json_pack("{s:O,s:O,s:O,s:s,s:n,s:b}", "version", json_object_get(b, "version"),
	                 "component", json_object_get(b, "component"), "state",
	                 json_object_get(b, "state"), "notes", REDACTED_TITLE, "advisory",
	                 "redacted", 1);
}

static json_t *advisory_redacted(const json_t *a)
{
	return json_pack("{s:O,s:s,s:b}", "id", json_object_get(a, "id"), "title", REDACTED_TITLE,
	                 "redacted", 1);
}

static void audited_answer(struct call *call, const json_t *result)
{
	if (json_object_get(result, "error") != NULL) {
		call_answer_result(call, result); /* not recorded, so not served */
		return;
	}
	if (call->audited_bytes != NULL) {
		unsigned char *bytes = call->audited_bytes;
		call->audited_bytes = NULL;
		call_text(call, 200, "application/octet-stream", (char *)bytes, call->audited_len);
		return;
	}
	json_t *body = call->audited_json;
	call->audited_json = NULL;
	call_json(call, 200, body);
}

/* Records "principal read what" and then answers with call->audited_json or _bytes. */
static void answer_audited(struct call *call, const char *what)
{
	if (call->stale) {
		call_error(call, 409, "stale",
		           "embargoed data is served only by the leader, which audits every read;"
		           " retry without ?stale=1");
		return;
	}
	call->request_id[0] = '\0'; /* a read is recorded each time it happens */
	call_submit(call, "audit.read", json_pack("{s:s}", "what", what), audited_answer);
}

/* Answers body (stolen), first recording the read when it showed embargoed data. */
static void answer_maybe_audited(struct call *call, json_t *body, const char *what)
{
	if (what == NULL || what[0] == '\0') {
		call_json(call, 200, body);
		return;
	}
	call->audited_json = body;
	answer_audited(call, what);
}

/* Appends ", id" (or "id") to a bounded list of names. */
static void list_add(char *out, size_t out_len, const char *id)
{
	size_t n = strlen(out);
	if (n + strlen(id) + 8 < out_len)
		snprintf(out + n, out_len - n, "%s%s", n ? ", " : "", id);
	else if (n + 5 < out_len && strcmp(out + n - 3, "...") != 0)
		snprintf(out + n, out_len - n, ", ...");
}

/* ---- builds ---- */

void h_builds_create(struct call *call)
{
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	/* The state machine checks every field (fsm_store.c); a refusal changes nothing. */
	call_submit(call, "build.create", body, call_answer_result);
}

static int parse_index(const char *s, int64_t *out)
{
	char *end;
	long long v = strtoll(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end != '\0' || v < 0 || v > INT32_MAX)
		return -1;
	*out = v;
	return 0;
}

void h_builds_chunk(struct call *call)
{
	int64_t index = 0;
	h2o_iovec_t e = call->req->entity;
	if (parse_index(call->params[1], &index) != 0) {
		call_error(call, 400, "index", "index: '%s' must be a chunk number 0..%d",
		           call->params[1], INT32_MAX);
		return;
	}
	if (e.len == 0 || e.len > FSM_CHUNK_MAX) {
		call_error(call, e.len ? 413 : 400, "body",
		           "body: a chunk is 1..%u raw bytes, got %zu", FSM_CHUNK_MAX, e.len);
		return;
	}
	char *text = malloc(base64_encoded_len(e.len) + 1);
	if (text == NULL) {
		call_error(call, 500, NULL, "no memory to encode chunk %lld", (long long)index);
		return;
	}
	base64_encode(e.base, e.len, text);
	json_t *args = json_pack("{s:s,s:I,s:s}", "version", call->params[0], "index",
	                         (json_int_t)index, "data", text);
	free(text);
	call_submit(call, "build.chunk", args, call_answer_result);
}

void h_builds_commit(struct call *call)
{
	call_submit(call, "build.commit", json_pack("{s:s}", "version", call->params[0]),
	            call_answer_result);
}

void h_builds_delete(struct call *call)
{
	call_submit(call, "build.delete", json_pack("{s:s}", "version", call->params[0]),
	            call_answer_result);
}

void h_builds_list(struct call *call)
{
	struct yard_err err = {0};
	json_t *list = fsm_builds_list(call->s->fsm, &err);
	if (list == NULL) {
		call_yard_error(call, &err);
		return;
	}
	char what[256] = ""; /* with its prefix, within audit.read's 300 characters */
	size_t i;
	json_t *b;
	json_array_foreach(list, i, b)
	{
		enum sight s = build_sight(call, b);
		if (s == SIGHT_DENIED)
			json_array_set_new(list, i, build_redacted(b));
		else if (s == SIGHT_ALLOWED)
			list_add(what, sizeof what,
			         json_string_value(json_object_get(b, "version")));
	}
	char audit[300] = "";
	if (what[0])
		snprintf(audit, sizeof audit, "embargoed builds %s (list)", what);
	answer_maybe_audited(call, json_pack("{s:o}", "builds", list), audit);
}

void h_builds_get(struct call *call)
{
	struct yard_err err = {0};
	json_t *b = fsm_build_get(call->s->fsm, call->params[0], &err);
	if (b == NULL) {
		call_yard_error(call, &err);
		return;
	}
	enum sight s = build_sight(call, b);
	if (s == SIGHT_DENIED) {
		call_json(call, 200, build_redacted(b));
		json_decref(b);
		return;
	}
	char what[128] = "";
	if (s == SIGHT_ALLOWED)
		snprintf(what, sizeof what, "embargoed build %s (metadata)", call->params[0]);
	answer_maybe_audited(call, b, what);
}

void h_builds_binary(struct call *call)
{
	struct yard_err err = {0};
	const char *version = call->params[0];
	json_t *b = fsm_build_get(call->s->fsm, version, &err);
	if (b == NULL) {
		call_yard_error(call, &err);
		return;
	}
	enum sight s = build_sight(call, b);
	const char *state = json_string_value(json_object_get(b, "state"));
	if (s == SIGHT_DENIED) {
		call_error(call, 403, NULL,
		           "build %s is under embargo and %s (role %s) may not download it",
		           version, call->actor, call->role);
	} else if (strcmp(state, "ready") != 0) {
		call_error(call, 409, NULL,
		           "build %s is %s (%lld of %lld chunks received); commit it first",
		           version, state,
		           (long long)json_integer_value(json_object_get(b, "chunks_received")),
		           (long long)json_integer_value(json_object_get(b, "chunks")));
	} else if (fsm_blob_read(call->s->fsm, "build", version, &call->audited_bytes,
	                         &call->audited_len, &err) != 0) {
		call_yard_error(call, &err);
	} else {
		h2o_req_t *req = call->req;
		const char *sha = json_string_value(json_object_get(b, "sha256"));
		h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-yard-sha256"), 0,
		                      NULL, h2o_strdup(&req->pool, sha, SIZE_MAX).base,
		                      strlen(sha));
		if (s == SIGHT_ALLOWED) {
			char what[128];
			snprintf(what, sizeof what, "embargoed build %s (binary)", version);
			answer_audited(call, what);
		} else {
			unsigned char *bytes = call->audited_bytes;
			call->audited_bytes = NULL;
			call_text(call, 200, "application/octet-stream", (char *)bytes,
			          call->audited_len);
		}
	}
	json_decref(b);
}

/* ---- advisories ---- */

void h_advisories_create(struct call *call)
{
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	call_submit(call, "advisory.create", body, call_answer_result);
}

void h_advisories_list(struct call *call)
{
	struct yard_err err = {0};
	json_t *list = fsm_advisories_list(call->s->fsm, &err);
	if (list == NULL) {
		call_yard_error(call, &err);
		return;
	}
	char what[256] = ""; /* with its prefix, within audit.read's 300 characters */
	size_t i;
	json_t *a;
	json_array_foreach(list, i, a)
	{
		const char *id = json_string_value(json_object_get(a, "id"));
		enum sight s = advisory_sight(call, id);
		if (s == SIGHT_DENIED)
			json_array_set_new(list, i, advisory_redacted(a));
		else if (s == SIGHT_ALLOWED)
			list_add(what, sizeof what, id);
	}
	char audit[300] = "";
	if (what[0])
		snprintf(audit, sizeof audit, "embargoed advisories %s (list)", what);
	answer_maybe_audited(call, json_pack("{s:o}", "advisories", list), audit);
}

void h_advisories_get(struct call *call)
{
	struct yard_err err = {0};
	const char *id = call->params[0];
	json_t *a = fsm_advisory_get(call->s->fsm, id, &err);
	if (a == NULL) {
		call_yard_error(call, &err);
		return;
	}
	enum sight s = advisory_sight(call, id);
	if (s == SIGHT_DENIED) {
		json_decref(a);
		call_error(call, 403, NULL,
		           "advisory %s is under embargo and %s (role %s) is not on its visibility"
		           " list",
		           id, call->actor, call->role);
		return;
	}
	char what[128] = "";
	if (s == SIGHT_ALLOWED)
		snprintf(what, sizeof what, "embargoed advisory %s", id);
	answer_maybe_audited(call, a, what);
}

void h_advisories_embargo(struct call *call)
{
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	json_object_set_new(body, "id", json_string(call->params[0]));
	call_submit(call, "advisory.embargo", body, call_answer_result);
}

void h_advisories_share(struct call *call)
{
	json_t *body = call_body_object(call);
	if (body == NULL)
		return;
	json_object_set_new(body, "id", json_string(call->params[0]));
	call_submit(call, "advisory.share", body, call_answer_result);
}

void h_advisories_publish(struct call *call)
{
	call_submit(call, "advisory.publish", json_pack("{s:s}", "id", call->params[0]),
	            call_answer_result);
}

/* ---- audit and the event chain ---- */

void h_audit(struct call *call)
{
	int64_t after = 0, limit = 100;
	int reads = 0;
	if (call_query_int(call, "after", 0, INT64_MAX, &after) != 0 ||
	    call_query_int(call, "limit", 1, 1000, &limit) != 0 ||
	    call_query_flag(call, "reads", &reads) != 0)
		return;
	struct yard_err err = {0};
	json_t *page = fsm_audit_list(call->s->fsm, after, (int)limit, reads, &err);
	if (page == NULL)
		call_yard_error(call, &err);
	else
		call_json(call, 200, page);
}

void h_events_verify(struct call *call)
{
	struct yard_err err = {0};
	if (fsm_events_verify(call->s->fsm, &err) != 0) {
		call_json(call, 409, json_pack("{s:b,s:s}", "ok", 0, "error", err.msg));
		return;
	}
	call_json(call, 200, json_pack("{s:b}", "ok", 1));
}

/* The database image (sqlite3_serialize), a standard SQLite file for offline checks such as
 * yardd --verify-db. It holds everything, embargoed content included, so every download is
 * audited. */
void h_database(struct call *call)
{
	struct yard_err err = {0};
	unsigned char *data = NULL;
	size_t len = 0;
	if (fsm_serialize(call->s->fsm, &data, &len, &err) != 0) {
		call_yard_error(call, &err);
		return;
	}
	call->audited_bytes = malloc(len);
	if (call->audited_bytes == NULL) {
		sqlite3_free(data);
		call_error(call, 500, NULL, "no memory for a %zu-byte database image", len);
		return;
	}
	memcpy(call->audited_bytes, data, len);
	call->audited_len = len;
	sqlite3_free(data);
	answer_audited(call, "the database image (every advisory and build)");
}
