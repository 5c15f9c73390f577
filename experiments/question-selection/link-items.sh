#!/usr/bin/env bash
# link-items.sh FROM STORE [GLOB]: the item files of the eval store FROM (a frontier's eval/) linked into STORE/items,
# so that STORE's records are made on the same items and pair with FROM's. GLOB picks the files (RULER's at 4K).
set -euo pipefail
FROM=$1 STORE=$2 GLOB=${3:-ruler-*N4096.json}
mkdir -p "$STORE/items"
for f in "$FROM"/items/$GLOB; do
  ln -sfn "$(realpath -s --relative-to="$STORE/items" "$f")" "$STORE/items/$(basename "$f")"
done
