#!/usr/bin/env bash
# test_yardd_args.sh: yardd refuses a bad command line at once (exit 2, naming the flag)
# instead of starting as something else: an --id that is not an integer >= 1 ("1x" was
# member 1, "-1" member 2^64-1, "abc" read as "not given"), and a first start whose --id is
# not among --members (it waited for ever for a configuration naming it). A member whose
# data dir holds raft state restarts whatever --members says (its log has the configuration).
# Raft and API addresses must be a.b.c.d:port, whole; a restart at another raft address than
# the configuration's is refused.
. "$(dirname "$0")/lib.sh"

# yardd_exit ID MEMBERS [FLAGS...]: runs yardd in the foreground (20 s at most); its log in
# $T/args.log
yardd_exit() {
	timeout 20 "$YARDD" --id "$1" --data-dir "$T/d-args" --raft-address "127.0.0.1:$(raft_port 1)" \
		--api-address "127.0.0.1:$(api_port 1)" --members "$2" "${@:3}" >"$T/args.log" 2>&1
}
M1=$(members_arg 1)
for id in abc 1x -1 0 +1 99999999999999999999; do
	yardd_exit "$id" "$M1"
	rc=$?
	[ "$rc" = 2 ] && grep -qF -- "--id: '$id' is not a member id" "$T/args.log" ||
		fail "--id $id: exit $rc: $(cat "$T/args.log")"
done
[ ! -e "$T/d-args/metadata1" ] || fail "a refused --id left raft state behind"
yardd_exit 2 "$M1"
rc=$?
[ "$rc" = 2 ] && grep -qF -- "--id 2 is not among --members" "$T/args.log" ||
	fail "--id 2 with members 1 only: exit $rc: $(cat "$T/args.log")"
note "bad --id and an --id missing from --members refused"

# scheduler settings out of range name the flag and the range
for v in abc -1 86401; do
	yardd_exit 1 "$M1" --preempt-after-s "$v"
	rc=$?
	[ "$rc" = 2 ] && grep -qF -- "--preempt-after-s: '$v' is not 0..86400" "$T/args.log" ||
		fail "--preempt-after-s $v: exit $rc: $(cat "$T/args.log")"
done
for v in "rack 1" "a/b" "$(printf 'l%.0s' $(seq 64))"; do
	yardd_exit 1 "$M1" --topology-label "$v"
	rc=$?
	[ "$rc" = 2 ] && grep -qF -- "--topology-label: '$v' is not a label name" "$T/args.log" ||
		fail "--topology-label $v: exit $rc: $(cat "$T/args.log")"
done
for v in 0 101; do
	yardd_exit 1 "$M1" --auto-grow-pct "$v"
	rc=$?
	[ "$rc" = 2 ] && grep -qF -- "--auto-grow-pct: '$v' is not 1..100" "$T/args.log" ||
		fail "--auto-grow-pct $v: exit $rc: $(cat "$T/args.log")"
done
# addresses are a.b.c.d:port taken whole: "7001x" was a raft address listening on 7001 with
# the text kept in the configuration, and a member of --members was not checked at all
for v in "127.0.0.1:$(raft_port 1)x" 127.0.0.1:65536 localhost:7001 127.0.0.1; do
	timeout 20 "$YARDD" --id 1 --data-dir "$T/d-args" --raft-address "$v" \
		--api-address "127.0.0.1:$(api_port 1)" --members "1=$v@$(api 1)" >"$T/args.log" 2>&1
	rc=$?
	[ "$rc" = 2 ] && grep -qF -- "--raft-address $v: want a.b.c.d:port" "$T/args.log" ||
		fail "--raft-address $v: exit $rc: $(cat "$T/args.log")"
	yardd_exit 1 "$M1,2=$v@http://127.0.0.1:1"
	rc=$?
	[ "$rc" = 2 ] && grep -qF -- "--members: bad member '2=$v@http://127.0.0.1:1': want ID=a.b.c.d:port@URL" "$T/args.log" ||
		fail "--members with 2=$v: exit $rc: $(cat "$T/args.log")"
	timeout 20 "$YARDD" --id 1 --data-dir "$T/d-args" --raft-address "127.0.0.1:$(raft_port 1)" \
		--api-address "$v" --members "$M1" >"$T/args.log" 2>&1
	rc=$?
	[ "$rc" = 2 ] && grep -qF -- "--api-address $v: want a.b.c.d:port" "$T/args.log" ||
		fail "--api-address $v: exit $rc: $(cat "$T/args.log")"
done
[ ! -e "$T/d-args/metadata1" ] || fail "a refused flag left raft state behind"
note "--preempt-after-s and --auto-grow-pct out of range, addresses not a.b.c.d:port refused"

# a member with state restarts although --members no longer lists it
start_member 1 "$M1"
wait_leader 10 1 || fail "no leader"
kill_member 1
start_member 1 "$(members_arg 2)"
wait_leader 10 1 || fail "member 1 did not restart from its state: $(tail -3 "$T/log.1")"
note "a member with raft state restarts whatever --members lists"

# a restart at another raft address than the configuration's is refused: the others would
# dial the old one and never reach it
kill_member 1
timeout 20 "$YARDD" --id 1 --data-dir "$T/d1" --raft-address "127.0.0.1:$(raft_port 5)" \
	--api-address "127.0.0.1:$(api_port 1)" --members "$M1" >"$T/args.log" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -qF -- "--raft-address 127.0.0.1:$(raft_port 5): the raft configuration in $T/d1 has member 1 at 127.0.0.1:$(raft_port 1)" "$T/args.log" ||
	fail "a restart at another raft address: exit $rc: $(cat "$T/args.log")"
start_member 1 "$M1"
wait_leader 10 1 || fail "member 1 did not restart at its own address after the refusal"
note "a restart at another raft address refused"

# a raft address another process holds is named as such (raft 0.15 says only "I/O error")
timeout 20 "$YARDD" --id 2 --data-dir "$T/d-taken" --raft-address "127.0.0.1:$(raft_port 1)" \
	--api-address "127.0.0.1:$(api_port 2)" --members "2=127.0.0.1:$(raft_port 1)@$(api 2)" >"$T/args.log" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -qF -- "the raft address 127.0.0.1:$(raft_port 1) is in use by another process" "$T/args.log" ||
	fail "a raft address in use: exit $rc: $(cat "$T/args.log")"
note "a raft address in use named"
