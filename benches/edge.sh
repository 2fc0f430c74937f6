#!/usr/bin/env bash
# The HTTP edge against its floor and the commit before, side by side in one run
# (benches/README.md, "HTTP edge").
#
#   benches/edge.sh    env: EDGE_SECS per wrk run (default 5); EDGE_RUNS (default 3);
#                      EDGE_BASELINE, a git revision or a spillway binary (default HEAD~1; a
#                      revision is built once into target/edge-baseline/);
#                      EDGE_ONLY=cpu|latency|streams for one part, or EDGE_ONLY=profile (not in
#                      a whole run) for the perf profile of each size in EDGE_SIZES; EDGE_STREAMS (default
#                      100,1000,10000); EDGE_SIZES (default "chat agent"); EDGE_PEER=0 to
#                      leave out the peer; EDGE_WRITE=0 to leave benches/README.md as it is
#
# Core 0 carries the router under test: nginx as a keep-alive reverse proxy (the pass-through
# floor, one worker), SGLang Model Gateway (the Rust peer, PyPI `sglang-router`, `smg launch
# --policy round_robin`, installed once into target/bench-peer-venv), Spillway, and the
# baseline Spillway, each pinned with taskset and loaded one at a time. Core 1 carries the load
# generator and the upstream. Every router runs with its features on: Spillway with the SQLite
# ledger and its spool, metrics, one access line per request; the peer with its defaults.
#
# Two request sizes: `chat`, a 60-byte question, and `agent`, a coding agent's 100 KB turn
# (system prompt, 12 tool schemas, a history of tool calls and results: benches/agent_turn.py,
# deterministic).
#
# 1. CPU per request: wrk (1 thread, kept-alive connections) against nginx's fixed chat
#    completion (JSON) and fixed 30-chunk SSE answer, at 16 and 256 connections, for each size;
#    the CPU time of each router's processes over the run (/proc utime + stime) over the
#    requests served.
# 2. Latency at one connection: benches/edge_latency.rs times each answer and the first token
#    at each size, and every frame of 512 streams paced at 20 ms, directly and through each
#    router.
# 3. Router RSS with 100, 1,000 and 10,000 slow streams open (benches/edge_streams.rs).
#
# Interleaved runs (pass-through, Spillway, baseline, repeat) so that noise lands on all;
# medians and (range). Needs nginx, wrk (Debian: nginx-light wrk) and taskset.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${EDGE_SECS:-5}
RUNS=${EDGE_RUNS:-3}
SIZES=${EDGE_SIZES:-chat agent}
STREAMS=${EDGE_STREAMS:-100,1000,10000}
BASELINE=${EDGE_BASELINE:-HEAD~1}
ONLY=${EDGE_ONLY:-}
ROUTER_CPU=0
LOAD_CPU=1
for tool in nginx wrk taskset; do
  command -v $tool >/dev/null || { echo "edge.sh needs $tool (apt-get install nginx-light wrk util-linux)"; exit 1; }
done
part() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }
PATHS="pass spillway baseline"
if [ "${EDGE_PEER:-1}" = 1 ]; then
  PATHS="pass peer spillway baseline"
  PEER_VENV=target/bench-peer-venv
  if [ ! -x "$PEER_VENV/bin/smg" ]; then
    python3 -m venv "$PEER_VENV"
    "$PEER_VENV/bin/pip" install --quiet --disable-pip-version-check 'sglang-router==0.3.2'
  fi
fi

# The baseline: a binary, or a revision built once in a worktree sharing target/'s dependencies.
if [ -x "$BASELINE" ]; then
  BASE_BIN=$(realpath "$BASELINE"); BASE_NAME=$BASELINE
else
  sha=$(git rev-parse --short "$BASELINE")
  BASE_BIN=$PWD/target/edge-baseline/$sha/spillway; BASE_NAME="commit $sha"
  if [ ! -x "$BASE_BIN" ]; then
    tree=$(mktemp -d /tmp/spillway-baseline.XXXXXX)
    git worktree add --detach --quiet "$tree" "$sha"
    (cd "$tree" && CARGO_TARGET_DIR="$OLDPWD/target" cargo build --release --quiet --bin spillway)
    mkdir -p "$(dirname "$BASE_BIN")" && cp target/release/spillway "$BASE_BIN"
    git worktree remove --force "$tree"
    touch src/main.rs  # the current build's binary was overwritten: link it again
  fi
fi
cargo build --release --quiet
cargo bench --no-run --quiet --bench edge_streams --bench edge_latency 2>/dev/null
BIN=target/release/spillway
bench_bin() { ls -t target/release/deps/"$1"-* | grep -v '\.d$' | head -1; }
HEAD_NAME="commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src vllm Cargo.toml || echo '+changes')"

# What else shares the cores: processes busy over one second, before this run starts any.
BUSY=$(top -b -n 2 -d 1 -w 200 | awk '/^ *PID/ { n++; next } n == 2 && $9 > 5 { printf "%s %s%%, ", $12, $9 }' | sed 's/, $//')
BUSY=${BUSY:-none}
WORK=$(mktemp -d /tmp/spillway-edge.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# taskset execs the program: `$!` is its pid.
ON_ROUTER="taskset -c $ROUTER_CPU"
ON_LOAD="taskset -c $LOAD_CPU"
U_JSON=$(free_port); U_SSE=$(free_port); P_JSON=$(free_port); P_SSE=$(free_port)
L_FAST=$(free_port); L_PACED=$(free_port); P_FAST=$(free_port); P_PACED=$(free_port)
S=$(free_port); B=$(free_port)
G_JSON=$(free_port); G_SSE=$(free_port); G_FAST=$(free_port); G_PACED=$(free_port)

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

nginx_conf() {  # name, then the http block's servers
  cat > "$WORK/$1.conf" <<EOF
worker_processes 1;
pid $WORK/$1.pid;
error_log $WORK/$1-error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 1000000;
  $2
}
EOF
}
# Static files answer POST through the 405 → 200 redirect (which turns the method into GET);
# /health answers the peer, which registers a worker only once it does.
nginx_conf upstream "
  server { listen 127.0.0.1:$U_JSON; location = /health { return 200; } location / { root $WORK/json; default_type application/json; error_page 405 =200 \$uri; } }
  server { listen 127.0.0.1:$U_SSE; location = /health { return 200; } location / { root $WORK/sse; default_type text/event-stream; error_page 405 =200 \$uri; } }"
proxy() { echo "upstream up_$1 { server 127.0.0.1:$2; keepalive 512; }
  server { listen 127.0.0.1:$3; location / { proxy_pass http://up_$1; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; } }"; }
nginx_conf proxy "$(proxy json $U_JSON $P_JSON) $(proxy sse $U_SSE $P_SSE) $(proxy fast $L_FAST $P_FAST) $(proxy paced $L_PACED $P_PACED)"
$ON_LOAD nginx -p "$WORK" -c "$WORK/upstream.conf" -g 'daemon off;' & PIDS+=($!)
$ON_ROUTER nginx -p "$WORK" -c "$WORK/proxy.conf" -g 'daemon off;' & NGINX=$!; PIDS+=($NGINX)
LATENCY_BIN=$(bench_bin edge_latency)
$ON_LOAD "$LATENCY_BIN" serve --listen "127.0.0.1:$L_FAST" & PIDS+=($!)
$ON_LOAD "$LATENCY_BIN" serve --listen "127.0.0.1:$L_PACED" --pace-ms 20 & PIDS+=($!)

router_conf() {  # listen port, ledger file
  cat <<EOF
listen: 127.0.0.1:$1
backends:
  - {name: json-upstream, kind: openai_compatible, base_url: "http://127.0.0.1:$U_JSON/v1", model: bench, stream_upstream: false}
  - {name: sse-upstream, kind: openai_compatible, base_url: "http://127.0.0.1:$U_SSE/v1", model: bench}
  - {name: fast-upstream, kind: openai_compatible, base_url: "http://127.0.0.1:$L_FAST/v1", model: bench}
  - {name: paced-upstream, kind: openai_compatible, base_url: "http://127.0.0.1:$L_PACED/v1", model: bench}
tasks:
  - {name: bench-json, backends: [json-upstream], slo: {ttft_ms: 5000}}
  - {name: bench-sse, backends: [sse-upstream], slo: {ttft_ms: 5000}}
  - {name: bench-fast, backends: [fast-upstream], slo: {ttft_ms: 5000}}
  - {name: bench-paced, backends: [paced-upstream], slo: {ttft_ms: 5000}}
limits: {max_concurrency: 20000}
ledger: {url: "sqlite://$2"}
EOF
}
router_conf $S "$WORK/ledger.db" > "$WORK/spillway.yaml"
router_conf $B "$WORK/baseline-ledger.db" > "$WORK/baseline.yaml"
$ON_ROUTER "$BIN" serve --config "$WORK/spillway.yaml" 2>"$WORK/spillway.log" & SPILLWAY=$!; PIDS+=($SPILLWAY)
$ON_ROUTER "$BASE_BIN" serve --config "$WORK/baseline.yaml" 2>"$WORK/baseline.log" & BASE=$!; PIDS+=($BASE)
for port in $S $B; do
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
done
# The peer: one gateway per upstream (it balances over workers, it does not route by model),
# its periodic health checks off. It answers 503 until it has registered its worker.
PEERS=()
if [[ " $PATHS " == *" peer "* ]]; then
  for pair in "$G_JSON $U_JSON" "$G_SSE $U_SSE" "$G_FAST $L_FAST" "$G_PACED $L_PACED"; do
    set -- $pair
    $ON_ROUTER "$PEER_VENV/bin/smg" launch --host 127.0.0.1 --port "$1" --worker-urls "http://127.0.0.1:$2" \
      --policy round_robin --disable-health-check --prometheus-port "$(free_port)" \
      > "$WORK/peer-$1.log" 2>&1 & PEERS+=($!); PIDS+=($!)
  done
  for port in $G_JSON $G_SSE $G_FAST $G_PACED; do
    for _ in $(seq 300); do
      curl -sf -o /dev/null "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
        -d '{"model":"bench","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}' && break
      sleep 0.1
    done
  done
fi
for port in $U_SSE $P_SSE $L_FAST; do
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/v1/chat/completions" -d '{}' && break; sleep 0.1; done
done

# Each path's port per answer, and the processes whose CPU time counts.
port_of() {  # path answer
  case $1 in
    pass) case $2 in json) echo $P_JSON;; sse) echo $P_SSE;; fast) echo $P_FAST;; paced) echo $P_PACED;; esac;;
    peer) case $2 in json) echo $G_JSON;; sse) echo $G_SSE;; fast) echo $G_FAST;; paced) echo $G_PACED;; esac;;
    spillway) echo $S;; baseline) echo $B;;
  esac
}
model_of() { case $1 in pass|peer) echo bench;; *) echo "bench-$2";; esac; }
pids_of() {
  case $1 in
    pass) echo "$NGINX $(pgrep -P "$NGINX" | tr '\n' ' ')";;
    peer) for p in "${PEERS[@]}"; do echo "$p $(pgrep -P "$p" | tr '\n' ' ')"; done;;
    spillway) echo $SPILLWAY;; baseline) echo $BASE;;
  esac
}
label() { case $1 in pass) echo "nginx pass-through";; peer) echo "SGLang Model Gateway 0.3.2";; spillway) echo "Spillway ($HEAD_NAME)";; baseline) echo "Spillway ($BASE_NAME)";; esac; }
ticks() { local t=0 f; for p in "$@"; do read -r -a f < "/proc/$p/stat"; t=$((t + f[13] + f[14])); done; echo $t; }
HZ=$(getconf CLK_TCK)
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s (%s–%s)", m, v[1], v[NR] }'; }

OUT=$WORK/tables.md
{
echo "Run $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)): core $ROUTER_CPU the router under test (the idle ones beside it), core $LOAD_CPU the load generator and the upstream. Before the run: load average $(cut -d' ' -f1-3 /proc/loadavg); processes over 5 % of a core: $BUSY."
echo
} > "$OUT"

# Each path's request bodies, and the wrk script that sends one.
for kind in json sse; do
  stream=false; [ $kind = sse ] && stream=true
  for path in $PATHS; do
    printf '{"model":"%s","stream":%s,"messages":[{"role":"user","content":"Is the printer on floor three working?"}]}' \
      "$(model_of $path $kind)" $stream > "$WORK/$path-$kind-chat.json"
    python3 benches/agent_turn.py --model "$(model_of $path $kind)" $([ $stream = true ] && echo --stream) \
      > "$WORK/$path-$kind-agent.json"
    for size in chat agent; do
      cat > "$WORK/$path-$kind-$size.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local file = assert(io.open("$WORK/$path-$kind-$size.json", "rb"))
wrk.body = file:read("*a")
file:close()
EOF
    done
  done
done
# Check that each path answers what it should before timing it.
for path in $PATHS; do
  curl -sf "http://127.0.0.1:$(port_of $path sse)/v1/chat/completions" -d "{\"model\":\"$(model_of $path sse)\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" -H 'content-type: application/json' | grep -q '^data: \[DONE\]'
  curl -sf "http://127.0.0.1:$(port_of $path json)/v1/chat/completions" -d "{\"model\":\"$(model_of $path json)\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" -H 'content-type: application/json' | grep -q '"finish_reason":"stop"'
  curl -sf "http://127.0.0.1:$(port_of $path json)/v1/chat/completions" --data-binary @"$WORK/$path-json-agent.json" -H 'content-type: application/json' | grep -q '"finish_reason":"stop"'
done
# One wrk run → "requests rps p50_ms p99_ms non2xx cpu_us_per_request"
measure() {  # path kind conns size
  local pids before after
  pids=$(pids_of "$1"); before=$(ticks $pids)
  $ON_LOAD wrk -t1 -c"$3" -d"${SECS}s" --latency -s "$WORK/$1-$2-$4.lua" "http://127.0.0.1:$(port_of "$1" "$2")/v1/chat/completions" > "$WORK/wrk.out" 2>&1
  after=$(ticks $pids)
  awk -v cpu=$((after - before)) -v hz="$HZ" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    $1 == "50%" { p50 = ms($2) } $1 == "99%" { p99 = ms($2) } / requests in / { n = $1 }
    $1 == "Requests/sec:" { rps = $2 } /Non-2xx/ { bad = $NF }
    END { printf "%d %.0f %.3f %.3f %d %.1f\n", n, rps, p50, p99, bad + 0, cpu * 1e6 / hz / (n > 0 ? n : 1) }' "$WORK/wrk.out"
}

if part cpu; then
  {
  echo "CPU per request, router pinned to one core (wrk -t1, ${RUNS} interleaved runs of ${SECS} s, median (range)):"
  echo
  echo "| request | answer | connections | router | requests/s | CPU µs per request | vs nginx | p50 ms | p99 ms |"
  echo "|---|---|---|---|---|---|---|---|---|"
  } >> "$OUT"
  for size in $SIZES; do
    request="60 B chat"; [ "$size" = agent ] && request="$(wc -c < "$WORK/pass-json-agent.json") B agent turn"
    for kind in json sse; do
      for conns in 16 256; do
        : > "$WORK/runs"
        for _ in $(seq "$RUNS"); do
          for path in $PATHS; do echo "$path $(measure $path $kind $conns $size)" >> "$WORK/runs"; done
        done
        pass_cpu=$(awk '$1 == "pass" { print $7 }' "$WORK/runs" | median | cut -d' ' -f1)
        for path in $PATHS; do
          col() { awk -v p=$path -v c="$1" '$1 == p { print $c }' "$WORK/runs" | median; }
          cpu=$(col 7); bad=$(awk -v p=$path '$1 == p { s += $6 } END { print s + 0 }' "$WORK/runs")
          ratio=$(awk -v a="${cpu%% *}" -v b="$pass_cpu" 'BEGIN { printf "%.2f×", a / b }')
          name=$(label $path); [ "$bad" != 0 ] && name="$name ($bad non-2xx)"
          echo "| $request | $kind | $conns | $name | $(col 3) | $cpu | $ratio | $(col 4) | $(col 5) |" >> "$OUT"
        done
      done
    done
  done
  echo >> "$OUT"
fi

# 4. Where a router's time goes: perf samples of Spillway's process (user and kernel, every
#    thread) over one wrk run of each size's body at 16 connections, for each answer; the top
#    symbols by self time.
if [ "$ONLY" = profile ]; then
  command -v perf >/dev/null || { echo "the profile needs perf (Debian: linux-perf)"; exit 1; }
  report() { perf report -q -i "$1" --stdio "${@:2}" 2>/dev/null | sed 's/ *$//' | grep -v '^$'; }
  for size in $SIZES; do
    request="60 B chat"; [ "$size" = agent ] && request="100 KB agent turn"
    for kind in json sse; do
      data="$WORK/perf-$size-$kind.data"
      perf record -q -F 999 --call-graph dwarf,32768 -o "$data" -p "$SPILLWAY" -- sleep "$SECS" 2>/dev/null &
      PERF=$!
      measure spillway $kind 16 "$size" > /dev/null
      wait $PERF || true
      {
        echo "Spillway ($HEAD_NAME), $request, $kind answer, 16 connections (perf record -F 999 --call-graph dwarf -p over one wrk run): the top symbols by self time, then the functions whose calls take the most time, inclusive:"
        echo
        echo '```'
        report "$data" --no-children --sort dso,symbol --percent-limit 1.5 -g none | head -25 || true
        echo '...'
        report "$data" --children --sort symbol --percent-limit 3 -g none | grep -v '\[k\]' | head -60 || true
        echo '```'
        echo
      } >> "$OUT"
    done
  done
fi

if part latency; then
  targets() {  # answer: direct first, then each router
    local upstream=$L_FAST; [ "$1" = paced ] && upstream=$L_PACED
    echo "--target direct=http://127.0.0.1:$upstream/v1/chat/completions,bench"
    for path in $PATHS; do
      echo "--target $path=http://127.0.0.1:$(port_of $path "$1")/v1/chat/completions,$(model_of $path "$1")"
    done
  }
  {
  echo "Latency added at one connection (benches/edge_latency.rs, client and upstream on core $LOAD_CPU, ${RUNS} interleaved rounds pooled; added = the path's percentile minus the direct one's; pass = nginx pass-through, peer = SGLang Model Gateway, spillway = $HEAD_NAME, baseline = $BASE_NAME):"
  echo
  python3 benches/agent_turn.py --model bench > "$WORK/latency-agent.json"
  for size in $SIZES; do
    for mode in json first; do
      # shellcheck disable=SC2046
      $ON_LOAD "$LATENCY_BIN" measure --mode $mode --rounds "$RUNS" $(targets fast) \
        $([ "$size" = agent ] && echo "--body $WORK/latency-agent.json")
      echo
    done
  done
  # shellcheck disable=SC2046
  $ON_LOAD "$LATENCY_BIN" measure --mode frames --rounds "$RUNS" --concurrency 512 --frames 50 $(targets paced)
  echo
  } >> "$OUT"
fi
cat "$OUT"

if part streams; then
  SLOW=$(free_port); S2=$(free_port)
  "$BIN" sim --kind openai --listen "127.0.0.1:$SLOW" --model bench --ttft-ms 1 --tokens-per-sec 0.05 --output-tokens 4 2>/dev/null & PIDS+=($!)
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
  STREAM_BIN=$(bench_bin edge_streams)
  small=$(echo "$STREAMS" | tr ',' '\n' | awk '$1 <= 1000' | paste -sd,)
  {
    echo "Router RSS with slow streams open (upstream: spillway sim, first token at once, then one token every 20 s):"
    [ -n "$small" ] && "$STREAM_BIN" "http://127.0.0.1:$S2" "$ROUTER" slow "$small" h1
    "$STREAM_BIN" "http://127.0.0.1:$S2" "$ROUTER" slow "$STREAMS" h2 | tail -n +3
    echo
  } > "$WORK/streams.md"
  cat "$WORK/streams.md"
  cat "$WORK/streams.md" >> "$OUT"
fi

# The tables go between the markers in benches/README.md.
if [ "${EDGE_WRITE:-1}" = 1 ] && [ -z "$ONLY" ]; then
  python3 - "$OUT" <<'EOF'
import sys, re
tables = open(sys.argv[1]).read().strip()
path = "benches/README.md"
text = open(path).read()
begin, end = "<!-- edge.sh: begin -->", "<!-- edge.sh: end -->"
if begin not in text:
    sys.exit("benches/README.md has no edge.sh markers")
head, rest = text.split(begin, 1)
open(path, "w").write(head + begin + "\n" + tables + "\n" + end + rest.split(end, 1)[1])
EOF
  echo "(written to benches/README.md)"
fi
