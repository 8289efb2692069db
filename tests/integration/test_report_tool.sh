#!/usr/bin/env bash
# test_report_tool.sh: yard-report against stand-ins for the agent's socket. Where the agent
# says it answers (YARD_AGENT_ANSWERS=1, as yard-agent sets for its ranks), it exits 0 once the
# agent answers "ok", 4 naming the reason when it answers "refused: ...", and 0 when no answer
# comes within 1 s of the read (an agent rolled back to a build without answers); without
# the variable (a rank of such an agent) 0 as soon as the line is read. 3 when
# the line is not read within 15 s (an agent restarting into a new build reads it late) or
# the agent's queue stays full for 5 s (never a hang),
# 2 without a socket, 1 on bad arguments.
set -u
T=$(mktemp -d "${TMPDIR:-/tmp}/yard-report.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
# agent MODE SOCK: a stand-in agent. answer: answers each line with $2 (written to SOCK.got);
# late: the same 0.2 s after reading it; spoof: the same, after an "ok" from another socket;
# mute: reads, never answers; deaf: never reads; full: never reads, its queue filled.
cat >"$T/agent.py" <<'PY'
import os, socket, sys, time
mode, path = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
if mode == "full":
    f = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    f.setblocking(False)
    try:
        while True:
            f.sendto(b"{}", path)
    except BlockingIOError:
        pass
open(path + ".ready", "w").close()
while True:
    if mode in ("deaf", "full"):
        time.sleep(60)
        continue
    line, sender = s.recvfrom(4096)
    open(path + ".got", "ab").write(line + b"\n")
    if mode == "spoof" and sender:  # "ok" from another socket first: not the agent's
        o = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        o.bind(path + ".other")
        o.sendto(b"ok", sender)
        time.sleep(0.2)
    if mode == "late":
        time.sleep(0.2)
    if mode in ("answer", "late", "spoof") and sender:
        try:
            s.sendto(sys.argv[3].encode(), sender)
        except OSError:  # the sender left without waiting (no YARD_AGENT_ANSWERS)
            pass
PY
agent() {
	python3 "$T/agent.py" "$@" &
	for _ in $(seq 1 100); do [ -e "$2.ready" ] && return 0; sleep 0.05; done
	fail "stand-in agent $1 did not start"
}
# report EXPECTED_RC SOCK ARGS...: runs yard-report, its stderr in $T/err, its milliseconds in $MS
report() {
	local want=$1 sock=$2 rc=0 t0
	shift 2
	t0=$(date +%s%3N)
	YARD_AGENT_SOCK=$sock YARD_AGENT_ANSWERS=${ANSWERS-1} timeout 20 yard-report "$@" 2>"$T/err" || rc=$?
	MS=$(($(date +%s%3N) - t0))
	[ "$rc" = "$want" ] || fail "yard-report $* to $sock: exit $rc, want $want ($(cat "$T/err"))"
}

agent answer "$T/ok.sock" ok
report 0 "$T/ok.sock" 7 0.25
grep -qx '{"step":7,"loss":0.25}' "$T/ok.sock.got" || fail "the line sent: $(cat "$T/ok.sock.got")"
[ ! -s "$T/err" ] || fail "stderr on success: $(cat "$T/err")"

agent answer "$T/no.sock" "refused: loss: must be a number within +-1e300"
report 4 "$T/no.sock" --json '{"step":1,"loss":1e308}'
grep -qx "yard-report: the agent refused: loss: must be a number within +-1e300" "$T/err" ||
	fail "the reason is not on stderr: $(cat "$T/err")"

agent mute "$T/mute.sock"
report 0 "$T/mute.sock" 3
[ "$MS" -ge 900 ] || fail "an agent that reads without answering: $MS ms (want at least 1 s)"
agent spoof "$T/spoof.sock" "refused: from the agent"
report 4 "$T/spoof.sock" 6
grep -qx "yard-report: the agent refused: from the agent" "$T/err" ||
	fail "an answer from another socket was taken: $(cat "$T/err")"

# an answer 0.2 s after the read: awaited where the agent says it answers, not otherwise
agent late "$T/late.sock" "refused: late"
report 4 "$T/late.sock" 4
ANSWERS=0 report 0 "$T/late.sock" 5
grep -qx '{"step":5}' "$T/late.sock.got" || fail "not read: $(cat "$T/late.sock.got")"

agent deaf "$T/deaf.sock"
report 3 "$T/deaf.sock" 3
grep -q "did not read the report within 15 s" "$T/err" || fail "unread: $(cat "$T/err")"
[ "$MS" -ge 14000 ] && [ "$MS" -lt 30000 ] || fail "unread: exit after $MS ms, want ~15 s"

agent full "$T/full.sock"
report 3 "$T/full.sock" 3
grep -q "the agent's queue stayed full for 5 s" "$T/err" || fail "full queue: $(cat "$T/err")"
[ "$MS" -lt 15000 ] || fail "full queue: $MS ms"

report 2 "$T/none.sock" 3
grep -q "none.sock" "$T/err" || fail "missing socket not named: $(cat "$T/err")"
rc=0
env -u YARD_AGENT_SOCK yard-report 3 2>"$T/err" || rc=$?
[ "$rc" = 2 ] && grep -q "YARD_AGENT_SOCK is not set" "$T/err" || fail "no socket: exit $rc, $(cat "$T/err")"
for bad in "-1" "x" "3 nan-ish" "--json"; do
	# shellcheck disable=SC2086
	report 1 "$T/ok.sock" $bad
done
echo "ok: answered, refused (exit 4 with the reason), answered by a stranger first, answered late, unanswered (0 after ~1 s), unread (3 after 15 s) and full (3 after 5 s), no socket (2), bad arguments (1)"
