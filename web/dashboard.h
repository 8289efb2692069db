/* dashboard.h: the web dashboard's static files (web/dashboard/), embedded into yardd at
 * build time by scripts/embed-assets.sh, and the route handler that serves them.
 *
 * The assets are public (no token): they hold no data. Every piece of data the page shows
 * comes from the JSON API with the signed-in token, so the server decides what each
 * principal sees. Responses carry a strict Content-Security-Policy (no inline script, no
 * other origin), nosniff, no-referrer and frame denial. */
#ifndef YARD_WEB_DASHBOARD_H
#define YARD_WEB_DASHBOARD_H

#include <stddef.h>

struct dashboard_asset {
	const char *path;         /* URL path: "/" or "/assets/NAME" */
	const char *content_type; /* with charset for text */
	const unsigned char *data;
	size_t len;
};

/* Defined by the generated web/dashboard_assets.c. */
extern const struct dashboard_asset dashboard_assets[];
extern const int dashboard_assets_count;

/* The header value sent with every dashboard response. */
#define DASHBOARD_CSP                                                                              \
	"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "          \
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "             \
	"frame-ancestors 'none'"

/* The asset at URL path (len bytes, no query), or NULL. */
const struct dashboard_asset *dashboard_asset_find(const char *path, size_t len);

struct call;
/* Route handler for GET / and GET /assets/<name> (web/api.c's table; no token). */
void dashboard_serve(struct call *call);

#endif
