#!/usr/bin/env bash
# test_recover.sh: losing a majority of the controllers for good (README, "Losing a majority
# of the controllers"). Three members with small snapshots take 60 jobs; two are SIGKILLed
# and the third can no longer write, saying for how long it has known no leader (API,
# yardctl, a warning in its log after 10 s). yardd --log-info reads each stopped member's log;
# yardd --recover refuses a running member, a directory without raft state and a
# configuration without itself, changing nothing, and a member started on a damaged snapshot
# is told which file; then --recover gives the survivor a configuration
# of itself alone. Restarted as before it leads alone with every job, takes writes, grows
# back to three members that join empty, and survives losing its own process again. Then
# two of those, stopped, are recovered together: one's data dir copied to the other. Last, a
# backup (yardctl cluster backup) is restored as a new cluster (yardd --restore), which
# refuses a data dir with raft state, a file that is not a database and a changed event log.
. "$(dirname "$0")/lib.sh"

SNAP="--snapshot-threshold 32 --snapshot-trailing 8"
M=$(members_arg 1 2 3)
for id in 1 2 3; do start_member "$id" "$M" $SNAP; done
wait_leader 15 1 2 3 || fail "no leader among 1 2 3"
for i in $(seq 1 60); do
	call POST "$LEADER" /v1/jobs "{\"name\":\"job-$i\"}"
	[ "$CODE" = 201 ] || fail "submission $i: $CODE $BODY"
done
wait_until 20 same_digest 1 2 3 || fail "the members did not converge"
count_jobs() { get "$1" "/v1/jobs?limit=500&stale=1"; jget "$BODY" 'len(d["jobs"])'; }
[ "$(count_jobs 1)" = 60 ] || fail "want 60 jobs: $BODY"

# the survivor: a follower, so that the leader is among the members lost
SURV=""
for id in 1 2 3; do [ "$id" != "$LEADER" ] && [ -z "$SURV" ] && SURV=$id; done
SURV_RAFT="127.0.0.1:$(raft_port "$SURV")"
recover() { "$YARDD" "$@" >"$T/out" 2>"$T/err"; }

recover --recover --id "$SURV" --data-dir "$T/d$SURV" --raft-address "$SURV_RAFT" &&
	fail "--recover of a running member succeeded: $(cat "$T/out")"
grep -q "is in use by another yardd.*stop that member first" "$T/err" ||
	fail "--recover of a running member: $(cat "$T/err")"

LOST=""
for id in 1 2 3; do [ "$id" != "$SURV" ] && { kill_member "$id"; LOST="$LOST $id"; }; done
note "lost members:$LOST; survivor $SURV"
code=$(curl -s -m 3 -o /dev/null -w '%{http_code}' -X POST -H "$AUTH" --data '{"name":"no-quorum"}' \
	"$(api "$SURV")/v1/jobs")
[ "$code" != 201 ] || fail "a write succeeded without a majority"
# the member says for how long it has known no leader, and why: the API, yardctl, its log
no_leader_answer() {
	curl -s -m 3 -X POST -H "$AUTH" --data '{"name":"no-quorum"}' "$(api "$SURV")/v1/jobs" >"$T/nl" 2>/dev/null
	grep -q "no leader known for [0-9.]* s (member $SURV is a [a-z]* in term [0-9]*; a majority of the voters must answer to elect one)" "$T/nl"
}
wait_until 10 no_leader_answer || fail "no 503 naming the missing leader: $(cat "$T/nl")"
get "$SURV" /v1/cluster
[ "$(jget "$BODY" 'd["no_leader_for_ms"] >= 0')" = True ] || fail "/v1/cluster without no_leader_for_ms: $BODY"
YARD_ENDPOINTS=$(api "$SURV") YARD_TOKEN=$TOKEN "${YARDCTL:-yardctl}" cluster status >"$T/out" 2>&1
grep -q "^leader       none known for [0-9.]* s (a majority of the voters must answer to elect one)" "$T/out" ||
	fail "cluster status without a leader: $(cat "$T/out")"
leaderless_warned() { grep -q "consensus: no leader for 1[0-9] s (this member: a [a-z]*, term [0-9]*): a majority of the voters must answer" "$T/log.$SURV"; }
wait_until 25 leaderless_warned || fail "no warning of the missing leader in member $SURV's log"
kill -TERM "${PID[$SURV]}"
wait "${PID[$SURV]}" 2>/dev/null
unset "PID[$SURV]"

# --log-info on every stopped member: the survivor's log holds the lost members' last index
for id in 1 2 3; do
	recover --log-info --data-dir "$T/d$id" || fail "--log-info of member $id: $(cat "$T/err")"
	line=$(cat "$T/out")
	[[ "$line" =~ ^yardd:\ .*:\ term\ ([0-9]+),\ last\ index\ ([0-9]+)\ \(term\ ([0-9]+)\),\ snapshot\ at\ index\ ([0-9]+) ]] ||
		fail "--log-info of member $id: $line"
	TERM_OF[$id]=${BASH_REMATCH[1]}
	LAST[$id]=${BASH_REMATCH[2]}
	SNAPIDX[$id]=${BASH_REMATCH[4]}
	note "member $id: $line"
done
for id in $LOST; do
	[ "${LAST[$SURV]}" -ge "${LAST[$id]}" ] ||
		fail "survivor $SURV ends at ${LAST[$SURV]}, member $id at ${LAST[$id]}"
done
[ "${SNAPIDX[$SURV]}" -gt 0 ] || fail "the survivor took no snapshot: the test wants one"
recover --log-info --data-dir "$T/d$SURV"
BEFORE=$(cat "$T/out")

# refusals change nothing
recover --log-info --data-dir "$T/none" && fail "--log-info of a missing dir succeeded"
grep -q "holds no raft state" "$T/err" || fail "--log-info of a missing dir: $(cat "$T/err")"
[ ! -e "$T/none" ] || fail "--log-info created $T/none"
recover --recover --id "$SURV" --data-dir "$T/d$SURV"
[ $? = 2 ] && grep -q "needs --id, --data-dir and --raft-address or --members" "$T/err" ||
	fail "--recover without an address: $(cat "$T/err")"
recover --recover --id "$SURV" --data-dir "$T/d$SURV" --raft-address 127.0.0.1:99999
[ $? = 2 ] && grep -q "raft-address 127.0.0.1:99999: want a.b.c.d:port" "$T/err" ||
	fail "--recover with a bad address: $(cat "$T/err")"
recover --recover --id "$SURV" --data-dir "$T/d$SURV" --raft-address "$SURV_RAFT" --api-address 127.0.0.1:1
[ $? = 2 ] && grep -q "works on a stopped member's data dir" "$T/err" ||
	fail "--recover with --api-address: $(cat "$T/err")"
other=$(for id in $LOST; do echo "$id"; done | head -n 1)
recover --recover --id "$SURV" --data-dir "$T/d$SURV" --members "$(members_arg "$other")"
[ $? = 1 ] && grep -q "the new configuration leaves out this member ($SURV)" "$T/err" ||
	fail "--recover leaving itself out: $(cat "$T/err")"
# a data dir belongs to its member: another --id is refused, started or recovered
[ "$(cat "$T/d$SURV/member-id")" = "$SURV" ] || fail "member-id of $SURV: $(cat "$T/d$SURV/member-id")"
timeout 30 "$YARDD" --id "$other" --data-dir "$T/d$SURV" --raft-address "127.0.0.1:$(raft_port "$other")" \
	--api-address "127.0.0.1:$(api_port "$other")" --members "$M" >"$T/out" 2>"$T/err"
[ $? = 2 ] && grep -q "data dir $T/d$SURV belongs to member $SURV, not --id $other" "$T/err" ||
	fail "member $other started on member $SURV's data dir: $(cat "$T/err")"
recover --recover --id "$other" --data-dir "$T/d$SURV" --raft-address "127.0.0.1:$(raft_port "$other")"
[ $? = 1 ] && grep -q "belongs to member $SURV, not --id $other" "$T/err" ||
	fail "--recover of member $SURV's data dir as $other: $(cat "$T/err")"
cp "$T/d$SURV/member-id" "$T/member-id.saved"
echo "x$SURV" >"$T/d$SURV/member-id"
recover --recover --id "$SURV" --data-dir "$T/d$SURV" --raft-address "$SURV_RAFT"
[ $? = 1 ] && grep -q "$T/d$SURV/member-id does not hold a member id" "$T/err" ||
	fail "--recover with a damaged member-id: $(cat "$T/err")"
cp "$T/member-id.saved" "$T/d$SURV/member-id"
recover --log-info --data-dir "$T/d$SURV"
[ "$(cat "$T/out")" = "$BEFORE" ] || fail "a refused --recover changed the log: $(cat "$T/out")"

# a lost member's damaged snapshot: raft names no file, yardd names the newest snapshot
snapfile=$(ls "$T/d$other" | grep -E '^snapshot-[0-9]+-[0-9]+-[0-9]+$' | sort -t- -k3 -n | tail -n 1)
[ -n "$snapfile" ] || fail "member $other has no snapshot: $(ls "$T/d$other")"
python3 -c 'import sys; p=sys.argv[1]; d=bytearray(open(p,"rb").read()); d[len(d)//2]^=0xff; open(p,"wb").write(d)' \
	"$T/d$other/$snapfile"
# (libraft 0.15 leaks the configuration of a snapshot it cannot decompress: its snapshot
# loader returns without freeing what it read from the .meta file; not ours to free, so leak
# detection is off for this one start under the sanitizers)
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
	timeout 30 "$YARDD" --id "$other" --data-dir "$T/d$other" --raft-address "127.0.0.1:$(raft_port "$other")" \
	--api-address "127.0.0.1:$(api_port "$other")" --members "$M" >"$T/out" 2>"$T/err"
[ $? = 1 ] && grep -q "(in the newest snapshot, $snapfile): this member's raft state is damaged; replace it (yardctl cluster remove $other" "$T/err" ||
	fail "member $other started on a damaged snapshot: $(cat "$T/err")"

# the recovery
recover --recover --id "$SURV" --data-dir "$T/d$SURV" --raft-address "$SURV_RAFT" ||
	fail "--recover: $(cat "$T/err")"
grep -q "the configuration is now $SURV=$SURV_RAFT (a voter), the entry at index $((LAST[$SURV] + 1)); term $((TERM_OF[$SURV] + 1))" "$T/out" ||
	fail "--recover said: $(cat "$T/out")"
grep -q "Never start the old members with their old data dirs" "$T/out" ||
	fail "--recover does not warn about the old members: $(cat "$T/out")"

start_member "$SURV" "$M" $SNAP
wait_leader 15 "$SURV" || fail "the recovered member $SURV does not lead"
# in a term after any the survivor knew: the lost leader's term had a leader
get "$SURV" /v1/cluster
[ "$(jget "$BODY" 'd["term"]')" -gt "${TERM_OF[$SURV]}" ] ||
	fail "the recovered member leads in term $(jget "$BODY" 'd["term"]'), not after ${TERM_OF[$SURV]}"
[ "$(count_jobs "$SURV")" = 60 ] || fail "after recovery, want 60 jobs: $BODY"
call POST "$SURV" /v1/jobs '{"name":"after-recovery"}'
[ "$CODE" = 201 ] || fail "write after recovery: $CODE $BODY"
get "$SURV" /v1/cluster
[ "$(jget "$BODY" '",".join(str(m["id"]) for m in d["members"])')" = "$SURV" ] ||
	fail "after recovery, want member $SURV alone: $BODY"

# grow back: two members join empty (new ids), then the recovered one is killed
M3=$(members_arg "$SURV" 4 5)
for id in 4 5; do
	start_member "$id" "$M3" --join $SNAP
	call POST "$SURV" /v1/cluster/members "{\"id\":$id,\"raft_address\":\"127.0.0.1:$(raft_port "$id")\",\"api_url\":\"$(api "$id")\",\"role\":\"voter\"}"
	[ "$CODE" = 200 ] || [ "$CODE" = 201 ] || fail "adding member $id: $CODE $BODY"
done
get "$SURV" /v1/cluster
[ "$(echo "$BODY" | grep -o '"role":"voter"' | wc -l)" = 3 ] || fail "want 3 voters: $BODY"
wait_until 20 same_digest "$SURV" 4 5 || fail "the new members did not converge"
kill_member "$SURV"
wait_leader 15 4 5 || fail "no leader among 4 5 after the recovered member died"
[ "$(count_jobs "$LEADER")" = 61 ] || fail "after the recovered member died, want 61 jobs: $BODY"
call POST "$LEADER" /v1/jobs '{"name":"after-second-loss"}'
[ "$CODE" = 201 ] || fail "write after losing the recovered member: $CODE $BODY"
note "recovered on member $SURV, grew back to 3, survived its loss (leader $LEADER)"

# the recovered member counted as lost for good too: members 4 and 5, stopped, are recovered
# as a pair, the one with the longer log's data dir copied to the other
wait_until 20 same_digest 4 5 || fail "members 4 and 5 did not converge"
for id in 4 5; do
	kill -TERM "${PID[$id]}"
	wait "${PID[$id]}" 2>/dev/null
	unset "PID[$id]"
	recover --log-info --data-dir "$T/d$id" || fail "--log-info of member $id: $(cat "$T/err")"
	[[ "$(cat "$T/out")" =~ last\ index\ ([0-9]+) ]] || fail "--log-info of member $id: $(cat "$T/out")"
	LAST[$id]=${BASH_REMATCH[1]}
done
FROM=4 TO=5
[ "${LAST[5]}" -gt "${LAST[4]}" ] && FROM=5 TO=4
M45=$(members_arg 4 5)
recover --recover --id "$FROM" --data-dir "$T/d$FROM" --members "$M45" --raft-address 127.0.0.1:1 &&
	fail "--recover with --raft-address other than --members' succeeded"
grep -q "gives member $FROM the raft address 127.0.0.1:$(raft_port "$FROM"), --raft-address 127.0.0.1:1" "$T/err" ||
	fail "--recover with two raft addresses: $(cat "$T/err")"
recover --recover --id "$FROM" --data-dir "$T/d$FROM" --members "$M45" ||
	fail "--recover of 4 and 5: $(cat "$T/err")"
grep -q "the configuration is now 4=127.0.0.1:$(raft_port 4) 5=127.0.0.1:$(raft_port 5) (voters)" "$T/out" &&
	grep -q "Copy $T/d$FROM to each other member's data dir" "$T/out" ||
	fail "--recover of 4 and 5 said: $(cat "$T/out")"
[ ! -e "$T/d$FROM/member-id" ] || fail "a pair's recovered data dir still names member $(cat "$T/d$FROM/member-id")"
rm -rf "${T:?}/d$TO" && cp -a "$T/d$FROM" "$T/d$TO"
for id in 4 5; do start_member "$id" "$M45" $SNAP; done
wait_leader 15 4 5 || fail "no leader among 4 5 after their recovery"
[ "$(count_jobs "$LEADER")" = 62 ] || fail "after recovering 4 and 5, want 62 jobs: $BODY"
call POST "$LEADER" /v1/jobs '{"name":"after-pair-recovery"}'
[ "$CODE" = 201 ] || fail "write after recovering 4 and 5: $CODE $BODY"
get "$LEADER" /v1/cluster
[ "$(jget "$BODY" '",".join(sorted(str(m["id"]) for m in d["members"]))')" = 4,5 ] ||
	fail "after recovering 4 and 5, want members 4 and 5: $BODY"
wait_until 20 same_digest 4 5 || fail "members 4 and 5 did not converge after their recovery"
[ "$(cat "$T/d4/member-id") $(cat "$T/d5/member-id")" = "4 5" ] ||
	fail "the copies were not claimed by their members: $(cat "$T/d4/member-id") $(cat "$T/d5/member-id")"
note "recovered members 4 and 5 together (from member $FROM's log; leader $LEADER)"

# a backup (yardctl cluster backup) restored as a new cluster's first member (yardd --restore)
YARDCTL=${YARDCTL:-yardctl}
YARD_ENDPOINTS="$(api 4),$(api 5)" YARD_TOKEN=$TOKEN "$YARDCTL" cluster backup "$T/backup.db" \
	>"$T/out" 2>"$T/err" || fail "cluster backup: $(cat "$T/err")"
grep -q "backup of the cluster's state from http://127.0.0.1:$(api_port "$LEADER"): [0-9]* bytes, event chain verified, written to $T/backup.db" "$T/out" ||
	fail "cluster backup said: $(cat "$T/out")"
[ ! -e "$T/backup.db.tmp" ] || fail "cluster backup left its temporary file"
M8=$(members_arg 8)
recover --restore "$T/backup.db" --id 8 --data-dir "$T/d4" --members "$M8"
[ $? = 1 ] && grep -q "$T/d4 already holds raft state: --restore starts a new cluster in an empty data dir" "$T/err" ||
	fail "--restore into a member's data dir: $(cat "$T/err")"
recover --restore "$T/backup.db" --id 8 --data-dir "$T/d8"
[ $? = 2 ] && grep -q "needs --id, --data-dir and --members" "$T/err" ||
	fail "--restore without --members: $(cat "$T/err")"
recover --restore "$T/backup.db" --id 9 --data-dir "$T/d8" --members "$M8"
[ $? = 2 ] && grep -q -- "--id 9 is not among --members" "$T/err" ||
	fail "--restore with --id not listed: $(cat "$T/err")"
echo "not a database" >"$T/junk.db"
recover --restore "$T/junk.db" --id 8 --data-dir "$T/d8" --members "$M8"
[ $? = 1 ] && grep -q -- "--restore $T/junk.db: not a trainyard database image" "$T/err" ||
	fail "--restore of a file that is not a database: $(cat "$T/err")"
cp "$T/backup.db" "$T/changed.db"
python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("UPDATE events SET message = message || \" (changed)\" WHERE seq = 3"); c.commit()' "$T/changed.db"
recover --restore "$T/changed.db" --id 8 --data-dir "$T/d8" --members "$M8"
[ $? = 1 ] && grep -q -- "--restore $T/changed.db: .*event 3" "$T/err" ||
	fail "--restore of a changed event log: $(cat "$T/err")"
[ ! -e "$T/d8/metadata1" ] || fail "a refused --restore left raft state in $T/d8"
# yardctl checks what it saves: an image whose chain does not verify (served here by a stand-in,
# since a member's own state cannot be made to fail) is not written
cat >"$T/standin.py" <<'EOPY'
import http.server, sys
image = open(sys.argv[1], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.sqlite3")
        self.send_header("Content-Length", str(len(image)))
        self.end_headers()
        self.wfile.write(image)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
EOPY
backup_refused() { # backup_refused FILE_SERVED EXPECTED_ERROR
	python3 "$T/standin.py" "$1" "$(api_port 9)" &
	STANDIN=$!
	wait_until 10 curl -s -o /dev/null "$(api 9)/ready" || fail "the stand-in server did not start"
	YARD_ENDPOINTS=$(api 9) YARD_TOKEN=$TOKEN "$YARDCTL" cluster backup "$T/bad-backup.db" >"$T/out" 2>"$T/err"
	rc=$?
	kill "$STANDIN" 2>/dev/null
	wait "$STANDIN" 2>/dev/null
	[ $rc = 1 ] && grep -q "$2" "$T/err" ||
		fail "cluster backup of $1: exit $rc: $(cat "$T/err")"
}
backup_refused "$T/changed.db" "the database image from $(api 9) does not check (event 3: .*): nothing written"
backup_refused "$T/junk.db" "the answer of $(api 9) is not a database image (15 bytes)"
[ ! -e "$T/bad-backup.db" ] && [ ! -e "$T/bad-backup.db.tmp" ] || fail "cluster backup wrote an image that does not verify"
recover --restore "$T/backup.db" --id 8 --data-dir "$T/d8" --members "$M8" ||
	fail "--restore: $(cat "$T/err")"
grep -q "a new cluster of 8=127.0.0.1:$(raft_port 8) (a voter) with the state of $T/backup.db" "$T/out" ||
	fail "--restore said: $(cat "$T/out")"
[ "$(cat "$T/d8/member-id")" = 8 ] || fail "the restored data dir does not name member 8"
start_member 8 "$M8"
wait_leader 15 8 || fail "the restored member does not lead"
[ "$(count_jobs 8)" = 63 ] || fail "after the restore, want 63 jobs: $BODY"
get 8 /v1/cluster
[ "$(jget "$BODY" '",".join("%d %s" % (m["id"], m["api_url"]) for m in d["members"])')" = "8 $(api 8)" ] ||
	fail "after the restore, want member 8 at $(api 8) alone: $BODY"
get 8 "/v1/events?limit=1000"
jget "$BODY" '"\n".join(e["message"] for e in d["events"])' |
	grep -q "member 8 127.0.0.1:$(raft_port 8) $(api 8) (voter) set by yardd --restore" ||
	fail "the restore's member change is not among the events: $BODY"
call POST 8 /v1/jobs '{"name":"after-restore"}'
[ "$CODE" = 201 ] || fail "write after the restore: $CODE $BODY"
get 8 /v1/events/verify
[ "$CODE" = 200 ] || fail "the restored cluster's event chain: $CODE $BODY"
note "restored a backup of $(stat -c %s "$T/backup.db") bytes as member 8"
echo "PASS"
