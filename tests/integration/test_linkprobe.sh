#!/usr/bin/env bash
# test_linkprobe.sh: node-to-node link measurement with real processes. One controller, two
# agents with 2 CPU devices each on 127.0.0.1: the leader asks each agent to measure its link
# to the other one (heartbeat answer "link_probe"), and both end up with perf.inter_source
# "measured:<the other node>" and a positive bandwidth and latency in GET /v1/nodes/ID. An
# agent's probe port (default: its port-base - 1) refuses malformed and oversized requests and
# connections beyond its limit, naming why, and keeps serving and heartbeating. An agent
# given --link-gbps keeps that figure (inter_source "configured") and is asked for no probe.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 2 "$(api 1)"
start_agent node-b 2 "$(api 1)"
wait_until 10 node_state_is 1 node-a up || fail "node-a did not register"
wait_until 10 node_state_is 1 node-b up || fail "node-b did not register"

# measured:PEER with a positive bandwidth and latency
measured_against() { # measured_against NODE PEER
	get 1 "/v1/nodes/$1"
	[ "$(jget "$BODY" 'd.get("perf", {}).get("inter_source")')" = "measured:$2" ] &&
		[ "$(jget "$BODY" 'd["perf"]["inter_bw_bytes_per_s"] > 0 and d["perf"]["inter_latency_s"] > 0')" = True ]
}
wait_until 60 measured_against node-a node-b || fail "node-a did not measure its link to node-b: $BODY"
wait_until 60 measured_against node-b node-a || fail "node-b did not measure its link to node-a: $BODY"
for n in node-a node-b; do
	get 1 "/v1/nodes/$n"
	note "$n: $(jget "$BODY" '"%s: %.3g B/s, latency %.3g s" % (d["perf"]["inter_source"], d["perf"]["inter_bw_bytes_per_s"], d["perf"]["inter_latency_s"])')"
done
grep -q "link to node node-b (127.0.0.1:$((APORT[node-b] - 1)))" "$T/log.agent-node-a" ||
	fail "node-a did not log its measurement against node-b's default probe port"
grep -q "node node-a measures its link to node node-b" "$T/log.1" || fail "the leader did not log the probe it asked for"

# the probe port: raw requests (PROBE_REPLY: the answers, one per line)
probe() { # probe PORT PYTHON_SNIPPET_USING_s
	PROBE_REPLY=$(timeout 20 python3 - "$1" "$2" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=15)
def answer():
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(256)
        if not chunk:
            break
        buf += chunk
    return buf.decode().strip()
exec(sys.argv[2])
PY
)
}
PA=$((APORT[node-a] - 1))
probe "$PA" 's.sendall(b"PING\n"); print(answer()); s.sendall(b"SINK 1000\n" + b"x" * 1000); print(answer())'
[ "$PROBE_REPLY" = "PONG
DONE 1000" ] || fail "ping and sink: '$PROBE_REPLY'"
probe "$PA" 's.sendall(b"HELLO\n"); print(answer())'
grep -q "^ERR unknown request 'HELLO'" <<<"$PROBE_REPLY" || fail "unknown request: '$PROBE_REPLY'"
probe "$PA" 's.sendall(b"SINK 999999999999\n"); print(answer())'
grep -q "^ERR SINK: '999999999999' is not a byte count in 1..268435456" <<<"$PROBE_REPLY" || fail "oversized sink: '$PROBE_REPLY'"
probe "$PA" 's.sendall(b"SINK -5\n"); print(answer())'
grep -q "^ERR SINK: '-5'" <<<"$PROBE_REPLY" || fail "negative sink: '$PROBE_REPLY'"
probe "$PA" 's.sendall(b"P" * 200); print(answer())'
grep -q "^ERR request line longer than 63 bytes" <<<"$PROBE_REPLY" || fail "long line: '$PROBE_REPLY'"
# more connections than it serves at once: the extra one is refused, the others still work
probe "$PA" '
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=15) for _ in range(3)]
for h in held:
    h.sendall(b"PING\n"); assert h.recv(16) == b"PONG\n"
extra = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=15)
print(extra.recv(256).decode().strip())
s.sendall(b"PING\n"); print(answer())'
[ "$PROBE_REPLY" = "ERR busy (4 probe connections at once at most)
PONG" ] || fail "connection limit: '$PROBE_REPLY'"
grep -q "link probe connection from 127.0.0.1:[0-9]* refused: unknown request 'HELLO'" "$T/log.agent-node-a" ||
	fail "the refusal is not in node-a's log"
# the agent keeps working: still up, heartbeating, and serving probes
alive "${APID[node-a]}" || fail "node-a died"
probe "$PA" 's.sendall(b"PING\n"); print(answer())'
[ "$PROBE_REPLY" = PONG ] || fail "ping after the refusals: '$PROBE_REPLY'"
sleep 1 # heartbeats every 200 ms: one under 1.5 s old (waited for, as load can delay one)
fresh() { get 1 /v1/nodes/node-a; [ "$(jget "$BODY" 'd["state"] == "up" and d["last_heartbeat_ms_ago"] < 1500')" = True ]; }
wait_until 10 fresh || fail "node-a stopped heartbeating after the refusals: $BODY"

# --link-gbps overrides: configured, never probed
start_agent node-c 2 "$(api 1)" --link-gbps 8
wait_until 10 node_state_is 1 node-c up || fail "node-c did not register"
has_perf() { get 1 "/v1/nodes/$1"; [ "$(jget "$BODY" '"perf" in d')" = True ]; }
wait_until 30 has_perf node-c || fail "node-c reported no perf: $BODY"
[ "$(jget "$BODY" 'd["perf"]["inter_source"] == "configured" and d["perf"]["inter_bw_bytes_per_s"] == 1e9')" = True ] ||
	fail "node-c's --link-gbps 8 is not its inter-node figure: $BODY"
grep -q "node node-c measures its link" "$T/log.1" && fail "the leader asked node-c, with --link-gbps, for a probe"
true
