#!/usr/bin/env bash
# Codex's two setups against the same router, side by side: a custom provider
# (`model_providers.spillway`, `wire_api = "responses"`: HTTP and SSE) and the one-line
# `openai_base_url` (Codex's built-in OpenAI provider, which opens the Responses WebSocket
# first). For each, ROUNDS interleaved rounds of three `codex exec` runs: a text turn, the same
# session resumed, and a tool round trip (the node calls Codex's `exec` tool, Codex runs it and
# sends its output back). Prints the wall seconds of each run (median, min and max) and how
# many `Reconnecting` lines Codex wrote.
#
#   benches/codex_setup.sh                 # target/release/spillway, 5 rounds
#   SPILLWAY_BIN=target/debug/spillway ROUNDS=3 benches/codex_setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${SPILLWAY_BIN:-target/release/spillway}
CODEX=$PWD/tests/agents/node_modules/.bin/codex
ROUNDS=${ROUNDS:-5}
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release (or set SPILLWAY_BIN)" >&2; exit 1; }
[ -x "$CODEX" ] || { echo "no $CODEX: npm ci in tests/agents" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# A free port, from the kernel.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A node (`spillway sim`, vLLM's wire, 1 ms a token) and a router in front of it whose task
# `coder` answers to Codex's default model id, in this shell (so the trap stops them); $1: the
# variable that gets the router's URL, the rest: extra sim flags.
start() {
  local out=$1 node router
  shift
  node=$(port)
  router=$(port)
  "$BIN" sim --listen "127.0.0.1:$node" --kind vllm --model m --token-delay-ms 1 "$@" >"$work/sim-$node.log" 2>&1 &
  pids+=($!)
  cat >"$work/router-$router.yaml" <<EOF
listen: 127.0.0.1:$router
backends: [{name: model, kind: vllm, endpoints: ["http://127.0.0.1:$node"], model: m, capabilities: {tools: true}}]
tasks: [{name: coder, aliases: [gpt-6.2-sol], backends: [model], slo: {ttft_ms: 5000}}]
EOF
  "$BIN" serve --config "$work/router-$router.yaml" >"$work/router-$router.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$router/readyz" >/dev/null && break
    sleep 0.1
  done
  printf -v "$out" 'http://127.0.0.1:%s' "$router"
}
start text_router
start tool_router --tool-call-args '{"input": "text(6*7)"}'

# `codex exec` in home $2 with setup $1 (custom or base_url) against router $3; the rest are
# its arguments. Appends "setup kind seconds reconnects" to the results.
run() {
  local setup=$1 home=$2 router=$3 kind=$4
  shift 4
  local settings=(-c analytics.enabled=false -c features.plugins=false)
  if [ "$setup" = custom ]; then
    settings+=(-c model_provider=spillway -c "model_providers.spillway={name=\"spillway\", base_url=\"$router/v1\", env_key=\"SPILLWAY_KEY\", wire_api=\"responses\"}")
  else
    settings+=(-c "openai_base_url=\"$router/v1\"")
  fi
  mkdir -p "$home"
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$home" && env -i PATH="$PATH" HOME="$home" OPENAI_API_KEY=any SPILLWAY_KEY=any \
    HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost \
    "$CODEX" exec "$@" --skip-git-repo-check "${settings[@]}" "$prompt" \
    >"$home/out.txt" 2>"$home/err.txt" </dev/null) || { echo "codex failed ($setup $kind):" >&2; cat "$home/err.txt" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$setup $kind $(awk "BEGIN {print $t1 - $t0}") $(grep -c Reconnecting "$home/err.txt" || true)" >>"$work/results"
}

for round in $(seq "$ROUNDS"); do
  for setup in custom base_url; do
    home="$work/home-$setup-$round"
    prompt="Say hello" run "$setup" "$home" "$text_router" text
    prompt="Once more" run "$setup" "$home" "$text_router" resumed resume --last
    prompt="Compute 6*7" run "$setup" "$work/tool-$setup-$round" "$tool_router" tool
  done
done

python3 - "$work/results" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print(f"{'run':<9} {'custom provider (s)':>22} {'openai_base_url (s)':>22} {'ratio':>6}  reconnects")
for kind in ["text", "resumed", "tool"]:
    cells, medians, reconnects = [], [], []
    for setup in ["custom", "base_url"]:
        xs = [float(r[2]) for r in rows if r[0] == setup and r[1] == kind]
        medians.append(statistics.median(xs))
        cells.append(f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]")
        reconnects.append(sum(int(r[3]) for r in rows if r[0] == setup and r[1] == kind))
    print(f"{kind:<9} {cells[0]:>22} {cells[1]:>22} {medians[1] / medians[0]:>6.2f}  {reconnects[0]} / {reconnects[1]}")
EOF
