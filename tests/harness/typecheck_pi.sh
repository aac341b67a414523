#!/usr/bin/env bash
# bindings/pi type-checks (tsc --strict, the TypeScript the SDK pins) against the pinned pi's
# declarations and the generated SDK's, as pi would load it from an installed tree.
# usage: typecheck_pi.sh BINDINGS HARNESS_NODE_MODULES SDK_WORK
set -euo pipefail
bindings=$1 modules=$2 sdk=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$bindings"/pi/*.ts "$dir/"
mkdir "$dir/node_modules"
ln -s "$modules/@mariozechner" "$modules/typebox" "$dir/node_modules/"
ln -s "$sdk" "$dir/node_modules/asp-sdk"
echo '{"type": "module"}' >"$dir/package.json"
cat >"$dir/tsconfig.json" <<JSON
{"compilerOptions": {"target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
  "strict": true, "noEmit": true, "skipLibCheck": true, "types": ["node"],
  "typeRoots": ["$sdk/node_modules/@types"]}, "files": ["index.ts"]}
JSON
node "$sdk/node_modules/typescript/bin/tsc" -p "$dir"
echo "ok: bindings/pi type-checks"
