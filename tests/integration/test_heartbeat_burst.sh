#!/usr/bin/env bash
# test_heartbeat_burst.sh: the leader runs agents' heartbeats between loop iterations, a
# budget at a time (web/http.c, deferred routes), so that a burst of them does not hold
# the loop while raft messages wait. Three controllers; 200 registered nodes heartbeat at
# once over connections of their own, among them bad bodies and a revoked-looking token,
# and clients that close their connection before the answer. Every heartbeat gets its
# answer (200 with the node's desired set, 400 naming the field, 401), they were queued
# (the queue held several at once), nothing stays queued, and the nodes are up. A heartbeat
# sent to a follower is redirected to the leader's heartbeat URL. The leader is stopped
# (SIGSTOP) while the requests are sent, so that they are all waiting when it reads, however
# the two processes are scheduled (an election timeout of 1 s outlasts the pause).
. "$(dirname "$0")/lib.sh"

for i in 1 2 3; do
	start_member "$i" "$(members_arg 1 2 3)" --node-suspect-ms 30000 --node-down-ms 60000 \
		--election-timeout-ms 1000
done
wait_leader 20 1 2 3 || fail "no leader"
make_join_token "$LEADER"
FOLLOWER=1
[ "$LEADER" = 1 ] && FOLLOWER=2

python3 - "$(api "$LEADER")" "$(api "$FOLLOWER")" "$JOIN" "${PID[$LEADER]}" >"$T/burst.out" 2>&1 <<'PY' || fail "burst: $(cat "$T/burst.out")"
import json, os, signal, socket, sys, urllib.request
leader, follower, join, leader_pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
N = 200

def post(url, token, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e

tokens = []
for i in range(N):
    code, b = post(leader + "/v1/agents/register", join,
                   {"name": "burst-%03d" % i, "host": "127.0.0.1", "port_base": 40000,
                    "version": "0.1.0", "devices": [{"index": 0, "kind": "cpu", "memory_mb": 1024}]})
    assert code == 200 and b["state"] == "up", (code, b)
    tokens.append(b["node_token"])

host, port = leader.split("//")[1].split(":")
def request(token, body):
    text = body if isinstance(body, str) else json.dumps(body)
    return ("POST /v1/agents/heartbeat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (token, len(text.encode()), text)).encode()

def hb(i):
    return {"node": "burst-%03d" % i, "version": "0.1.0", "free_disk_mb": 1000, "ranks": []}

# what each connection sends, and what its answer must be
plan = []
for i in range(N):
    if i % 40 == 7:
        plan.append((tokens[i], '{"node": "burst-%03d", "ranks": [' % i, 400, "malformed JSON at line 1"))
    elif i % 40 == 13:
        plan.append((tokens[i], dict(hb(i), free_disk_mb="lots"), 400, "free_disk_mb"))
    elif i % 40 == 21:
        plan.append(("not-a-token-" + str(i), hb(i), 401, "unknown or revoked token"))
    else:
        plan.append((tokens[i], hb(i), 200, '"desired"'))
# connect everything first, then send every request back to back while the leader is
# stopped: it reads many in one loop iteration
socks = [socket.create_connection((host, int(port)), timeout=30) for _ in plan]
gone = [socket.create_connection((host, int(port)), timeout=30) for _ in range(20)]
os.kill(leader_pid, signal.SIGSTOP)
try:
    for s, (token, body, _, _) in zip(socks, plan):
        s.sendall(request(token, body))
    for k, s in enumerate(gone): # clients that leave before their answer
        s.sendall(request(tokens[k], hb(k)))
        s.close()
finally:
    os.kill(leader_pid, signal.SIGCONT)

def answer(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, "connection closed before the answer"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, v = line.split(b":", 1)
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(rest) < length:
        rest += s.recv(65536)
    return int(head.split()[1]), rest[:length].decode()

codes = {}
for i, (s, (_, _, want, text)) in enumerate(zip(socks, plan)):
    code, body = answer(s)
    assert code == want and text in body, "heartbeat %d: %d %s (want %d with %r)" % (i, code, body[:300], want, text)
    codes[code] = codes.get(code, 0) + 1
    s.close()
print("answers:", " ".join("%d x%d" % kv for kv in sorted(codes.items())))

# at a follower: redirected to the leader's heartbeat URL, whatever the queue
code, e = post(follower + "/v1/agents/heartbeat", tokens[0], hb(0))
assert code == 307, code
assert e.headers["Location"] == leader + "/v1/agents/heartbeat", e.headers["Location"]
print("follower: 307 to", e.headers["Location"])
PY
note "$(cat "$T/burst.out")"

m() { metric "$LEADER" "$1"; }
queued=$(m yard_http_deferred_total) most=$(m yard_http_deferred_waiting_max)
note "deferred: $queued heartbeats, at most $most waiting at once, $(m yard_http_deferred_dropped_total) dropped (client gone)"
[ "${queued:-0}" -ge 200 ] || fail "heartbeats deferred: '$queued' (want every one of the 220)"
[ "${most:-0}" -ge 2 ] || fail "the heartbeats were not queued: at most '$most' waited at once"
waiting_none() { [ "$(m yard_http_deferred_waiting)" = 0 ]; }
wait_until 10 waiting_none || fail "heartbeats still queued: $(m yard_http_deferred_waiting)"
# the leader still answers, and the nodes whose heartbeats were good are up
for i in 000 050 199; do node_state_is "$LEADER" "burst-$i" up || fail "burst-$i is not up"; done
