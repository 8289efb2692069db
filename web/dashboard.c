/* dashboard.c: serves the embedded dashboard files (web/dashboard.h) with security headers.
 * It does not template anything: the files are served byte for byte, and the page fetches
 * its data from the API itself. */
#include <stdlib.h>
#include <string.h>

#include "web/dashboard.h"
#include "web/internal.h"

const struct dashboard_asset *dashboard_asset_find(const char *path, size_t len)
{
	for (int i = 0; i < dashboard_assets_count; i++)
		if (strlen(dashboard_assets[i].path) == len &&
		    memcmp(dashboard_assets[i].path, path, len) == 0)
			return &dashboard_assets[i];
	return NULL;
}

static void add_header(h2o_req_t *req, const char *name, const char *value)
{
	h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 0, NULL, value,
	                      strlen(value));
}

void dashboard_serve(struct call *call)
{
	h2o_req_t *req = call->req;
	h2o_iovec_t path = req->path_normalized;
	const struct dashboard_asset *a = dashboard_asset_find(path.base, path.len);
	if (a == NULL) {
		call_error(call, 404, NULL, "no dashboard file %.*s", (int)path.len, path.base);
		return;
	}
	char *copy = malloc(a->len + 1); /* call_text takes ownership */
	if (copy == NULL) {
		call_error(call, 500, NULL, "out of memory serving %s", a->path);
		return;
	}
	memcpy(copy, a->data, a->len);
	add_header(req, "content-security-policy", DASHBOARD_CSP);
	add_header(req, "x-content-type-options", "nosniff");
	add_header(req, "referrer-policy", "no-referrer");
	add_header(req, "x-frame-options", "DENY");
	add_header(req, "cache-control", "no-cache");
	call_text(call, 200, a->content_type, copy, a->len);
}
