#!/usr/bin/env bash
# The HTTP edge against its floor, side by side in one run (benches/README.md, "HTTP edge").
#
#   benches/edge.sh            (env: EDGE_SECS per wrk run, default 5; EDGE_RUNS, default 3;
#                               EDGE_STREAMS, default 100,1000,10000; EDGE_ONLY=streams for the
#                               memory part alone, EDGE_ONLY=wire for the wrk part alone;
#                               EDGE_BASELINE=path to another spillway binary, e.g. the previous
#                               commit's, measured as a fourth path in the same runs;
#                               RUST_LOG as for serve)
#
# Upstream: nginx answering every POST with a fixed chat completion (JSON) or a fixed 30-chunk
# SSE stream. Paths measured: nginx direct, nginx as a reverse proxy in front of it (the
# pass-through floor), and Spillway in front of it, for JSON and SSE over kept-alive
# connections at 16 and 256 connections (wrk, 1 thread). Runs are interleaved (direct,
# pass-through, Spillway, repeat) so that noise lands on all three; medians and the range of
# EDGE_RUNS runs are printed. Then a Node `fetch` streamed call (the JavaScript SDKs'
# transport), direct and through Spillway, and the router's RSS with 100, 1,000 and 10,000
# slow streams open. Needs nginx and wrk (Debian: nginx-light wrk) and node.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${EDGE_SECS:-5}
RUNS=${EDGE_RUNS:-3}
STREAMS=${EDGE_STREAMS:-100,1000,10000}
for tool in nginx wrk node; do
  command -v $tool >/dev/null || { echo "edge.sh needs $tool (apt-get install nginx-light wrk nodejs)"; exit 1; }
done
cargo build --release --quiet
cargo bench --bench edge_streams --no-run --quiet 2>/dev/null
BIN=target/release/spillway
WORK=$(mktemp -d /tmp/spillway-edge.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
U_JSON=$(free_port); U_SSE=$(free_port); P_JSON=$(free_port); P_SSE=$(free_port); S=$(free_port); B=$(free_port)

# The fixed answers, served by nginx as static files.
JSON_ANSWER='{"id":"chatcmpl-1","object":"chat.completion","created":1764547200,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"The printer on floor three is jammed again; a technician is on the way and it should be back within the hour."},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":27,"total_tokens":51}}'
chunk() { printf 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764547200,"model":"bench","choices":[%s]}\n\n' "$1"; }
{
  chunk '{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}'
  for w in The printer on floor three is jammed again and a technician is on the way so it should be back within the hour thank you for your; do
    chunk "{\"index\":0,\"delta\":{\"content\":\" $w\"},\"finish_reason\":null}"
  done
  chunk '{"index":0,"delta":{},"finish_reason":"stop"}'
  printf 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764547200,"model":"bench","choices":[],"usage":{"prompt_tokens":24,"completion_tokens":27,"total_tokens":51}}\n\n'
  printf 'data: [DONE]\n\n'
} > "$WORK/sse.txt"
test "$(grep -c '^data: {' "$WORK/sse.txt")" = 30

mkdir -p "$WORK/json/v1/chat" "$WORK/sse/v1/chat"
printf '%s' "$JSON_ANSWER" > "$WORK/json/v1/chat/completions"
cp "$WORK/sse.txt" "$WORK/sse/v1/chat/completions"
chmod -R a+rX "$WORK"
cat > "$WORK/nginx.conf" <<EOF
worker_processes 2;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream json_up { server 127.0.0.1:$U_JSON; keepalive 512; }
  upstream sse_up { server 127.0.0.1:$U_SSE; keepalive 512; }
  # Static files answer POST through the 405 → 200 redirect (which turns the method into GET).
  server { listen 127.0.0.1:$U_JSON; location / { root $WORK/json; default_type application/json; error_page 405 =200 \$uri; } }
  server { listen 127.0.0.1:$U_SSE; location / { root $WORK/sse; default_type text/event-stream; error_page 405 =200 \$uri; } }
  server { listen 127.0.0.1:$P_JSON; location / { proxy_pass http://json_up; proxy_http_version 1.1; proxy_set_header Connection ""; } }
  server { listen 127.0.0.1:$P_SSE; location / { proxy_pass http://sse_up; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } }
}
EOF
nginx -p "$WORK" -c "$WORK/nginx.conf" -g 'daemon off;' & PIDS+=($!)

cat > "$WORK/spillway.yaml" <<EOF
listen: 127.0.0.1:$S
backends:
  - {name: json-upstream, kind: openai_compatible, base_url: "http://127.0.0.1:$U_JSON/v1", model: bench, stream_upstream: false}
  - {name: sse-upstream, kind: openai_compatible, base_url: "http://127.0.0.1:$U_SSE/v1", model: bench}
tasks:
  - {name: bench-json, backends: [json-upstream], slo: {ttft_ms: 5000}}
  - {name: bench-sse, backends: [sse-upstream], slo: {ttft_ms: 5000}}
limits: {max_concurrency: 20000}
ledger: {enabled: false}
EOF
"$BIN" serve --config "$WORK/spillway.yaml" 2>"$WORK/spillway.log" & PIDS+=($!)
PATHS="direct pass spillway"
if [ -n "${EDGE_BASELINE:-}" ]; then
  sed "s/^listen: .*/listen: 127.0.0.1:$B/" "$WORK/spillway.yaml" > "$WORK/baseline.yaml"
  "$EDGE_BASELINE" serve --config "$WORK/baseline.yaml" 2>"$WORK/baseline.log" & PIDS+=($!)
  PATHS="$PATHS baseline"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$B/readyz" >/dev/null && break; sleep 0.1; done
fi
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$S/readyz" >/dev/null && curl -sf -o /dev/null "http://127.0.0.1:$U_SSE/" -d x && break; sleep 0.1; done

if [ "${EDGE_ONLY:-}" != streams ]; then
for kind in json sse; do
  stream=false; [ $kind = sse ] && stream=true
  cat > "$WORK/$kind.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"bench-$kind","stream":$stream,"messages":[{"role":"user","content":"Is the printer on floor three working?"}]}'
EOF
done
# Check that each path answers what it should before timing it.
curl -sf "http://127.0.0.1:$S/v1/chat/completions" -H 'content-type: application/json' -d @<(sed -n "s/^wrk.body = '\(.*\)'$/\1/p" "$WORK/sse.lua") | grep -q '^data: \[DONE\]'
curl -sf "http://127.0.0.1:$S/v1/chat/completions" -H 'content-type: application/json' -d @<(sed -n "s/^wrk.body = '\(.*\)'$/\1/p" "$WORK/json.lua") | grep -q '"finish_reason":"stop"'

# wrk's output → "rps p50_ms p99_ms non2xx"
measure() {
  wrk -t1 -c"$2" -d"${SECS}s" --latency -s "$WORK/$3.lua" "$1" 2>&1 | awk '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    $1 == "50%" { p50 = ms($2) } $1 == "99%" { p99 = ms($2) }
    $1 == "Requests/sec:" { rps = $2 } /Non-2xx/ { bad = $NF }
    END { printf "%.0f %.3f %.3f %d\n", rps, p50, p99, bad + 0 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s (%s–%s)", m, v[1], v[NR] }'; }

echo "## HTTP edge, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores shared by wrk, nginx and Spillway; ${RUNS} runs of ${SECS} s each, median (range)"
echo
echo "| answer | connections | path | requests/s | p50 ms | p99 ms | vs pass-through rps | p99 vs pass-through |"
echo "|---|---|---|---|---|---|---|---|"
for kind in json sse; do
  for conns in 16 256; do
    if [ $kind = json ]; then direct=$U_JSON; pass=$P_JSON; else direct=$U_SSE; pass=$P_SSE; fi
    : > "$WORK/runs"
    for _ in $(seq "$RUNS"); do
      for path in $PATHS; do
        case $path in direct) port=$direct;; pass) port=$pass;; spillway) port=$S;; baseline) port=$B;; esac
        echo "$path $(measure "http://127.0.0.1:$port/v1/chat/completions" "$conns" "$kind")" >> "$WORK/runs"
      done
    done
    pass_rps=$(awk '$1 == "pass" { print $2 }' "$WORK/runs" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    pass_p99=$(awk '$1 == "pass" { print $4 }' "$WORK/runs" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    for path in $PATHS; do
      rps=$(awk -v p=$path '$1 == p { print $2 }' "$WORK/runs" | median)
      p50=$(awk -v p=$path '$1 == p { print $3 }' "$WORK/runs" | median)
      p99=$(awk -v p=$path '$1 == p { print $4 }' "$WORK/runs" | median)
      bad=$(awk -v p=$path '$1 == p { s += $5 } END { print s + 0 }' "$WORK/runs")
      rps_mid=${rps%% *}; p99_mid=${p99%% *}
      ratio=$(awk -v a="$rps_mid" -v b="$pass_rps" 'BEGIN { printf "%.2f×", a / b }')
      p99ratio=$(awk -v a="$p99_mid" -v b="$pass_p99" 'BEGIN { printf "%.2f×", a / b }')
      label=$path; [ $path = pass ] && label="nginx pass-through"; [ $path = direct ] && label="nginx direct"
      [ $path = baseline ] && label="baseline ($EDGE_BASELINE)"
      [ "$bad" != 0 ] && label="$label ($bad non-2xx)"
      echo "| $kind | $conns | $label | $rps | $p50 | $p99 | $ratio | $p99ratio |"
    done
  done
done

[ "${EDGE_ONLY:-}" = wire ] && exit 0
echo
echo "Node fetch, one streamed call at a time on a kept-alive connection (300 calls, after 50 to warm up):"
cat > "$WORK/fetch.mjs" <<'EOF'
const [url, model] = process.argv.slice(2);
const body = JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "Is the printer working?" }] });
const times = [];
for (let i = 0; i < 350; i++) {
  const t0 = performance.now();
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
  const text = await r.text();
  if (!text.includes("data: [DONE]")) throw new Error("incomplete stream: " + text.slice(0, 200));
  if (i >= 50) times.push(performance.now() - t0);
}
times.sort((a, b) => a - b);
const q = (p) => times[Math.floor(p * (times.length - 1))].toFixed(2);
console.log(`p50 ${q(0.5)} ms, p90 ${q(0.9)} ms, p99 ${q(0.99)} ms`);
EOF
echo "- direct (nginx): $(node "$WORK/fetch.mjs" "http://127.0.0.1:$U_SSE/v1/chat/completions" bench-sse)"
echo "- through Spillway: $(node "$WORK/fetch.mjs" "http://127.0.0.1:$S/v1/chat/completions" bench-sse)"
fi

echo
echo "Router RSS with slow streams open (upstream: spillway sim, first token at once, then one token every 20 s):"
SLOW=$(free_port)
"$BIN" sim --kind openai --listen "127.0.0.1:$SLOW" --model bench --ttft-ms 1 --tokens-per-sec 0.05 --output-tokens 4 2>/dev/null & PIDS+=($!)
S2=$(free_port)
cat > "$WORK/slow.yaml" <<EOF
listen: 127.0.0.1:$S2
backends:
  - {name: slow, kind: openai_compatible, base_url: "http://127.0.0.1:$SLOW/v1", model: bench}
tasks:
  - {name: slow, backends: [slow], slo: {ttft_ms: 60000}}
limits: {max_concurrency: 20000}
dispatch: {stream_idle_timeout_ms: 120000}
ledger: {enabled: false}
EOF
"$BIN" serve --config "$WORK/slow.yaml" 2>"$WORK/spillway-slow.log" & ROUTER=$!; PIDS+=($ROUTER)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$S2/readyz" >/dev/null && break; sleep 0.1; done
STREAM_BIN=$(ls -t target/release/deps/edge_streams-* | grep -v '\.d$' | head -1)
small=$(echo "$STREAMS" | tr ',' '\n' | awk '$1 <= 1000' | paste -sd,)
[ -n "$small" ] && "$STREAM_BIN" "http://127.0.0.1:$S2" "$ROUTER" slow "$small" h1
"$STREAM_BIN" "http://127.0.0.1:$S2" "$ROUTER" slow "$STREAMS" h2 | tail -n +3
