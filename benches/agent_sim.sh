#!/usr/bin/env bash
# The agent-session scenario on the real two-node llama.cpp fleet and in the simulator, side by
# side (issue 47, part 4): the share served by the fleet, the share of prompt tokens found
# cached, and TTFT p50 and p95. The real side is benches/agent_sessions.py with the scenario's
# workload (8 sessions × 4 turns, 4 at a time, the same instructions and tool list for every
# session, a second of think time) through Spillway on fresh engines (benches/agent_peer.sh's
# setup); the simulated side is `spillway simulate tests/fixtures/scenarios/agent-sessions.yaml`,
# strategy spillway. It also prints what the engines' own logs say of their prefill and decode
# speeds in the run, against which the scenario's node model is calibrated.
#
# Env: AGENT_ROUNDS (3), SPILLWAY_BIN (default: a release build of this tree), AGENT_OUT
# (target/agent-sim), SIM_BIN (the binary that simulates; SPILLWAY_BIN), AGENT_SIM_ONLY=1 (the
# simulator again beside the real rounds already in AGENT_OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
export AGENT_OUT="${AGENT_OUT:-target/agent-sim}"
export AGENT_FLAGS="--shared-preamble --think-ms 1000"
export AGENT_SESSIONS=8 AGENT_TURNS=4 AGENT_CONCURRENCY=4
scenario=tests/fixtures/scenarios/agent-sessions.yaml
# shellcheck source=benches/agent_peer.sh
source benches/agent_peer.sh

if [ -z "${AGENT_SIM_ONLY:-}" ]; then
rm -f "$out"/*.json "$out"/llama-*.log "$out/engines-all.log"
# The node model's calibration: one cold prompt alone on a fresh engine, its own timings.
engines_up
python3 - >"$out/calibration.txt" <<'PY'
import json, sys, urllib.request
sys.path.insert(0, "benches")
import agent_sessions as a
def ask(messages):
    body = {"model": "m", "max_tokens": 24, "temperature": 0, "messages": messages}
    req = urllib.request.Request("http://127.0.0.1:18101/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    answer = json.load(urllib.request.urlopen(req, timeout=120))
    return answer["choices"][0]["message"]["content"], answer["timings"]
# A session's first turn (cold), then its second (only the new tokens to prefill), alone.
messages = [{"role": "system", "content": a.shared_preamble()},
            {"role": "user", "content": a.own_context(99) + " Turn 0: name one step to fix bug 99.0."}]
said, cold = ask(messages)
messages += [{"role": "assistant", "content": said}, {"role": "user", "content": "Turn 1: name one step to fix bug 99.1."}]
_, warm = ask(messages)
(n1, t1), (n2, t2) = (warm["prompt_n"], warm["prompt_ms"]), (cold["prompt_n"], cold["prompt_ms"])
per_token = (t2 - t1) / (n2 - n1)
print(f"alone: {n2} cold tokens prefilled in {t2:.0f} ms, {n1} new ones in {t1:.0f} ms: "
      f"prefill_tps {1000 / per_token:.0f}, prefill_setup_ms {t1 - n1 * per_token:.0f}; "
      f"decode {cold['predicted_per_token_ms']:.1f} ms a token")
PY
stop_all
for round in $(seq 1 "$rounds"); do
  spillway_run "spillway-$round" 60000
  cat "$out"/llama-*.log >>"$out/engines-all.log"
done
fi
"${SIM_BIN:-$SPILLWAY_BIN}" simulate "$scenario" --format json --quiet >"$out/sim.json"

python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
def fig(values, fmt):
    med = statistics.median(values)
    return fmt.format(med) if len(values) == 1 else f"{fmt.format(med)} ({fmt.format(min(values))}–{fmt.format(max(values))})"
runs = [json.load(open(f))["summary"] for f in sorted(glob.glob(os.path.join(out, "spillway-[0-9]*.json")))]
sim = next(r for r in json.load(open(os.path.join(out, "sim.json")))[0]["results"] if r["strategy"] == "spillway")
real = {
    "local": [100 * r["served_locally"] / max(r["answered"], 1) for r in runs],
    "cached": [100 * (r["cached_share"] or 0) for r in runs],
    "p50": [r["ttft_p50_ms"] for r in runs],
    "p95": [r["ttft_p95_ms"] for r in runs],
}
simulated = {"local": 100 * sim["local_share"], "cached": 100 * sim["cache_hit_rate"],
             "p50": sim["ttft_p50_ms"], "p95": sim["ttft_p95_ms"]}
print(f"| figure | real fleet ({len(runs)} rounds) | simulator | difference |")
print("|---|---|---|---|")
for key, name, unit in [("local", "served by the fleet, %", "pt"), ("cached", "prompt tokens cached, %", "pt"),
                        ("p50", "TTFT p50, ms", "%"), ("p95", "TTFT p95, ms", "%")]:
    r, s = statistics.median(real[key]), simulated[key]
    diff = f"{s - r:+.1f} points" if unit == "pt" else f"{100 * (s - r) / r:+.0f} %"
    print(f"| {name} | {fig(real[key], '{:.1f}' if unit == 'pt' else '{:.0f}')} | {s:.1f} | {diff} |")
# The engines' own speeds in the run (llama-server's per-request timings).
log = open(os.path.join(out, "engines-all.log")).read()
prompt = [(float(ms), int(n)) for ms, n in re.findall(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", log)]
decode = [(float(ms), int(n)) for ms, n in re.findall(r"\|\s+eval time =\s*([\d.]+) ms /\s*(\d+) tokens", log)]
cold = [n / ms * 1000 for ms, n in prompt if n >= 200]
steps = [ms / n for ms, n in decode if n > 1]
print("\n" + open(os.path.join(out, "calibration.txt")).read().strip())
if cold and steps:
    print(f"in the runs: prefill of prompts of 200+ new tokens {statistics.median(cold):.0f} tokens/s "
          f"(min {min(cold):.0f}, max {max(cold):.0f}, {len(cold)} prompts); decode {statistics.median(steps):.1f} ms a token "
          f"(min {min(steps):.1f}, max {max(steps):.1f})")
PY
