#!/usr/bin/env bash
# test_events_prune.sh: yardd --events-max N keeps the newest events (the setting is
# replicated: every member prunes alike); the event chain still verifies from the anchor an
# events.pruned event records, through the API and offline (yardd --verify-db), on the leader
# and on a follower that received the same commands. Three members.
. "$(dirname "$0")/lib.sh"

# a bad value is refused by name before anything starts
for bad in 999 1e4 -5 x 1099511627777; do
	if out=$("$YARDD" --events-max "$bad" 2>&1); then fail "--events-max $bad accepted"; fi
	grep -q "^yardd: --events-max: '$bad' is not 1000\.\." <<<"$out" || fail "--events-max $bad: $out"
done

M=$(members_arg 1 2 3)
for i in 1 2 3; do start_member "$i" "$M" --events-max 1000; done
wait_leader 15 1 2 3 || fail "no leader"
L=$LEADER
setting_is() { call GET "$1" "/v1/events?after=0&limit=1000"; grep -q 'events_max = 1000 set by' <<<"$BODY"; }
wait_until 10 setting_is "$L" || fail "events_max was not set: $BODY"

# 1,300 submissions (one event each) on one connection
python3 - "$(api "$L")" "$TOKEN" <<'PY' || fail "submissions failed"
import http.client, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
for i in range(1300):
    c.request("POST", "/v1/jobs", body='{"name":"e%d","ranks":1,"command":["true"]}' % i,
              headers={"Authorization": "Bearer " + sys.argv[2]})
    r = c.getresponse()
    r.read()
    assert r.status == 201, (i, r.status)
PY
# every member applied the same commands (and pruned alike) before each is read
same_digests() { local a b c; a=$(digest_of 1) b=$(digest_of 2) c=$(digest_of 3); [ -n "$a" ] && [ "$a" = "$b" ] && [ "$b" = "$c" ]; }
wait_until 10 same_digests || fail "the members differ after pruning: $(digest_of 1) / $(digest_of 2) / $(digest_of 3)"
for m in 1 2 3; do
	python3 - "$(api "$m")" "$TOKEN" <<'PY' || fail "member $m kept the wrong events"
import json, sys, urllib.request
events, after = [], 0
while after is not None:  # every page, from this member's own copy
    req = urllib.request.Request("%s/v1/events?after=%d&limit=1000&stale=1" % (sys.argv[1], after),
                                 headers={"Authorization": "Bearer " + sys.argv[2]})
    page = json.load(urllib.request.urlopen(req, timeout=10))
    events += page["events"]
    after = page["next"]
seqs = [e["seq"] for e in events]
assert 1000 <= len(events) <= 1126, len(events)
assert seqs == list(range(seqs[0], seqs[0] + len(events))), "gap"
assert seqs[0] > 1 and max(seqs) > 1300, (seqs[0], max(seqs))
assert any(e["type"] == "events.pruned" for e in events)
PY
done
call GET "$L" /v1/events/verify
[ "$CODE" = 200 ] || fail "verify after pruning: $CODE $BODY"
code=$(curl -s -o "$T/db.sqlite" -w '%{http_code}' -H "$AUTH" "$(api "$L")/v1/debug/database")
[ "$code" = 200 ] || fail "database image: $code"
"$YARDD" --verify-db "$T/db.sqlite" >/dev/null || fail "the pruned database does not verify offline"
note "1,300 submissions: every member keeps the same newest 1,000-1,126 events; the chain verifies from the anchor, online and offline"
