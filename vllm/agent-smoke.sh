#!/usr/bin/env bash
# Smoke test for `spillway agent` on a machine with an NVIDIA GPU and driver.
#
#   vllm/agent-smoke.sh path/to/spillway
#
# Builds nothing. Starts `spillway agent --listen 127.0.0.1:9401` (override with
# AGENT_SMOKE_LISTEN), fetches /metrics, prints the NVML and GPU lines, and exits 0 only if
# `spillway_nvml_up 1` and at least one `spillway_gpu_memory_total_bytes` sample is > 0.
# Without a driver it prints the agent's reason (spillway_nvml_info) and exits 1.
set -euo pipefail

bin="${1:-}"
listen="${AGENT_SMOKE_LISTEN:-127.0.0.1:9401}"
if [[ -z "$bin" || ! -x "$bin" ]]; then
  echo "usage: $0 path/to/spillway   (an executable spillway binary)" >&2
  exit 2
fi

log="$(mktemp -t spillway-agent-smoke.XXXXXX)"
"$bin" agent --listen "$listen" --interval-ms 500 >"$log" 2>&1 &
agent=$!
cleanup() {
  kill "$agent" 2>/dev/null || true
  wait "$agent" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT

fetch() { # GET $1 from the agent; curl if present, else bash's /dev/tcp (HTTP/1.0).
  if command -v curl >/dev/null 2>&1; then
    curl -fsS --max-time 5 "http://$listen$1"
  else
    local host="${listen%:*}" port="${listen##*:}"
    exec 3<>"/dev/tcp/$host/$port" || return 1
    printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" "$listen" >&3
    sed '1,/^\r\{0,1\}$/d' <&3
    exec 3<&-
  fi
}

# The agent publishes its first reading before it serves, so the first answer is complete.
metrics=""
for _ in $(seq 1 60); do
  if ! kill -0 "$agent" 2>/dev/null; then
    echo "FAIL: the agent exited early; its output:" >&2
    cat "$log" >&2
    exit 1
  fi
  if metrics="$(fetch /metrics 2>/dev/null)" && [[ -n "$metrics" ]]; then
    break
  fi
  sleep 0.5
done
if [[ -z "$metrics" ]]; then
  echo "FAIL: no answer from http://$listen/metrics within 30 s; agent output:" >&2
  cat "$log" >&2
  exit 1
fi

echo "agent: $(head -n 1 "$log")"
echo "--- /metrics (NVML and GPU samples)"
grep -E '^spillway_(nvml_|gpu_|agent_)' <<<"$metrics" || true
echo "---"

if ! grep -qx 'spillway_nvml_up 1' <<<"$metrics"; then
  reason="$(grep -E '^spillway_nvml_info' <<<"$metrics" | sed -E 's/^[^"]*"(.*)"\} 1$/\1/')"
  echo "FAIL: spillway_nvml_up is not 1 (reason: ${reason:-none given})" >&2
  exit 1
fi
gpus="$(awk '/^spillway_gpu_memory_total_bytes\{/ && $NF > 0 { n++ } END { print n + 0 }' <<<"$metrics")"
if [[ "$gpus" -lt 1 ]]; then
  echo "FAIL: no spillway_gpu_memory_total_bytes sample > 0" >&2
  exit 1
fi
echo "OK: nvml up, $gpus GPU(s) with memory_total_bytes > 0"
