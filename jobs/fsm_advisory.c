/* fsm_advisory.c: security advisories and the embargo rules built on them.
 *
 * An advisory goes reported → embargoed → public (or reported → public). An embargo starts
 * with a deadline at most FSM_EMBARGO_MAX_DAYS days later (the replicated setting
 * embargo_max_days may lower it); it ends when the security role publishes, or when the
 * leader sees the deadline pass and proposes advisory.publish (scheduler/leader.c): apply
 * accepts that only from the security role or once the command's own timestamp is past the
 * deadline, so a clock-skewed leader can publish late but never early.
 *
 * Until it is public an advisory's content (title, CVE, severity, text, the notes of builds
 * that fix it, their binaries) is visible to admin and security and to its visibility list
 * (roles and named principals, which only widens: advisory.share). Event messages written
 * here never carry that content, because events are readable outside the circle; the
 * advisory's own timeline (part of its content) says who did what. audit.read records an
 * embargoed read as an event, so the audit trail shares the event log's hash chain. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "jobs/fsm_internal.h"

#define ADVISORY_TITLE_MAX 200
#define ADVISORY_TEXT_MAX 65536
#define ADVISORY_LIST_MAX 32
#define DAY_MS (24LL * 3600 * 1000)

static const char *const SEVERITIES[] = {"low", "medium", "high", "critical", NULL};

/* "RESERVED" or CVE-YYYY-NNNN with 4 to 7 digits after the year. */
static int valid_cve(const char *s)
{
	if (strcmp(s, "RESERVED") == 0)
		return 1;
	size_t n = strlen(s);
	if (n < 13 || n > 17 || strncmp(s, "CVE-", 4) != 0 || s[8] != '-')
		return 0;
	for (size_t i = 4; i < n; i++)
		if (i != 8 && (s[i] < '0' || s[i] > '9'))
			return 0;
	return 1;
}

static int in_array(const json_t *array, const char *s)
{
	size_t i;
	json_t *v;
	json_array_foreach(array, i, v) if (json_is_string(v) &&
	                                    strcmp(json_string_value(v), s) == 0) return 1;
	return 0;
}

/* Checks visibility {"roles": [...], "principals": [...]} (both optional) and adds its
 * entries to into {"roles", "principals"} without duplicates. NULL or an error result. */
static json_t *merge_visibility(const json_t *vis, const char *field, json_t *into)
{
	static const char *const keys[] = {"roles", "principals", NULL};
	struct yard_err e = {0};
	if (!json_is_object(vis))
		return fsm_res_err(400, field,
		                   "%s: must be {\"roles\": [...], \"principals\": [...]}", field);
	if (jsonx_only_keys(vis, field, keys, &e) != 0)
		return fsm_res_from_err(&e);
	for (int k = 0; keys[k] != NULL; k++) {
		const json_t *list = json_object_get(vis, keys[k]);
		json_t *dst = json_object_get(into, keys[k]);
		size_t i;
		json_t *v;
		if (list == NULL)
			continue;
		if (!json_is_array(list) || json_array_size(list) > ADVISORY_LIST_MAX)
			return fsm_res_err(400, field,
			                   "%s.%s: must be an array of at most %d names", field,
			                   keys[k], ADVISORY_LIST_MAX);
		json_array_foreach(list, i, v)
		{
			const char *s = json_string_value(v);
			if (s == NULL || (k == 0 ? !fsm_role_valid(s) : !fsm_valid_name(s)))
				return fsm_res_err(
				    400, field, "%s.%s[%zu]: %s%s%s", field, keys[k], i,
				    s ? "'" : "", s ? s : "must be a string",
				    s ? (k == 0 ? "' is not one of admin, operator, user, security,"
				                  " agent"
				                : "' must be 1-63 characters of [A-Za-z0-9._-]")
				      : "");
			if (!in_array(dst, s))
				json_array_append_new(dst, json_string(s));
		}
		if (json_array_size(dst) > ADVISORY_LIST_MAX)
			return fsm_res_err(400, field, "%s.%s: more than %d entries in all", field,
			                   keys[k], ADVISORY_LIST_MAX);
	}
	return NULL;
}

/* The longest embargo this cluster allows, in days. */
static int64_t embargo_max_days(struct fsm *f)
{
	int64_t d = fsm_config_get(f, "embargo_max_days", FSM_EMBARGO_MAX_DAYS);
	return d < 1 || d > FSM_EMBARGO_MAX_DAYS ? FSM_EMBARGO_MAX_DAYS : d;
}

/* NULL when days is an allowed embargo length, else the 400 result that says why not. */
static json_t *check_embargo_days(struct fsm *f, int64_t days)
{
	int64_t max = embargo_max_days(f);
	if (days >= 1 && days <= max)
		return NULL;
	if (days > FSM_EMBARGO_MAX_DAYS)
		return fsm_res_err(400, "embargo_days",
		                   "embargo_days: %lld days is longer than the %d-day maximum"
		                   " (linux-distros rule: an embargo ends at most 14 days after it"
		                   " starts)",
		                   (long long)days, FSM_EMBARGO_MAX_DAYS);
	if (days > max)
		return fsm_res_err(400, "embargo_days",
		                   "embargo_days: %lld days is longer than the %lld days this"
		                   " cluster allows (setting embargo_max_days)",
		                   (long long)days, (long long)max);
	return fsm_res_err(400, "embargo_days", "embargo_days: %lld must be at least 1",
	                   (long long)days);
}

/* Reads the state, deadline and timeline of advisory id; a 404 result when absent. */
static json_t *advisory_lookup(struct fsm *f, const char *id, char state[16], int64_t *until_ms,
                               json_t **timeline, json_t **visibility)
{
	json_t *r = NULL;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT state, embargo_until_ms, timeline, visibility"
	                                  " FROM advisories WHERE id = ?1");
	if (st == NULL)
		return fsm_res_err(500, NULL, "cannot read advisory %s", id);
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW) {
		snprintf(state, 16, "%s", (const char *)sqlite3_column_text(st, 0));
		*until_ms =
		    sqlite3_column_type(st, 1) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 1);
		if (timeline != NULL)
			*timeline = jsonx_loads((const char *)sqlite3_column_text(st, 2));
		if (visibility != NULL)
			*visibility = jsonx_loads((const char *)sqlite3_column_text(st, 3));
	} else {
		r = fsm_res_err(404, "id", "no advisory %s", id);
	}
	fsm_release(f, st);
	return r;
}

static void timeline_add(json_t *timeline, int64_t ts, const char *actor, const char *what)
{
	json_array_append_new(timeline, json_pack("{s:I,s:s,s:s}", "ts_ms", (json_int_t)ts, "actor",
	                                          actor, "what", what));
}

/* Runs sql with ?1 = id, ?2 = v as canonical JSON text, ?3 = ts. */
static int save_json(struct fsm *f, const char *sql, const char *id, const json_t *v, int64_t ts)
{
	char *text = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	int rc = fsm_run(f, sql, strstr(sql, "?3") ? "ssi" : "ss", id, text, ts);
	free(text);
	return rc == SQLITE_DONE ? 0 : -1;
}

static json_t *advisory_result(struct fsm *f, const char *id, int status)
{
	struct yard_err e = {0};
	json_t *a = fsm_advisory_get(f, id, &e);
	return a ? fsm_res_ok(status, a) : NULL;
}

json_t *fsm_op_advisory_create(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"title",      "cve",          "severity", "text",
	                                   "visibility", "embargo_days", NULL};
	struct yard_err e = {0};
	const char *title = NULL, *cve = "RESERVED", *severity = NULL, *text = NULL;
	int64_t days = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "title", 1, ADVISORY_TITLE_MAX, &title, &e) != 0 ||
	    jsonx_get_string(c->args, "", "cve", 0, 17, &cve, &e) != 0 ||
	    jsonx_get_string(c->args, "", "severity", 1, 16, &severity, &e) != 0 ||
	    jsonx_get_string(c->args, "", "text", 1, ADVISORY_TEXT_MAX, &text, &e) != 0 ||
	    jsonx_get_int(c->args, "", "embargo_days", 0, 0, 1000000, &days, &e) != 0)
		return fsm_res_from_err(&e);
	if (title[0] == '\0')
		return fsm_res_err(400, "title", "title: must not be empty");
	if (!valid_cve(cve))
		return fsm_res_err(400, "cve", "cve: '%s' must be RESERVED or CVE-YYYY-NNNN", cve);
	int known = 0;
	for (int i = 0; SEVERITIES[i] != NULL; i++)
		known |= strcmp(severity, SEVERITIES[i]) == 0;
	if (!known)
		return fsm_res_err(400, "severity",
		                   "severity: '%s' must be low, medium, high or critical",
		                   severity);
	json_t *r;
	if (json_object_get(c->args, "embargo_days") != NULL &&
	    (r = check_embargo_days(f, days)) != NULL)
		return r;
	json_t *vis = json_pack("{s:[],s:[s]}", "roles", "principals", c->actor);
	const json_t *asked = json_object_get(c->args, "visibility");
	if (asked != NULL && (r = merge_visibility(asked, "visibility", vis)) != NULL) {
		json_decref(vis);
		return r;
	}
	int64_t seq = fsm_meta_next(f, "advisory_seq");
	if (seq < 0) {
		json_decref(vis);
		return NULL;
	}
	char id[FSM_ID_MAX];
	snprintf(id, sizeof id, "a-%06lld", (long long)seq);
	json_t *timeline = json_array();
	timeline_add(timeline, c->ts, c->actor, "reported");
	char what[64] = "";
	if (days > 0) {
		snprintf(what, sizeof what, "embargoed for %lld days", (long long)days);
		timeline_add(timeline, c->ts, c->actor, what);
	}
	char *vis_text = json_dumps(vis, JSON_COMPACT | JSON_SORT_KEYS);
	char *timeline_text = json_dumps(timeline, JSON_COMPACT | JSON_SORT_KEYS);
	int rc = fsm_run(f,
	                 "INSERT INTO advisories(id, seq, title, cve, severity, state,"
	                 " embargo_start_ms, embargo_until_ms, visibility, text, timeline,"
	                 " created_ms, actor) VALUES(?1, ?2, ?3, ?4, ?5, ?6,"
	                 " CASE WHEN ?7 > 0 THEN ?8 END, CASE WHEN ?7 > 0 THEN ?8 + ?7 * ?9 END,"
	                 " ?10, ?11, ?12, ?8, ?13)",
	                 "sissssiiissss", id, seq, title, cve, severity,
	                 days > 0 ? "embargoed" : "reported", days, c->ts, DAY_MS, vis_text, text,
	                 timeline_text, c->actor);
	free(vis_text);
	free(timeline_text);
	json_decref(vis);
	json_decref(timeline);
	if (rc != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "advisory.reported", NULL, c->actor,
	                     "advisory %s reported by %s", id, c->actor) != 0)
		return NULL;
	if (days > 0 && fsm_event_append(f, c->ts, "advisory.embargoed", NULL, c->actor,
	                                 "advisory %s embargoed for %lld days by %s", id,
	                                 (long long)days, c->actor) != 0)
		return NULL;
	return advisory_result(f, id, 201);
}

json_t *fsm_op_advisory_embargo(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", "embargo_days", NULL};
	struct yard_err e = {0};
	const char *id = NULL;
	int64_t days = 0, until = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0 ||
	    jsonx_get_int(c->args, "", "embargo_days", 1, 0, 1000000, &days, &e) != 0)
		return fsm_res_from_err(&e);
	json_t *r = check_embargo_days(f, days);
	if (r != NULL)
		return r;
	char state[16];
	json_t *timeline = NULL;
	if ((r = advisory_lookup(f, id, state, &until, &timeline, NULL)) != NULL)
		return r;
	if (strcmp(state, "reported") != 0) {
		json_decref(timeline);
		return fsm_res_err(409, "id",
		                   "advisory %s is %s; only a reported advisory can be embargoed",
		                   id, state);
	}
	char what[64];
	snprintf(what, sizeof what, "embargoed for %lld days", (long long)days);
	timeline_add(timeline, c->ts, c->actor, what);
	char *timeline_text = json_dumps(timeline, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(timeline);
	int rc = fsm_run(f,
	                 "UPDATE advisories SET state = 'embargoed', embargo_start_ms = ?2,"
	                 " embargo_until_ms = ?2 + ?3 * ?4, timeline = ?5 WHERE id = ?1",
	                 "siiis", id, c->ts, days, DAY_MS, timeline_text);
	free(timeline_text);
	if (rc != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "advisory.embargoed", NULL, c->actor,
	                     "advisory %s embargoed for %lld days by %s", id, (long long)days,
	                     c->actor) != 0)
		return NULL;
	return advisory_result(f, id, 200);
}

json_t *fsm_op_advisory_share(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", "roles", "principals", NULL};
	struct yard_err e = {0};
	const char *id = NULL;
	int64_t until = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0)
		return fsm_res_from_err(&e);
	char state[16];
	json_t *timeline = NULL, *vis = NULL;
	json_t *r = advisory_lookup(f, id, state, &until, &timeline, &vis);
	if (r != NULL)
		return r;
	json_t *add = json_object();
	if (json_object_get(c->args, "roles"))
		json_object_set(add, "roles", json_object_get(c->args, "roles"));
	if (json_object_get(c->args, "principals"))
		json_object_set(add, "principals", json_object_get(c->args, "principals"));
	if (json_object_size(add) == 0)
		r = fsm_res_err(400, NULL, "name roles or principals to share advisory %s with",
		                id);
	else if (strcmp(state, "public") == 0)
		r = fsm_res_err(409, "id", "advisory %s is already public", id);
	else
		r = merge_visibility(add, "share", vis);
	if (r == NULL) {
		char *added = json_dumps(add, JSON_COMPACT | JSON_SORT_KEYS);
		char what[600];
		snprintf(what, sizeof what, "shared with %s", added);
		free(added);
		timeline_add(timeline, c->ts, c->actor, what);
		if (save_json(f, "UPDATE advisories SET visibility = ?2 WHERE id = ?1", id, vis,
		              c->ts) != 0 ||
		    save_json(f, "UPDATE advisories SET timeline = ?2 WHERE id = ?1", id, timeline,
		              c->ts) != 0 ||
		    fsm_event_append(f, c->ts, "advisory.shared", NULL, c->actor,
		                     "advisory %s: visibility widened by %s", id, c->actor) != 0)
			r = fsm_res_err(500, NULL, "cannot update advisory %s", id);
		else
			r = advisory_result(f, id, 200);
	}
	json_decref(add);
	json_decref(vis);
	json_decref(timeline);
	return r;
}

json_t *fsm_op_advisory_publish(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", NULL};
	struct yard_err e = {0};
	const char *id = NULL;
	int64_t until = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0)
		return fsm_res_from_err(&e);
	char state[16];
	json_t *timeline = NULL;
	json_t *r = advisory_lookup(f, id, state, &until, &timeline, NULL);
	if (r != NULL)
		return r;
	int by_security = strcmp(c->role, "security") == 0;
	int deadline = strcmp(state, "embargoed") == 0 && c->ts >= until;
	if (strcmp(state, "public") == 0)
		r = fsm_res_err(409, "id", "advisory %s is already public", id);
	else if (!by_security && !deadline)
		r = fsm_res_err(403, "id",
		                "advisory %s is %s; before its deadline only the security role may"
		                " publish it",
		                id, state);
	if (r != NULL) {
		json_decref(timeline);
		return r;
	}
	const char *why = by_security ? "published" : "published: embargo deadline passed";
	timeline_add(timeline, c->ts, c->actor, why);
	if (save_json(f,
	              "UPDATE advisories SET state = 'public', published_ms = ?3, timeline = ?2"
	              " WHERE id = ?1",
	              id, timeline, c->ts) != 0) {
		json_decref(timeline);
		return NULL;
	}
	json_decref(timeline);
	if (fsm_event_append(f, c->ts, "advisory.published", NULL, c->actor, "advisory %s %s by %s",
	                     id, why, c->actor) != 0)
		return NULL;
	return advisory_result(f, id, 200);
}

json_t *fsm_op_audit_read(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"what", NULL};
	struct yard_err e = {0};
	const char *what = NULL;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "what", 1, 300, &what, &e) != 0)
		return fsm_res_from_err(&e);
	if (fsm_event_append(f, c->ts, "audit.read", NULL, c->actor, "%s (role %s) read %s",
	                     c->actor, c->role, what) != 0)
		return NULL;
	return fsm_res_ok(200, json_pack("{s:b}", "recorded", 1));
}

/* ---- reads ---- */

int fsm_advisory_exists(struct fsm *f, const char *id)
{
	char state[16];
	int64_t until;
	json_t *r = advisory_lookup(f, id, state, &until, NULL, NULL);
	json_decref(r);
	return r == NULL;
}

int fsm_advisory_restricted(struct fsm *f, const char *id)
{
	char state[16];
	int64_t until;
	json_t *r = advisory_lookup(f, id, state, &until, NULL, NULL);
	if (r != NULL) {
		json_decref(r);
		return 0;
	}
	return strcmp(state, "public") != 0;
}

int fsm_advisory_visible(struct fsm *f, const char *id, const char *name, const char *role)
{
	char state[16];
	int64_t until;
	json_t *vis = NULL;
	json_t *r = advisory_lookup(f, id, state, &until, NULL, &vis);
	if (r != NULL) {
		json_decref(r);
		return 0;
	}
	int ok = strcmp(state, "public") == 0 || strcmp(role, "admin") == 0 ||
	         strcmp(role, "security") == 0 || in_array(json_object_get(vis, "roles"), role) ||
	         in_array(json_object_get(vis, "principals"), name);
	json_decref(vis);
	return ok;
}

#define ADVISORY_COLUMNS                                                                           \
	"id, title, cve, severity, state, embargo_start_ms, embargo_until_ms, published_ms,"       \
	" visibility, text, timeline, created_ms, actor FROM advisories"

static json_t *int_or_null(sqlite3_stmt *st, int i)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL
	           ? json_null()
	           : json_integer((json_int_t)sqlite3_column_int64(st, i));
}

static json_t *advisory_from_row(sqlite3_stmt *st)
{
	json_t *vis = jsonx_loads((const char *)sqlite3_column_text(st, 8));
	json_t *timeline = jsonx_loads((const char *)sqlite3_column_text(st, 10));
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o,s:s,s:o,s:I,s:s}", "id",
	                 sqlite3_column_text(st, 0), "title", sqlite3_column_text(st, 1), "cve",
	                 sqlite3_column_text(st, 2), "severity", sqlite3_column_text(st, 3),
	                 "state", sqlite3_column_text(st, 4), "embargo_start_ms",
	                 int_or_null(st, 5), "embargo_until_ms", int_or_null(st, 6), "published_ms",
	                 int_or_null(st, 7), "visibility", vis ? vis : json_object(), "text",
	                 sqlite3_column_text(st, 9), "timeline", timeline ? timeline : json_array(),
	                 "created_ms", (json_int_t)sqlite3_column_int64(st, 11), "actor",
	                 sqlite3_column_text(st, 12));
}

json_t *fsm_advisories_list(struct fsm *f, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " ADVISORY_COLUMNS " ORDER BY seq");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list advisories");
		return NULL;
	}
	json_t *list = json_array();
	while (sqlite3_step(st) == SQLITE_ROW)
		json_array_append_new(list, advisory_from_row(st));
	fsm_release(f, st);
	return list;
}

json_t *fsm_advisory_get(struct fsm *f, const char *id, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " ADVISORY_COLUMNS " WHERE id = ?1");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot read advisory %s", id);
		return NULL;
	}
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	json_t *a = NULL;
	if (sqlite3_step(st) == SQLITE_ROW)
		a = advisory_from_row(st);
	else
		yard_err_set(err, YARD_ENOTFOUND, "no advisory %s", id);
	fsm_release(f, st);
	return a;
}

json_t *fsm_advisories_due(struct fsm *f, int64_t now_ms)
{
	json_t *ids = json_array();
	sqlite3_stmt *st = fsm_prepare(f, "SELECT id FROM advisories WHERE state = 'embargoed'"
	                                  " AND embargo_until_ms <= ?1 ORDER BY seq");
	if (st == NULL)
		return ids;
	sqlite3_bind_int64(st, 1, now_ms);
	while (sqlite3_step(st) == SQLITE_ROW)
		json_array_append_new(ids, json_string((const char *)sqlite3_column_text(st, 0)));
	fsm_release(f, st);
	return ids;
}
