#!/usr/bin/env python3
"""api_fuzz.py: hostile requests against a live yardd, for test_api_fuzz.sh.

From a valid request per route (tests/integration/test_api_fuzz.sh makes the tokens, node,
build, advisory and job they name), sends N mutated requests, reproducibly from --seed:
bodies with keys dropped, added or renamed, values of another type or out of range, huge or
odd strings, deep nesting, duplicated keys, truncated or flipped bytes, other path segments
(long, percent-encoded, traversal) and query values, and the tokens of other roles. Checks,
for every answer: no 5xx; a 4xx is a JSON object whose "error" is a string; a 4xx commits
nothing (every committed command appends an event naming its principal: none may appear but
the leader's own, actor "scheduler"); and at the end the server still answers /healthz and
its event chain verifies. On a failure it prints the
request (method, path, token role, body) and exits 1.

Usage: api_fuzz.py --url URL --tokens FILE [--requests N] [--seed S]
  FILE: JSON {"admin": ..., "user": ..., "security": ..., "agent": ..., "node": ...,
  "job": ID, "token_id": ID, "build": VERSION, "advisory": ID}
"""
import argparse
import http.client
import json
import random
import sys
import urllib.parse

LONG = "x" * 5000
ODD_STRINGS = ["", " ", "\u0000", "\u202e", "é" * 40, "../../etc/passwd", "%00", "a" * 64,
               "a" * 65, LONG, "\ud7ff", "null", "-1", "1e309", "😀" * 20, "\n\r\t"]
ODD_NUMBERS = [0, -1, 1, 2 ** 31, 2 ** 31 - 1, -2 ** 31, 2 ** 53 + 1, 2 ** 63 - 1, -2 ** 63,
               2 ** 64, 1e308, -1e308, 1e-320, 0.5, -0.0, 3.14159]
ODD_SEGMENTS = ["0", "-1", "j-999999", "ro-000000", "..", "%2e%2e", "%00", "a%2Fb",
                "%ff%fe", "x" * 300, "t-" + "f" * 64, "node-a%20", "1e3", "", "%25"]


def routes(ids):
    """(method, path, role, body) of valid requests, * segments filled with real ids."""
    spec = {"name": "fz", "model": {"d_in": 8, "d_model": 16, "d_ff": 32, "layers": 2,
                                     "classes": 4},
            "train": {"steps": 5, "batch_size": 8}, "parallel": {"dp": 1, "tp": 1, "pp": 1}}
    job, build, adv = ids["job"], ids["build"], ids["advisory"]
    return [
        ("POST", "/v1/jobs", "user", {"name": "fz", "ranks": 2, "command": ["sleep", "1"],
                                      "env": {"A": "b"}, "priority": 3,
                                      "failure": {"max_restarts": 1}}),
        ("POST", "/v1/jobs", "user", spec),
        ("POST", "/v1/plan", "user", dict(spec, parallel="auto")),
        ("POST", "/v1/jobs/%s/cancel" % job, "user", None),
        ("POST", "/v1/jobs/%s/checkpoint" % job, "user", None),
        ("DELETE", "/v1/jobs/j-999999", "user", None),  # not the job the others use
        ("GET", "/v1/jobs?state=pending&limit=5", "user", None),
        ("GET", "/v1/jobs/%s" % job, "user", None),
        ("GET", "/v1/jobs/%s/logs?rank=0&generation=1&offset=0&max_bytes=100" % job, "user",
         None),
        ("GET", "/v1/jobs/%s/metrics?after=0&limit=10" % job, "user", None),
        ("GET", "/v1/jobs/%s/timeline" % job, "user", None),
        ("GET", "/v1/jobs/%s/checkpoints" % job, "user", None),
        ("POST", "/v1/jobs/%s/checkpoints/10/shards/0" % job, "node",
         {"generation": 1, "size": 4, "sha256": "0" * 64, "data": "AAAAAA=="}),
        ("POST", "/v1/jobs/%s/checkpoints/10/shards/0/commit" % job, "node", None),
        ("PUT", "/v1/jobs/%s/checkpoints/10/shards/0/chunks/0" % job, "node", b"\0\0\0\0"),
        ("GET", "/v1/events?after=0&limit=20", "admin", None),
        ("POST", "/v1/tokens", "admin", {"name": "fz-user", "role": "user"}),
        ("DELETE", "/v1/tokens/%s" % ids["token_id"], "admin", None),
        ("GET", "/v1/tokens", "admin", None),
        ("POST", "/v1/agents/register", "agent",
         {"name": "node-z", "host": "127.0.0.1", "port_base": 29500, "version": "0.1.0",
          "devices": [{"index": 0, "kind": "cpu", "memory_mb": 4096}],
          "labels": {"rack": "r1"}}),
        ("POST", "/v1/agents/heartbeat", "node",
         {"node": "node-a", "version": "0.1.0", "free_disk_mb": 12000,
          "ranks": [{"job": job, "rank": 0, "generation": 1, "pid": 42, "state": "running",
                     "step": 3, "loss": 0.5, "step_ms": 10.0, "last_step_ms_ago": 5}],
          "logs": [{"job": job, "rank": 0, "generation": 1, "offset": 0,
                    "data": "aGVsbG8K"}]}),
        ("GET", "/v1/nodes", "user", None),
        ("GET", "/v1/nodes/node-a", "user", None),
        ("POST", "/v1/nodes/node-a/cordon", "admin", None),
        ("POST", "/v1/nodes/node-a/uncordon", "admin", None),
        ("POST", "/v1/builds", "security",
         {"version": "9.9.9", "component": "agent", "sha256": "a" * 64, "size": 10,
          "notes": "n", "advisory": adv}),
        ("PUT", "/v1/builds/%s/chunks/0" % build, "security", b"0123456789"),
        ("POST", "/v1/builds/%s/commit" % build, "security", None),
        ("DELETE", "/v1/builds/9.9.9", "security", None),
        ("GET", "/v1/builds/%s" % build, "user", None),
        ("GET", "/v1/builds/%s/binary" % build, "user", None),
        ("POST", "/v1/advisories", "security",
         {"title": "t", "severity": "high", "text": "x", "cve": "RESERVED", "embargo_days": 3,
          "visibility": {"roles": ["security"], "principals": ["sec-1"]}}),
        ("POST", "/v1/advisories/%s/embargo" % adv, "security", {"embargo_days": 2}),
        ("POST", "/v1/advisories/%s/share" % adv, "security",
         {"roles": ["operator"], "principals": ["user-1"]}),
        ("GET", "/v1/advisories/%s" % adv, "user", None),
        ("GET", "/v1/audit?after=0&limit=10", "admin", None),
        ("POST", "/v1/rollouts", "admin",
         {"build": build, "waves": "1,50%,100%", "soak_s": 1, "gate_timeout_s": 5,
          "failure_budget": 0, "policy": "move", "step_time_regression_pct": 20}),
        ("POST", "/v1/rollouts/ro-000001/pause", "admin", {"reason": "r"}),
        ("POST", "/v1/rollouts/ro-000001/resume", "admin", None),
        ("GET", "/v1/rollouts/ro-000001", "admin", None),
        ("GET", "/v1/cluster", "user", None),
    ]


def mutate_value(rng, v, depth=0):
    """v with one thing changed somewhere inside it."""
    if isinstance(v, dict) and v and rng.random() < 0.7:
        k = rng.choice(sorted(v))
        out = dict(v)
        roll = rng.random()
        if roll < 0.15:
            del out[k]
        elif roll < 0.3:
            out[rng.choice(["bogus", "", k.upper(), k + "_", LONG[:70]])] = out[k]
        else:
            out[k] = mutate_value(rng, out[k], depth + 1)
        return out
    if isinstance(v, list) and v and rng.random() < 0.6:
        out = list(v)
        i = rng.randrange(len(out))
        roll = rng.random()
        if roll < 0.2:
            del out[i]
        elif roll < 0.4:
            out = out * rng.choice([2, 50, 2000])
        else:
            out[i] = mutate_value(rng, out[i], depth + 1)
        return out
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(ODD_NUMBERS)
    if roll < 0.55:
        return rng.choice(ODD_STRINGS)
    if roll < 0.65:
        return rng.choice([None, True, False, [], {}, [v], {"v": v}])
    if roll < 0.75:
        deep = v
        for _ in range(rng.choice([5, 31, 33, 200])):
            deep = [deep]
        return deep
    if isinstance(v, str) and v:
        return v[:-1] if rng.random() < 0.5 else v + rng.choice(["\u00e9", "%", "\\", "\""])
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return rng.choice([v + 1, v - 1, -v, v * 1000, float(v) + 0.5, str(v)])
    return rng.choice(ODD_NUMBERS + ODD_STRINGS)


def mutate_bytes(rng, data):
    roll = rng.random()
    if roll < 0.25 and data:
        return data[:rng.randrange(len(data))]
    if roll < 0.5 and data:
        b = bytearray(data)
        for _ in range(rng.choice([1, 3, 10])):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if roll < 0.6:
        return b"{" * rng.choice([32, 33, 500])
    if roll < 0.7:
        return data.replace(b":", b":" + b'"dup":1,', 1) if data else b"{}"
    if roll < 0.8:
        return b'{"a":1}{"b":2}'
    if roll < 0.9:
        return b"\xff\xfe\x00garbage"
    return b""


def mutate_path(rng, path):
    parsed = urllib.parse.urlsplit(path)
    segs = parsed.path.split("/")
    query = urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)
    if query and rng.random() < 0.5:
        i = rng.randrange(len(query))
        query[i] = (query[i][0], str(rng.choice(ODD_NUMBERS + ODD_STRINGS[:8])))
    elif len(segs) > 3 and rng.random() < 0.7:
        i = rng.randrange(3, len(segs))
        segs[i] = rng.choice(ODD_SEGMENTS)
    else:
        query.append((rng.choice(["limit", "after", "stale", "bogus", "rank", "offset"]),
                      rng.choice(["-1", "0", "99999999999999999999", "x", "", "1"])))
    q = "&".join("%s=%s" % (urllib.parse.quote(k, safe=""), urllib.parse.quote(v, safe="%"))
                 for k, v in query)
    return "/".join(segs) + ("?" + q if q else "")


class Client:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.conn = None

    def request(self, method, path, token, body):
        for attempt in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
                headers = {"Authorization": "Bearer " + token} if token else {}
                if body is not None:
                    headers["Content-Type"] = "application/json"
                self.conn.request(method, path, body=body, headers=headers)
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, data
            except (http.client.HTTPException, OSError):
                if self.conn:
                    self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    ids = json.load(open(a.tokens))
    rng = random.Random(a.seed)
    client = Client(a.url)
    table = routes(ids)
    roles = ["admin", "user", "security", "agent", "node"]

    last_seq = [0]

    def new_events():
        """Events committed since the last call (the leader's own, actor "scheduler", go on
        by themselves: a node going suspect, a rollout moving)."""
        out = []
        while True:
            status, data = client.request(
                "GET", "/v1/events?after=%d&limit=1000" % last_seq[0], ids["admin"], None)
            if status != 200:
                fail("GET /v1/events: %d %s" % (status, data[:200]))
            events = json.loads(data)["events"]
            if not events:
                return out
            out += events
            last_seq[0] = max(e["seq"] for e in events)

    def fail(msg, req=None):
        print("FAIL: " + msg, file=sys.stderr)
        if req:
            method, path, role, body = req
            print("  request: %s %s as %s, body %r" % (method, path, role,
                                                       (body or b"")[:400]),
                  file=sys.stderr)
        print("  (seed %d)" % a.seed, file=sys.stderr)
        sys.exit(1)

    counts = {}
    new_events()
    for n in range(a.requests):
        method, path, role, body = rng.choice(table)
        roll = rng.random()
        if body is not None and not isinstance(body, bytes) and roll < 0.55:
            raw = json.dumps(mutate_value(rng, body)).encode()
        elif body is not None and roll < 0.75:
            raw = mutate_bytes(rng, body if isinstance(body, bytes) else
                               json.dumps(body).encode())
        elif roll < 0.9:
            path = mutate_path(rng, path)
            raw = body if isinstance(body, bytes) else (
                json.dumps(body).encode() if body is not None else None)
        else:
            role = rng.choice(roles + ["none", "wrong"])
            raw = body if isinstance(body, bytes) else (
                json.dumps(body).encode() if body is not None else None)
        token = {"none": None, "wrong": "f" * 64}.get(role, ids.get(role))
        req = (method, path, role, raw)
        try:
            status, data = client.request(method, path, token, raw)
        except (http.client.HTTPException, OSError) as e:
            fail("no answer (%s): the server died or hung" % e, req)
        counts[status // 100] = counts.get(status // 100, 0) + 1
        if status >= 500:
            fail("%d: %s" % (status, data[:300]), req)
        if status >= 400:
            try:
                err = json.loads(data)
            except ValueError:
                fail("%d with a body that is not JSON: %r" % (status, data[:200]), req)
            if not isinstance(err, dict) or not isinstance(err.get("error"), str):
                fail("%d without an error string: %r" % (status, data[:200]), req)
        made = [e for e in new_events() if e.get("actor") != "scheduler"]
        if status >= 400 and made:
            fail("a %d answer (%r) committed %s" % (status, data[:200], json.dumps(made)[:300]),
                 req)
    status, data = client.request("GET", "/healthz", None, None)
    if status != 200:
        fail("/healthz after the run: %d" % status)
    status, data = client.request("GET", "/v1/events/verify", ids["admin"], None)
    if status != 200:
        fail("the event chain does not verify after the run: %d %s" % (status, data[:300]))
    print("%d requests (seed %d): %s" % (a.requests, a.seed, ", ".join(
        "%dxx %d" % (k, v) for k, v in sorted(counts.items()))))


if __name__ == "__main__":
    main()
