#!/usr/bin/env bash
# test_embargo.sh: three controllers. A 15-day embargo is refused; while an advisory is
# embargoed a user outside its circle gets 403 or a redacted "maintenance" entry for the
# advisory, the fixing build's notes and its binary (API and yardctl), and finds neither the
# title, the text nor the notes in events, metrics or logs; a user named on the visibility
# list and the security role see everything, and each of their reads is in the audit log
# with the principal; a ~3 MiB build uploaded with yardctl comes back byte-exact, also from
# the new leader after the old one is SIGKILLed; after publication everyone sees everything.
# Finally the event chain verifies, and one event changed in a copy of the database is named
# by yardd --verify-db.
. "$(dirname "$0")/lib.sh"

YARDCTL=${YARDCTL:-yardctl}
SECRET_TITLE="heap-overflow-in-ring-allreduce-$$"
SECRET_TEXT="the-ring-step-trusts-the-peer-length-$$"
SECRET_NOTES="fixes-the-peer-length-check-$$"

M=$(members_arg 1 2 3)
# small snapshot thresholds: the 3 MiB build goes through snapshots (and their installs)
for id in 1 2 3; do start_member "$id" "$M" --snapshot-threshold 16 --snapshot-trailing 4; done
wait_leader 20 1 2 3 || fail "no leader"
note "leader is $LEADER"
EPS="$(api 1),$(api 2),$(api 3)"

declare -A TOK
for spec in sec:security alice:user distro:user ops:operator; do
	name=${spec%%:*}
	call POST "$LEADER" /v1/tokens "{\"name\":\"$name\",\"role\":\"${spec#*:}\"}"
	[ "$CODE" = 201 ] || fail "token $spec: $CODE $BODY"
	TOK[$name]=$(jget "$BODY" 'd["token"]')
done
as() { # as NAME METHOD PATH [BODY]: like call, with NAME's token; a 503 (election under way,
	# leadership lost mid-read) is retried for up to 10 s, as any client does
	local who=$1 m=$2 path=$3 body=${4:-} tries=0
	while :; do
		CODE=$(curl -s -L --location-trusted --max-redirs 3 -o "$T/body" -w '%{http_code}' -X "$m" \
			-H "Authorization: Bearer ${TOK[$who]}" \
			${body:+-H 'Content-Type: application/json' --data "$body"} "$(api "$LEADER")$path")
		[ "$CODE" = 503 ] && [ $((tries += 1)) -lt 100 ] || break
		sleep 0.1
	done
	BODY=$(tr -d '\000' <"$T/body") # binaries are compared from $T/body
}
ctl() { local who=$1; shift; "$YARDCTL" --endpoints "$EPS" --token "${TOK[$who]}" "$@"; }
no_secret() { # no_secret WHAT TEXT: none of the secrets appear in TEXT
	! grep -q -e "$SECRET_TITLE" -e "$SECRET_TEXT" -e "$SECRET_NOTES" <<<"$2" ||
		fail "$1 leaks embargoed content: $(grep -o -e "$SECRET_TITLE" -e "$SECRET_TEXT" -e "$SECRET_NOTES" <<<"$2" | head -1)"
}

# --- the 14-day rule ---
as sec POST /v1/advisories "{\"title\":\"x\",\"severity\":\"high\",\"text\":\"y\",\"embargo_days\":15}"
[ "$CODE" = 400 ] && grep -q '"field":"embargo_days"' <<<"$BODY" && grep -q "14-day" <<<"$BODY" ||
	fail "15-day embargo: $CODE $BODY, want 400 naming embargo_days and the 14-day maximum"
out=$(ctl sec advisory create --title x --severity high --text y --embargo-days 15 2>&1) &&
	fail "yardctl accepted a 15-day embargo: $out"
grep -q "14-day" <<<"$out" || fail "yardctl's refusal does not say why: $out"
as sec GET /v1/advisories
[ "$(jget "$BODY" 'len(d["advisories"])')" = 0 ] || fail "a refused advisory was stored: $BODY"
note "15-day embargo refused (API and yardctl)"

# --- an embargoed advisory and its build ---
ctl sec advisory create --title "$SECRET_TITLE" --severity critical --cve RESERVED \
	--text "$SECRET_TEXT" --embargo-days 7 --visible-to distro -o json >"$T/adv.json" ||
	fail "advisory create: $(cat "$T/adv.json")"
ADV=$(jget "$(cat "$T/adv.json")" 'd["id"]')
[ "$(jget "$(cat "$T/adv.json")" 'd["state"]')" = embargoed ] || fail "not embargoed: $(cat "$T/adv.json")"
head -c 3145728 /dev/urandom >"$T/build.bin"
head -c 12345 /dev/urandom >>"$T/build.bin" # not a multiple of the chunk size
ctl sec build upload "$T/build.bin" --version 2.0.1-sec --advisory "$ADV" --notes "$SECRET_NOTES" \
	>"$T/upload.out" 2>&1 || fail "upload: $(cat "$T/upload.out")"
note "$(cat "$T/upload.out")"

# --- outsiders: 403 or redacted, everywhere ---
as alice GET "/v1/advisories/$ADV"
[ "$CODE" = 403 ] || fail "user reads the embargoed advisory: $CODE $BODY"
no_secret "403 answer" "$BODY"
as alice GET /v1/advisories
[ "$(jget "$BODY" 'd["advisories"][0]["title"]')" = maintenance ] || fail "advisory list for a user: $BODY"
no_secret "advisory list" "$BODY"
as alice GET /v1/builds/2.0.1-sec
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["notes"]')" = maintenance ] || fail "build for a user: $CODE $BODY"
no_secret "build" "$BODY"
as alice GET /v1/builds
no_secret "build list" "$BODY"
as alice GET /v1/builds/2.0.1-sec/binary
[ "$CODE" = 403 ] || fail "user downloads the embargoed build: $CODE"
ctl alice build download 2.0.1-sec -o "$T/alice.bin" >"$T/out" 2>&1 && fail "yardctl download as user worked"
[ ! -e "$T/alice.bin" ] || fail "yardctl wrote a file for a refused download"
ctl alice advisory show "$ADV" >"$T/out" 2>&1 && fail "yardctl advisory show as user worked"
no_secret "yardctl advisory show" "$(cat "$T/out")"
no_secret "yardctl advisory list" "$(ctl alice advisory list 2>&1)"
no_secret "yardctl build list" "$(ctl alice build list 2>&1)"
no_secret "yardctl build show" "$(ctl alice build show 2.0.1-sec 2>&1)"
as ops GET "/v1/events?limit=1000"
no_secret "events" "$BODY"
as ops GET /metrics
no_secret "metrics" "$BODY"
no_secret "controller logs" "$(cat "$T"/log.*)"
note "user alice: 403 on advisory and binary, 'maintenance' in listings; no leak in events, metrics, logs"

# --- the circle sees everything, and is audited ---
as distro GET "/v1/advisories/$ADV"
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["title"]')" = "$SECRET_TITLE" ] || fail "distro on the list: $CODE $BODY"
as distro GET /v1/builds/2.0.1-sec
[ "$(jget "$BODY" 'd["notes"]')" = "$SECRET_NOTES" ] || fail "distro sees no notes: $BODY"
ctl distro build download 2.0.1-sec -o "$T/distro.bin" >/dev/null || fail "distro download"
cmp -s "$T/build.bin" "$T/distro.bin" || fail "distro's download differs"
ctl sec advisory show "$ADV" >"$T/show.out" || fail "advisory show: $(cat "$T/show.out")"
grep -q "$SECRET_TEXT" "$T/show.out" || fail "security does not see the text"
# the circle as people write it, not the API's JSON
grep -qx "visible to     tokens: sec, distro (and the admin and security roles)" "$T/show.out" ||
	fail "advisory show's circle: $(grep visible "$T/show.out")"
ctl sec build download 2.0.1-sec -o "$T/sec.bin" >/dev/null || fail "security download"
cmp -s "$T/build.bin" "$T/sec.bin" || fail "security's download differs"
as alice GET /v1/audit
[ "$CODE" = 403 ] || fail "a user reads the audit log: $CODE"
as sec GET "/v1/audit?reads=maybe"
[ "$CODE" = 400 ] && grep -qF "reads: 'maybe' must be 1 or true, 0 or false" <<<"$BODY" ||
	fail "audit?reads=maybe: $CODE $BODY"
as sec GET "/v1/audit?reads=1&limit=1000"
AUDIT=$BODY
as sec GET "/v1/audit?reads=true&limit=1000"
[ "$CODE" = 200 ] && [ "$BODY" = "$AUDIT" ] || fail "audit?reads=true differs from reads=1: $CODE"
for want in "distro:advisory $ADV" "distro:build 2.0.1-sec (metadata)" "distro:build 2.0.1-sec (binary)" \
	"sec:advisory $ADV" "sec:build 2.0.1-sec (binary)"; do
	who=${want%%:*} what=${want#*:}
	[ "$(jget "$AUDIT" "sum(1 for e in d['events'] if e['actor'] == '$who' and '$what' in e['message'])")" -ge 1 ] ||
		fail "no audit entry for $who reading $what: $AUDIT"
done
[ "$(jget "$AUDIT" "sum(1 for e in d['events'] if e['actor'] == 'alice')")" = 0 ] ||
	fail "alice read nothing embargoed, yet is audited: $AUDIT"
ctl sec audit --reads | grep -q "distro (role user) read embargoed build 2.0.1-sec (binary)" ||
	fail "yardctl audit does not show the read: $(ctl sec audit --reads 2>&1)"
ctl sec audit | grep -q "build.created" || fail "yardctl audit lacks the mutations"
note "distro and sec see everything; $(jget "$AUDIT" 'len(d["events"])') embargoed reads audited with the principal"

# --- the store survives the leader ---
OLD=$LEADER
kill_member "$OLD"
REST=()
for id in 1 2 3; do [ "$id" = "$OLD" ] || REST+=("$id"); done
wait_leader 20 "${REST[@]}" || fail "no new leader after killing $OLD"
note "killed leader $OLD; new leader $LEADER"
"$YARDCTL" --endpoints "$(api "$LEADER")" --token "${TOK[sec]}" build download 2.0.1-sec \
	-o "$T/after.bin" >/dev/null || fail "download from the new leader"
cmp -s "$T/build.bin" "$T/after.bin" || fail "the new leader's copy differs"
note "$(stat -c %s "$T/build.bin") bytes byte-exact from the new leader"

# --- publication ---
as alice POST "/v1/advisories/$ADV/publish"
[ "$CODE" = 403 ] || fail "a user publishes: $CODE $BODY"
"$YARDCTL" --endpoints "$(api "$LEADER")" --token "${TOK[sec]}" advisory publish "$ADV" >/dev/null ||
	fail "publish"
as alice GET "/v1/advisories/$ADV"
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["state"]')" = public ] &&
	[ "$(jget "$BODY" 'd["text"]')" = "$SECRET_TEXT" ] || fail "after publication: $CODE $BODY"
as alice GET /v1/builds/2.0.1-sec
[ "$(jget "$BODY" 'd["notes"]')" = "$SECRET_NOTES" ] || fail "notes after publication: $BODY"
as alice GET /v1/builds/2.0.1-sec/binary
[ "$CODE" = 200 ] && cmp -s "$T/build.bin" "$T/body" || fail "user download after publication: $CODE"
ctl alice advisory show "$ADV" | grep -qx "visible to     every token (published)" ||
	fail "advisory show after publication: $(ctl alice advisory show "$ADV" | grep visible)"
note "published: alice sees the advisory, the notes and the binary"

# --- an unfinished upload can be dropped, a committed build cannot ---
as sec POST /v1/builds "{\"version\":\"half\",\"component\":\"worker\",\"sha256\":\"$(printf '%064d' 0)\",\"size\":10}"
[ "$CODE" = 201 ] || fail "create half: $CODE $BODY"
as sec GET /v1/builds/half/binary
[ "$CODE" = 409 ] || fail "binary of an unfinished build: $CODE $BODY"
ctl sec build delete half >/dev/null || fail "build delete of an unfinished upload"
ctl sec build delete 2.0.1-sec >"$T/out" 2>&1 && fail "a committed build was deleted"
grep -q "409" "$T/out" || fail "deleting a committed build: $(cat "$T/out")"

# --- the event chain ---
"$YARDCTL" --endpoints "$(api "$LEADER")" --token "${TOK[sec]}" events verify >/dev/null ||
	fail "events verify on a healthy cluster"
code=$(curl -s -o "$T/db.sqlite" -w '%{http_code}' -H "$AUTH" "$(api "$LEADER")/v1/debug/database")
[ "$code" = 200 ] || fail "database image: $code"
"$YARDD" --verify-db "$T/db.sqlite" >/dev/null || fail "the untouched copy does not verify"
SEQ=$(sqlite3 "$T/db.sqlite" "SELECT min(seq) FROM events WHERE type = 'build.created'")
sqlite3 "$T/db.sqlite" "UPDATE events SET message = 'nothing happened' WHERE seq = $SEQ"
out=$("$YARDD" --verify-db "$T/db.sqlite" 2>&1) && fail "a changed event verifies: $out"
grep -q "event $SEQ: hash does not match" <<<"$out" || fail "verify does not name event $SEQ: $out"
note "events verify: ok live; the copy with event $SEQ changed fails: $out"
# the same with a data dir's own copy: a raft snapshot is the SQLite image, LZ4-framed
if command -v lz4 >/dev/null; then
	SNAP=$(ls -t "$T/d$LEADER"/snapshot-* | grep -v '\.meta$' | head -1)
	[ -n "$SNAP" ] || fail "no snapshot in $T/d$LEADER"
	lz4 -d -q -c "$SNAP" >"$T/snap.sqlite" || fail "$SNAP is not LZ4"
	"$YARDD" --verify-db "$T/snap.sqlite" >/dev/null || fail "the snapshot's chain does not verify"
	SEQ=$(sqlite3 "$T/snap.sqlite" "SELECT max(seq) - 1 FROM events")
	sqlite3 "$T/snap.sqlite" "UPDATE events SET actor = 'mallory' WHERE seq = $SEQ"
	out=$("$YARDD" --verify-db "$T/snap.sqlite" 2>&1) && fail "a changed snapshot verifies: $out"
	grep -q "event $SEQ: hash does not match" <<<"$out" || fail "verify does not name event $SEQ: $out"
	note "data dir snapshot $(basename "$SNAP"): verifies; with event $SEQ's actor changed: $out"
else
	note "lz4 not installed: the data-dir snapshot check is skipped"
fi
echo "PASS: test_embargo"
