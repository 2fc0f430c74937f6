#!/usr/bin/env bash
# Agent sessions on fresh real engines, through Spillway and through SGLang Model Gateway (the
# Rust peer, PyPI `sglang-router`, `smg launch`) with its cache_aware and round_robin policies:
# the cached-token share of later turns, TTFT p50 and p95, the share served by the fleet, and
# what was paid to the hosted provider (issue 47, part 5). Each run gets two fresh llama-servers
# (2 slots each, SmolLM2-135M; cold caches) and the same workload (benches/agent_sessions.py).
# Spillway runs twice: with an SLO the fleet meets (60 s) and with one tighter than a cold
# prefill (AGENT_TIGHT_MS), where it must spill exactly the turns that cannot start in time.
#
# The three routers run in interleaved rounds (AGENT_ROUNDS); the table gives each figure's
# median over the rounds and its range.
#
# Env: AGENT_SESSIONS (8), AGENT_TURNS (4), AGENT_CONCURRENCY (4), AGENT_TIGHT_MS (400),
# AGENT_ROUNDS (3), SPILLWAY_BIN (default: a release build of this tree), AGENT_OUT
# (target/agent-peer).
# Needs python3, cmake and a C++ compiler (llama-server, built once), and PyPI access.
set -euo pipefail
cd "$(dirname "$0")/.."
sessions="${AGENT_SESSIONS:-8}" turns="${AGENT_TURNS:-4}" concurrency="${AGENT_CONCURRENCY:-4}"
tight="${AGENT_TIGHT_MS:-400}" rounds="${AGENT_ROUNDS:-3}"
out="${AGENT_OUT:-target/agent-peer}"
mkdir -p "$out"

if [ -z "${SPILLWAY_BIN:-}" ]; then
  cargo build --release --quiet --bin spillway
  SPILLWAY_BIN=target/release/spillway
fi
venv=target/bench-peer-venv
if [ ! -x "$venv/bin/smg" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'sglang-router==0.3.2'
fi
engines="$(tests/engines/get-llama-server.sh)"
server="$(ls "$engines"/llama-server-*/llama-server)"
model="$engines/SmolLM2-135M-Instruct.Q4_1.gguf"

pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap stop_all EXIT

# Waits until `url` answers 200.
wait_ok() { for _ in $(seq 1 600); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }

# Two fresh llama-servers on ports 18101 and 18102.
engines_up() {
  for port in 18101 18102; do
    "$server" --model "$model" --host 127.0.0.1 --port "$port" --metrics --threads 1 \
      --parallel 2 --ctx-size 4096 >"$out/llama-$port.log" 2>&1 &
    pids+=($!)
  done
  wait_ok http://127.0.0.1:18101/health && wait_ok http://127.0.0.1:18102/health
}

drive() { # label url [local-backend]; AGENT_FLAGS: more flags for agent_sessions.py
  local label="$1" url="$2" local_backend="${3:-}"
  # shellcheck disable=SC2086
  python3 benches/agent_sessions.py --url "$url" --sessions "$sessions" --turns "$turns" \
    --concurrency "$concurrency" --label "$label" ${local_backend:+--local "$local_backend"} \
    ${AGENT_FLAGS:-} >"$out/$label.json"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["label"], json.dumps(r["summary"]))' "$out/$label.json"
}

spillway_run() { # label ttft_ms
  engines_up
  "$SPILLWAY_BIN" sim --kind anthropic --listen 127.0.0.1:18110 --api-key bench-key >"$out/hosted.log" 2>&1 &
  pids+=($!)
  cat >"$out/spillway-$1.yaml" <<EOF
listen: 127.0.0.1:18100
telemetry: {interval_ms: 500, stale_after_ms: 3000}
backends:
  - {name: pool, kind: local, engine: llamacpp, model: smollm2, reserve: 0,
     endpoints: ['http://127.0.0.1:18101', 'http://127.0.0.1:18102']}
  - {name: hosted, kind: anthropic, base_url: 'http://127.0.0.1:18110', model: claude-sonnet-4-5,
     api_key_env: BENCH_ANTHROPIC_KEY, price: {input_per_mtok: "3", output_per_mtok: "15"}}
tasks:
  - {name: agent, backends: [pool, hosted], slo: {ttft_ms: $2}}
EOF
  BENCH_ANTHROPIC_KEY=bench-key RUST_LOG=spillway=info "$SPILLWAY_BIN" serve --config "$out/spillway-$1.yaml" \
    >"$out/spillway-$1.log" 2>&1 &
  pids+=($!)
  wait_ok http://127.0.0.1:18110/ 2>/dev/null || true
  wait_ok http://127.0.0.1:18100/readyz
  drive "$1" http://127.0.0.1:18100 pool
  stop_all
}

smg_run() { # policy label
  engines_up
  "$venv/bin/smg" launch --host 127.0.0.1 --port 18120 --policy "$1" \
    --worker-urls http://127.0.0.1:18101 http://127.0.0.1:18102 >"$out/$2.log" 2>&1 &
  pids+=($!)
  wait_ok http://127.0.0.1:18120/health
  drive "$2" http://127.0.0.1:18120
  stop_all
}

# benches/agent_sim.sh sources the functions above and runs its own rounds.
if [ "${BASH_SOURCE[0]}" != "$0" ]; then return 0; fi

rm -f "$out"/*.json
for round in $(seq 1 "$rounds"); do
  spillway_run "spillway-$round" 60000
  smg_run cache_aware "smg-cache_aware-$round"
  smg_run round_robin "smg-round_robin-$round"
done
spillway_run "spillway-tight-1" "$tight"

# The table, as benches/README.md shows it: medians over the rounds, (min–max) where several.
python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
rows = [("Spillway, SLO 60 s", "spillway"), ("SMG cache_aware", "smg-cache_aware"),
        ("SMG round_robin", "smg-round_robin"), ("Spillway, tight SLO", "spillway-tight")]
def fig(values, fmt):
    med = statistics.median(values)
    return fmt.format(med) if len(values) == 1 else f"{fmt.format(med)} ({fmt.format(min(values))}–{fmt.format(max(values))})"
print("| router | rounds | turns answered | served by the fleet | later turns' prompt cached, % | TTFT p50 ms | TTFT p95 ms | later turns' TTFT p50 ms | waited | paid to hosted, USD |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name, label in rows:
    runs = [json.load(open(f))["summary"] for f in sorted(glob.glob(os.path.join(sys.argv[1], label + "-[0-9]*.json")))]
    if not runs:
        continue
    get = lambda k: [r[k] or 0 for r in runs]
    usd = [(r["hosted_input_tokens"] * 3 + r["hosted_output_tokens"] * 15) / 1e6 for r in runs]
    answered = f"{sum(get('answered'))}/{sum(get('turns'))}"
    print(f"| {name} | {len(runs)} | {answered} | {fig(get('served_locally'), '{:.0f}')} | "
          f"{fig([100 * v for v in get('later_turns_cached_share')], '{:.1f}')} | {fig(get('ttft_p50_ms'), '{:.0f}')} | "
          f"{fig(get('ttft_p95_ms'), '{:.0f}')} | {fig(get('later_ttft_p50_ms'), '{:.0f}')} | "
          f"{fig(get('waited'), '{:.0f}')} | {fig(usd, '{:.4f}')} |")
PY
