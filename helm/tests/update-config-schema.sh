#!/usr/bin/env bash
# Rewrites the `config` property of helm/spillway/values.schema.json with the schema derived
# from the config types (`spillway config-schema --chart`); the rest of the file is the chart's
# own and stays as it is. tests/offline/config_schema.rs fails while the two differ.
#
# Usage: helm/tests/update-config-schema.sh [SPILLWAY]
#   SPILLWAY: a built spillway binary; default: `cargo run --quiet --locked --`.
set -euo pipefail
cd "$(dirname "$0")/../.."

values=helm/spillway/values.schema.json
generated="$(mktemp)"
trap 'rm -f "$generated"' EXIT
if [ $# -gt 0 ]; then
  "$1" config-schema --chart >"$generated"
else
  cargo run --quiet --locked -- config-schema --chart >"$generated"
fi

python3 - "$values" "$generated" <<'PY'
import json, os, sys

values_path, generated_path = sys.argv[1], sys.argv[2]
with open(values_path) as f:
    values = json.load(f)
with open(generated_path) as f:
    config = json.load(f)
if values.get("properties", {}).get("config") == config:
    sys.exit(0)
values["properties"]["config"] = config
tmp = values_path + ".tmp"
with open(tmp, "w") as f:
    json.dump(values, f, indent=2, ensure_ascii=False)
    f.write("\n")
os.replace(tmp, values_path)
print(f"update-config-schema: rewrote the config property of {values_path}", file=sys.stderr)
PY
