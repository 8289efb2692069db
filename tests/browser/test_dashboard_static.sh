#!/usr/bin/env bash
# test_dashboard_static.sh: the dashboard files as yardd serves them, without a browser (so it
# runs where chromium cannot): every asset answers 200 without a token, with its content type
# and the security headers; unknown assets are a JSON 404; the API still needs a token; the
# files load nothing from another origin and carry no inline script or style.
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$top_srcdir/tests/integration/lib.sh"

start_member 1 "$(members_arg 1)"
wait_until 15 leader_of 1 || fail "yardd did not become leader"

for spec in "/ text/html" "/assets/app.js text/javascript" "/assets/charts.js text/javascript" \
	"/assets/app.css text/css" "/assets/favicon.svg image/svg+xml"; do
	path=${spec% *}
	type=${spec#* }
	curl -s -D "$T/headers" -o "$T/file" "$(api 1)$path"
	tr -d '\r' <"$T/headers" >"$T/h"
	grep -q '^HTTP/1.1 200' "$T/h" || fail "GET $path without a token: $(head -1 "$T/h")"
	grep -qi "^content-type: $type" "$T/h" || fail "GET $path: content type is not $type: $(grep -i content-type "$T/h")"
	grep -qi "^content-security-policy: default-src 'self'; script-src 'self'; style-src 'self';" "$T/h" ||
		fail "GET $path: no strict Content-Security-Policy"
	grep -qi "^content-security-policy: .*frame-ancestors 'none'" "$T/h" || fail "GET $path: CSP lacks frame-ancestors"
	grep -qi '^x-content-type-options: nosniff' "$T/h" || fail "GET $path: no X-Content-Type-Options"
	grep -qi '^referrer-policy: no-referrer' "$T/h" || fail "GET $path: no Referrer-Policy"
	grep -qi '^x-frame-options: DENY' "$T/h" || fail "GET $path: no X-Frame-Options"
	src=$top_srcdir/web/dashboard/$(basename "$path")
	[ "$path" = / ] && src=$top_srcdir/web/dashboard/index.html
	cmp -s "$T/file" "$src" || fail "GET $path is not byte for byte $src"
	# nothing fetched from elsewhere (the SVG namespace is a name, not a request)
	if grep -oE "(https?:)?//[a-zA-Z0-9.-]+\.[a-z]{2,}" "$T/file" | grep -v '^http://www.w3.org$' | grep -q .; then
		fail "GET $path references another origin: $(grep -oE 'https?://[^"'"'"' ]+' "$T/file" | grep -v w3.org | head -3)"
	fi
done
note "5 assets: 200 without a token, content types, CSP, nosniff, no-referrer, DENY, byte-exact"

# no inline script or style in the page (the CSP would block them anyway)
grep -qE '<script>|<script [^>]*>[^<]|<style|style=| on[a-z]+=' "$top_srcdir/web/dashboard/index.html" &&
	fail "index.html has inline script or style"
grep -qE '\.(innerHTML|outerHTML) *=|insertAdjacentHTML\(|document\.write\(|[^a-z]eval\(|new Function\(' "$top_srcdir"/web/dashboard/*.js &&
	fail "dashboard JS builds HTML from strings or evaluates code"

CODE=$(curl -s -o "$T/body" -w '%{http_code}' "$(api 1)/assets/nope.js")
[ "$CODE" = 404 ] && grep -q '"error"' "$T/body" || fail "unknown asset: $CODE $(cat "$T/body")"
CODE=$(curl -s -o /dev/null -w '%{http_code}' "$(api 1)/assets/")
[ "$CODE" = 404 ] || fail "GET /assets/: $CODE, want 404"
CODE=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$(api 1)/")
[ "$CODE" = 405 ] || fail "POST /: $CODE, want 405"
CODE=$(curl -s -o /dev/null -w '%{http_code}' "$(api 1)/v1/jobs")
[ "$CODE" = 401 ] || fail "GET /v1/jobs without a token: $CODE, want 401 (the dashboard route must not open the API)"
CODE=$(curl -s -o /dev/null -w '%{http_code}' "$(api 1)/assets/../v1/jobs")
[ "$CODE" = 401 ] || fail "GET /assets/../v1/jobs without a token: $CODE, want 401"
note "unknown assets 404, POST / 405, the API still answers 401 without a token"
echo PASS
