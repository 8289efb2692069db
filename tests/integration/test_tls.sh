#!/usr/bin/env bash
# test_tls.sh: the API over TLS (yardd --tls-cert/--tls-key). Three members serve https://
# URLs signed by a private CA; yardctl (--cacert, YARD_CACERT) and yard-agent (--cacert)
# verify them, follow the leader's https:// redirect and carry on after the leader is
# killed; an agent trains a job and uploads its checkpoints over TLS. A client without the CA
# or with another CA is refused with a message naming the certificate problem, at once (a
# wrong CA is no reason to retry); plain HTTP to a TLS port gets no answer, and HTTP/2 asked
# for through ALPN gets HTTP/1.1. yardd refuses a missing or mismatched key, a certificate
# file it cannot read, and a member URL whose scheme contradicts the flags, naming them.
# With --tls-client-ca (mutual TLS) a client must present a certificate that CA signed:
# yardctl (--cert/--key, YARD_CERT/YARD_KEY) and yard-agent (--cert/--key) without one, or
# with one of another CA, get nothing, and say what that may mean.
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || { echo "# openssl not installed (scripts/setup)"; exit 77; }

# a CA, a certificate for 127.0.0.1 signed by it, and another CA that signed nothing here
certs() {
	mkdir -p "$T/tls" && cd "$T/tls" || return 1
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-keyout ca.key -out ca.crt -subj "/CN=test CA" &&
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
			-keyout rogue.key -out rogue.crt -subj "/CN=test CA" &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key \
			-out server.csr -subj "/CN=127.0.0.1" &&
		printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >ext &&
		openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
			-extfile ext -out server.crt &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout client.key \
			-out client.csr -subj "/CN=node-m" &&
		printf 'extendedKeyUsage=clientAuth\n' >cext &&
		openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
			-extfile cext -out client.crt
}
certs >"$T/openssl.log" 2>&1 || { cat "$T/openssl.log"; fail "openssl could not make the certificates"; }
cd "$T" || fail "no $T"
CA=$T/tls/ca.crt
TLS_ARGS=(--tls-cert "$T/tls/server.crt" --tls-key "$T/tls/server.key")

# lib.sh's helpers speak to the members over https, verified against the CA
api() { echo "https://127.0.0.1:$(api_port "$1")"; }
curl() { command curl --cacert "$CA" "$@"; }

# yardd_refuses WHAT ARGS...: yardd exits with status 2 or 1 at start, its message holding WHAT
yardd_refuses() {
	local what=$1 out rc
	shift
	out=$("$YARDD" --id 1 --data-dir "$T/refused" --raft-address "127.0.0.1:$(raft_port 9)" \
		--api-address "127.0.0.1:$(api_port 9)" "$@" 2>&1)
	rc=$?
	{ [ "$rc" = 1 ] || [ "$rc" = 2 ]; } && grep -qF -- "$what" <<<"$out" ||
		fail "yardd $*: exit $rc, wanted a message with '$what': $out"
}
https9="1=127.0.0.1:$(raft_port 9)@https://127.0.0.1:$(api_port 9)"
http9="1=127.0.0.1:$(raft_port 9)@http://127.0.0.1:$(api_port 9)"
yardd_refuses "--tls-cert and --tls-key go together" --members "$https9" \
	--tls-cert "$T/tls/server.crt"
yardd_refuses "--tls-cert $T/tls/none.crt" --members "$https9" \
	--tls-cert "$T/tls/none.crt" --tls-key "$T/tls/server.key"
yardd_refuses "does not match --tls-cert" --members "$https9" \
	--tls-cert "$T/tls/server.crt" --tls-key "$T/tls/ca.key"
yardd_refuses "must start with https:// with --tls-cert" --members "$http9" "${TLS_ARGS[@]}"
yardd_refuses "is https:// but no --tls-cert" --members "$https9"
yardd_refuses "--tls-cert does not go with --dev" --dev "${TLS_ARGS[@]}"
yardd_refuses "--tls-client-ca needs --tls-cert and --tls-key" --members "$https9" \
	--tls-client-ca "$CA"
yardd_refuses "--tls-client-ca $T/tls/none.crt" --members "$https9" "${TLS_ARGS[@]}" \
	--tls-client-ca "$T/tls/none.crt"
out=$("$YARD_AGENT" --controllers "$(api 1)" --data-dir "$T/none" --name n --devices cpu:1 \
	--cacert "$T/tls/none.crt" 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -qF "cacert $T/tls/none.crt" <<<"$out" || fail "agent --cacert none: exit $rc: $out"

M=$(members_arg 1 2 3)
for i in 1 2 3; do start_member $i "$M" "${TLS_ARGS[@]}"; done
wait_leader 15 1 2 3 || fail "no leader over https"
grep -q "listening on https://" "$T/log.1" || fail "member 1 does not say it serves https"

# plain HTTP to the TLS port: no answer (and the member keeps serving)
code=$(command curl -s -m 5 -o /dev/null -w '%{http_code}' -H "$AUTH" "http://127.0.0.1:$(api_port 1)/v1/cluster")
[ "$code" = 000 ] || fail "plain HTTP to a TLS port got $code"
# HTTP/2 asked for through ALPN: HTTP/1.1
v=$(curl -s --http2 -o /dev/null -w '%{http_version}' "$(api 1)/healthz")
[ "$v" = 1.1 ] || fail "ALPN h2 gave HTTP $v"

export YARD_TOKEN=$TOKEN
follower=1
[ "$LEADER" = 1 ] && follower=2
# yardctl without the CA: refused, naming the certificate problem and --cacert, on the first
# endpoint (no retries: the verbose log holds one request)
out=$(yardctl -v --endpoints "$(api $follower),$(api $LEADER)" cluster status 2>&1)
rc=$?
[ "$rc" = 1 ] && grep -q "TLS: SSL certificate problem" <<<"$out" && grep -q -- "--cacert" <<<"$out" ||
	fail "yardctl without the CA: exit $rc: $out"
[ "$(grep -c "GET https://" <<<"$out")" = 1 ] || fail "yardctl retried a certificate failure: $out"
# another CA: refused too
out=$(yardctl --cacert "$T/tls/rogue.crt" --endpoints "$(api 1)" cluster status 2>&1)
rc=$?
[ "$rc" = 1 ] && grep -q "TLS: SSL certificate problem" <<<"$out" || fail "yardctl, another CA: exit $rc: $out"
# an unreadable CA file: a usage error naming it
out=$(yardctl --cacert "$T/tls/none.crt" --endpoints "$(api 1)" cluster status 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -qF "CA file $T/tls/none.crt" <<<"$out" || fail "yardctl --cacert none: exit $rc: $out"
# the CA from YARD_CACERT; a write to a follower follows the https:// redirect to the leader
export YARD_CACERT=$CA
out=$(yardctl --endpoints "$(api $follower)" token create ops --role operator 2>&1) ||
	fail "yardctl token create through a follower: $out"
out=$(yardctl --endpoints "$(api $follower)" -o json cluster status 2>&1) || fail "cluster status: $out"
[ "$(jget "$out" 'd["leader"]["api_url"]')" = "$(api $LEADER)" ] || fail "leader URL: $out"

# an agent without the CA never registers, and says why
make_join_token "$LEADER"
start_agent node-x 1 "$(api 1),$(api 2),$(api 3)"
wait_until 15 grep -q "SSL certificate problem" "$T/log.agent-node-x" ||
	fail "agent without the CA: $(tail -3 "$T/log.agent-node-x")"
[ ! -s "$T/agent-node-x/node.token" ] || fail "an agent without the CA registered"
kill_agent node-x

# an agent with the CA registers and trains; its checkpoints go up over TLS
start_agent node-a 2 "$(api 1),$(api 2),$(api 3)" --cacert "$CA"
wait_until 20 node_state_is "$LEADER" node-a up || fail "node-a did not register over TLS"
cat >"$T/job.json" <<'EOF'
{"name": "tls", "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 2, "classes": 4, "seed": 1},
 "train": {"steps": 120, "batch_size": 64, "lr": 0.001, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 1, "samples": 1024},
 "parallel": {"dp": 2, "tp": 1, "pp": 1},
 "checkpoint": {"every_steps": 40, "keep": 2}}
EOF
out=$(yardctl --endpoints "$(api $follower)" job submit "$T/job.json" 2>&1) || fail "submit: $out"
J=$(sed -n 's/^job \(j-[0-9]*\) submitted.*/\1/p' <<<"$out")
[ -n "$J" ] || fail "no job id in: $out"
wait_job_done "$LEADER" "$J" succeeded 60 180 || fail "job $J over TLS: $(job_field "$LEADER" "$J" '')"
has_event "$LEADER" "$J" "checkpoint.complete" || fail "no checkpoint uploaded: $(events_of "$LEADER" "$J")"

# the leader dies: the agent and yardctl carry on with the new one, over https
old=$LEADER
kill_member "$old"
rest=$(for i in 1 2 3; do [ "$i" != "$old" ] && printf '%s ' $i; done)
# shellcheck disable=SC2086 # two ids
wait_leader 15 $rest || fail "no new leader"
wait_until 20 node_state_is "$LEADER" node-a up || fail "node-a lost with the leader"
out=$(yardctl --endpoints "$(api $old),$(api 1),$(api 2),$(api 3)" job show "$J" 2>&1) ||
	fail "yardctl after the leader died: $out"
grep -q "succeeded" <<<"$out" || fail "job $J after failover: $out"
submit "$LEADER" '{"name":"after","ranks":1,"command":["true"]}'
wait_until 20 job_state_is "$LEADER" "$JOB" succeeded || fail "no job ran on node-a after the failover"
note "TLS: 3 members, agent trained $J with checkpoints, failover from $old to $LEADER"

# ---- mutual TLS: a member that requires client certificates signed by the CA ----
cleanup_agents
for i in 1 2 3; do [ -n "${PID[$i]:-}" ] && kill_member $i; done
unset YARD_CACERT
start_member 4 "$(members_arg 4)" "${TLS_ARGS[@]}" --tls-client-ca "$CA"
curl() { command curl --cacert "$CA" --cert "$T/tls/client.crt" --key "$T/tls/client.key" "$@"; }
wait_leader 15 4 || fail "no leader with client certificates required"
grep -q "client certificates required" "$T/log.4" || fail "member 4 does not say it requires client certificates"
code=$(command curl -s -m 5 -o /dev/null -w '%{http_code}' --cacert "$CA" "$(api 4)/healthz")
[ "$code" = 000 ] || fail "a client without a certificate got $code"
export YARD_CACERT=$CA
out=$(yardctl --retries 0 --endpoints "$(api 4)" cluster status 2>&1)
rc=$?
[ "$rc" = 1 ] && grep -q "requires client certificates closes connections without one: --cert and --key?" <<<"$out" ||
	fail "yardctl without a client certificate: exit $rc: $out"
out=$(yardctl --retries 0 --cert "$T/tls/rogue.crt" --key "$T/tls/rogue.key" --endpoints "$(api 4)" cluster status 2>&1)
rc=$?
[ "$rc" = 1 ] && grep -q "closes connections whose certificate its CA did not sign" <<<"$out" ||
	fail "yardctl with another CA's certificate: exit $rc: $out"
out=$(yardctl --cert "$T/tls/client.crt" --endpoints "$(api 4)" cluster status 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -q "needs both --cert and --key" <<<"$out" || fail "yardctl --cert alone: exit $rc: $out"
out=$(YARD_CERT=$T/tls/client.crt YARD_KEY=$T/tls/client.key yardctl --endpoints "$(api 4)" cluster status 2>&1) ||
	fail "yardctl with the client certificate: $out"
out=$("$YARD_AGENT" --controllers "$(api 4)" --data-dir "$T/none" --name n --devices cpu:1 \
	--cert "$T/tls/client.crt" 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -q "cert and --key go together" <<<"$out" || fail "agent --cert alone: exit $rc: $out"
make_join_token 4
start_agent node-n 1 "$(api 4)" --cacert "$CA"
start_agent node-m 1 "$(api 4)" --cacert "$CA" --cert "$T/tls/client.crt" --key "$T/tls/client.key"
wait_until 20 node_state_is 4 node-m up || fail "node-m did not register with its certificate"
wait_until 10 grep -q "register: no controller answered" "$T/log.agent-node-n" ||
	fail "node-n without a certificate: $(tail -3 "$T/log.agent-node-n")"
[ ! -s "$T/agent-node-n/node.token" ] || fail "an agent without a client certificate registered"
submit 4 '{"name":"mtls","ranks":1,"command":["true"]}'
wait_until 20 job_state_is 4 "$JOB" succeeded || fail "no job ran on node-m under mutual TLS"
note "mutual TLS: yardctl and node-m with certificates served, clients without refused"

# ---- SIGHUP reads the TLS files again: a renewed certificate for new connections ----
served_serial() {
	openssl s_client -connect "127.0.0.1:$(api_port 4)" -cert "$T/tls/client.crt" \
		-key "$T/tls/client.key" </dev/null 2>/dev/null | openssl x509 -noout -serial
}
before=$(served_serial)
[ "$before" = "$(openssl x509 -noout -serial -in "$T/tls/server.crt")" ] || fail "served $before"
(cd "$T/tls" && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
	-days 2 -extfile ext -out renewed.crt) >>"$T/openssl.log" 2>&1 || fail "renewing: $(tail -3 "$T/openssl.log")"
mv "$T/tls/renewed.crt" "$T/tls/server.crt"
kill -HUP "${PID[4]}"
wait_until 10 grep -q "TLS certificate reloaded from $T/tls/server.crt" "$T/log.4" ||
	fail "no reload after SIGHUP: $(tail -3 "$T/log.4")"
after=$(served_serial)
[ "$after" = "$(openssl x509 -noout -serial -in "$T/tls/server.crt")" ] && [ "$after" != "$before" ] ||
	fail "after SIGHUP the member serves $after (before: $before)"
# a broken file: refused, named, and the certificate in use stays
cp "$T/tls/server.crt" "$T/tls/good.crt"
echo "not a certificate" >"$T/tls/server.crt"
kill -HUP "${PID[4]}"
wait_until 10 grep -q "SIGHUP: TLS files not reloaded, the API keeps its certificate: --tls-cert $T/tls/server.crt" "$T/log.4" ||
	fail "a broken certificate file was not refused: $(tail -3 "$T/log.4")"
[ "$(served_serial)" = "$after" ] || fail "the member no longer serves its certificate after a failed reload"
alive "${PID[4]}" || fail "member 4 died on SIGHUP"
out=$(YARD_CERT=$T/tls/client.crt YARD_KEY=$T/tls/client.key yardctl --endpoints "$(api 4)" cluster status 2>&1) ||
	fail "yardctl after a failed reload: $out"
note "SIGHUP: serial $before -> $after; a broken file refused"
