#!/usr/bin/env bash
# TLS and the bearer token: a worker with the right CA and token trains; no token,
# a wrong token, a wrong CA and a plain-text client are refused (and the token
# failures counted); with mutual TLS a worker without a client certificate is refused; a
# sharded job's servers call each other over TLS (--peer_tls_ca) and prove themselves with their
# own secret (--peer_token_file), which the workers' token does not replace.
source "$(dirname "$0")/e2e_lib.sh"
WORKER_PIDS=()
PKI=$WORK/pki
mkdir -p "$PKI"
# make_ca NAME; make_cert CA NAME [server]: keys and certificates with openssl.
make_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" -keyout "$PKI/$1.key" -out "$PKI/$1.pem" 2>/dev/null
}
make_cert() {
  local ca=$1 name=$2 ext
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$name" -keyout "$PKI/$name.key" -out "$PKI/$name.csr" 2>/dev/null
  if [ "${3:-}" = server ]; then ext="subjectAltName=IP:127.0.0.1,DNS:localhost"; else ext="extendedKeyUsage=clientAuth"; fi
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.pem" -CAkey "$PKI/$ca.key" -CAcreateserial -days 2 \
    -extfile <(echo "$ext") -out "$PKI/$name.pem" 2>/dev/null
}
make_ca ca && make_ca other-ca && make_cert ca server server && make_cert ca client && make_cert other-ca rogue ||
  fail "openssl could not make the test certificates"
echo "s3cret-$RANDOM$RANDOM" > "$WORK/token"
echo "not-the-token" > "$WORK/wrong-token"

# run_worker NAME [flags]: trains 3 iterations; returns its exit status.
run_worker() {
  local name=$1; shift
  # --reconnect_timeout=0: a refused TLS handshake looks like a server that is down (UNAVAILABLE);
  # these workers must fail at once instead of waiting for it to come back.
  start_worker "$name" "$WORK/$name.log" --epochs=0 --max_iterations=3 --rpc_timeout=20 --reconnect_timeout=0 "$@"
  wait_workers
}
# refused NAME PATTERN [flags]: the worker must fail and its log must match PATTERN.
refused() {
  local name=$1 pattern=$2; shift 2
  if run_worker "$name" "$@"; then fail "$name: was let in"; fi
  grep -q "$pattern" "$WORK/$name.log" || { cat "$WORK/$name.log" >&2; fail "$name: no '$pattern' in its error"; }
  echo "$name: refused ($(grep -o "$pattern" "$WORK/$name.log" | head -1))"
}

SMP=$(free_port)
start_server tls --num_workers=1 --global_batch=16 --tls_cert="$PKI/server.pem" --tls_key="$PKI/server.key" \
  --auth_token_file="$WORK/token" --metrics_port="$SMP" --metrics_bind=127.0.0.1
grep -q "tls=on token=on" "$WORK/tls.server.log" || fail "server did not report TLS and token on"
GOOD=(--tls_ca="$PKI/ca.pem" --auth_token_file="$WORK/token")
refused no-token "UNAUTHENTICATED" --tls_ca="$PKI/ca.pem"
refused wrong-token "wrong bearer token" --tls_ca="$PKI/ca.pem" --auth_token_file="$WORK/wrong-token"
refused wrong-ca "UNAVAILABLE" --tls_ca="$PKI/other-ca.pem" --auth_token_file="$WORK/token"
refused plain-text "UNAVAILABLE" --auth_token_file="$WORK/token"
run_worker good "${GOOD[@]}" || { cat "$WORK/good.log" >&2; fail "the worker with CA and token was refused"; }
echo "good: trained over TLS with the token"
n=$(curl -sf "http://127.0.0.1:$SMP/metrics" | awk '$1 == "omnilearn_unauthenticated_total" {print $2}')
[ "$n" = 2 ] || fail "omnilearn_unauthenticated_total is '$n', want 2 (no token, wrong token)"
# Each refused join is in the server's log, with its cause and peer.
grep -q "refused a join from 127.0.0.1: UNAUTHENTICATED: wrong bearer token" "$WORK/tls.server.log" ||
  fail "the server did not log the join it refused for a wrong token"
stop_server

start_server mtls --num_workers=1 --global_batch=16 --tls_cert="$PKI/server.pem" --tls_key="$PKI/server.key" \
  --tls_client_ca="$PKI/ca.pem"
grep -q "tls=mutual" "$WORK/mtls.server.log" || fail "server did not report mutual TLS"
refused no-client-cert "UNAVAILABLE" --tls_ca="$PKI/ca.pem"
refused rogue-client-cert "UNAVAILABLE" --tls_ca="$PKI/ca.pem" --tls_cert="$PKI/rogue.pem" --tls_key="$PKI/rogue.key"
run_worker mutual --tls_ca="$PKI/ca.pem" --tls_cert="$PKI/client.pem" --tls_key="$PKI/client.key" ||
  { cat "$WORK/mutual.log" >&2; fail "the worker with a client certificate was refused"; }
echo "mutual: trained with a client certificate"
stop_server

# A sharded job under mutual TLS and the token: the shard's link to the coordinator and the
# coordinator's export pulls go over TLS, each server presenting its own certificate.
SERVER_TLS=(--tls_cert="$PKI/server.pem" --tls_key="$PKI/server.key" --tls_client_ca="$PKI/ca.pem"
            --auth_token_file="$WORK/token" --shards=2 --partition_mb=0.01)
if timeout 10 "$SERVER" --bind=127.0.0.1 --port=0 --metrics_port=0 "${SERVER_TLS[@]}" > "$WORK/nopeer.log" 2>&1; then
  fail "a sharded coordinator with TLS started without --peer_tls_ca"
fi
grep -q "needs --peer_tls_ca" "$WORK/nopeer.log" || fail "no clear error for a sharded TLS job without --peer_tls_ca"
# Servers beyond loopback prove to each other that they are servers of the job: without a
# peer secret a sharded coordinator or shard refuses to start, and the secret must not be the
# workers' token.
for role in "--shards=2" "--coordinator=127.0.0.1:1 --shards=2"; do
  if timeout 10 "$SERVER" --bind=0.0.0.0 --port=0 --metrics_port=0 $role > "$WORK/nopeertoken.log" 2>&1; then
    fail "a sharded server ($role) listening beyond loopback started without --peer_token_file"
  fi
  grep -q "peer_token_file" "$WORK/nopeertoken.log" || { cat "$WORK/nopeertoken.log" >&2; fail "no clear error ($role)"; }
done
if timeout 10 "$SERVER" --bind=0.0.0.0 --port=0 --metrics_port=0 --shards=2 --auth_token_file="$WORK/token" \
    --peer_token_file="$WORK/token" > "$WORK/sametoken.log" 2>&1; then
  fail "a sharded server took the workers' token as its peer secret"
fi
grep -q "holds the workers' token" "$WORK/sametoken.log" || fail "no clear error for the workers' token as peer secret"
echo "peer-$RANDOM$RANDOM" > "$WORK/peer-token"
start_server sharded --num_workers=1 --global_batch=16 "${SERVER_TLS[@]}" --peer_tls_ca="$PKI/ca.pem" \
  --export="$WORK/sharded.safetensors" --peer_token_file="$WORK/peer-token"
# A holder of the workers' token (and a valid certificate) is no server of the job: refused.
if timeout 60 "$SERVER" --bind=127.0.0.1 --port="$(free_port)" --metrics_port=0 --coordinator="127.0.0.1:$PORT" \
    "${SERVER_TLS[@]}" --peer_tls_ca="$PKI/ca.pem" --start_timeout_s=5 > "$WORK/impostor.log" 2>&1; then
  fail "a shard without the peer secret registered"
fi
grep -q "peer secret" "$WORK/impostor.log" || { cat "$WORK/impostor.log" >&2; fail "the impostor was not told why"; }
grep -q "shard 1 registered" "$WORK/sharded.server.log" && fail "the impostor took slice 1"
echo "impostor: a shard with the workers' token alone was refused"
timeout 120 "$SERVER" --bind=127.0.0.1 --port="$(free_port)" --metrics_port=0 --coordinator="127.0.0.1:$PORT" \
  "${SERVER_TLS[@]}" --peer_tls_ca="$PKI/ca.pem" --peer_token_file="$WORK/peer-token" \
  > "$WORK/sharded.shard.log" 2>&1 &
SHARD_PID=$!
STARTED+=("$SHARD_PID")
run_worker sharded-mutual "${GOOD[@]}" --tls_cert="$PKI/client.pem" --tls_key="$PKI/client.key" ||
  { cat "$WORK/sharded-mutual.log" "$WORK/sharded.server.log" >&2; fail "the worker of the sharded TLS job failed"; }
grep -q "shard 1 registered" "$WORK/sharded.server.log" || fail "the shard did not register over TLS"
stop_server
grep -q "exported the model" "$WORK/sharded.server.log" ||
  { cat "$WORK/sharded.server.log" >&2; fail "the sharded export did not pull the shard's slice over TLS"; }
wait "$SHARD_PID" || { cat "$WORK/sharded.shard.log" >&2; fail "the shard did not exit 0"; }
echo "sharded: trained and exported over mutual TLS between the servers"

# Half a TLS configuration is a clear start-up error, not a silent plain-text server.
if timeout 10 "$SERVER" --bind=127.0.0.1 --port=0 --metrics_port=0 --tls_cert="$PKI/server.pem" \
  > "$WORK/half.log" 2>&1; then fail "server started with a certificate but no key"; fi
grep -q "needs both --tls_cert and --tls_key" "$WORK/half.log" || fail "no clear error for a certificate without key"
echo "PASS"
