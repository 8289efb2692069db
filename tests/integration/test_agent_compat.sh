#!/usr/bin/env bash
# test_agent_compat.sh: yard-agent against a controller of another version. It asks for
# shared parts (desired_shared) only after an answer offered them (offers_shared), and after
# a 400 (an older controller refusing a field it does not know) its next heartbeat goes
# without the field; it makes an answer's entries whole from desired_shared and ignores, and
# says why, an answer whose entry names a part it does not hold. The controller here is a
# stand-in (python3 http.server) that records every heartbeat and answers by a script.
. "$(dirname "$0")/lib.sh"
work=$T
# the stand-in's and the agent's logs go with lib.sh's failure report
note_seen() { cp "$work/seen" "$T/log.seen" 2>/dev/null || true; }

# Answers: heartbeats with desired_shared get 400 on every other one; every 200 offers shared
# parts; the 4th 200 carries an entry naming a part the answer lacks.
cat >"$work/server.py" <<'PY'
import http.server, json, sys
seen = open(sys.argv[2], "a", buffering=1)
state = {"asked": 0, "ok": 0}
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def answer(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.answer(404, {"error": "not here"})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/v1/agents/register":
            return self.answer(200, {"node_token": "t0ken"})
        if self.path != "/v1/agents/heartbeat":
            return self.answer(404, {"error": "not here"})
        asked = "desired_shared" in body
        if asked:
            state["asked"] += 1
        if asked and state["asked"] % 2 == 1:
            seen.write("asked 400\n")
            return self.answer(400, {"error": "unknown field desired_shared", "field": "desired_shared"})
        state["ok"] += 1
        a = {"commands": [], "leader_id": "fake", "offers_shared": True, "desired": []}
        if state["ok"] == 4:
            a["desired"] = [{"job": "j-1", "rank": 0, "generation": 1, "shared": "j-1"}]
            a["desired_shared"] = {}
        seen.write(("asked" if asked else "plain") + " 200\n")
        self.answer(200, a)
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
port=$((PORT_BASE + 21))
python3 "$work/server.py" "$port" "$work/seen" >"$T/log.server" 2>&1 &
PID[server]=$!
wait_until 10 curl -s -o /dev/null "http://127.0.0.1:$port/" || fail "the stand-in did not start"
"$YARD_AGENT" --controllers "http://127.0.0.1:$port" --join-token j --data-dir "$T/agent-x" \
	--name node-x --devices cpu:1 --port-base $((PORT_BASE + 40)) --heartbeat-ms 100 \
	--watch-ms 0 >"$T/log.agent-x" 2>&1 &
PID[agent]=$!
ten_seen() { [ "$(wc -l <"$work/seen" 2>/dev/null || echo 0)" -ge 10 ]; }
wait_until 10 ten_seen || { note_seen; fail "fewer than 10 heartbeats in 10 s"; }
kill -0 "${PID[agent]}" || fail "the agent died"
# the first heartbeat has seen no offer; after a 200 (which always offers) the agent asks;
# after a 400 it does not
prev=
while read -r kind code; do
	case "$prev" in
	"") [ "$kind" = plain ] || { note_seen; fail "the first heartbeat asked before any offer"; } ;;
	*" 200") [ "$kind" = asked ] || { note_seen; fail "a heartbeat after an offering answer did not ask"; } ;;
	*" 400") [ "$kind" = plain ] || { note_seen; fail "a heartbeat after a 400 asked again"; } ;;
	esac
	prev="$kind $code"
done <"$work/seen"
grep -q "desired entry 0 names shared part 'j-1'" "$T/log.agent-x" ||
	fail "the agent did not say why it ignored an answer naming a missing part"
sort "$work/seen" | uniq -c
echo "ok: asks after an offer, not after a 400; names a missing shared part"
