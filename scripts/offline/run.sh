#!/usr/bin/env bash
# Run this bundle's benchmark blocks on a machine without registry or hub access (it needs python3
# with torch, transformers and sentence-transformers; the wheels here supply what it may lack).
#
#   bash run.sh [--minutes 9] [--blocks a,b] [--out DIR] [--device cuda] [--threads 8] [--dry-run]
#
# Every run log, results JSON, <block>.log, manifest.json and timing.json ends in --out (default:
# $OUT if set, else ./out beside this file). Copy that folder back and merge it with
#   python -m contrastive_bert.benchmarking merge OUT_DIR eval/results/
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
MINUTES=9
BLOCKS="$(cat "$HERE/blocks.txt")"
OUT_DIR="${OUT:-$HERE/out}"
DEVICE=cuda
THREADS=8
DRY=()
PYTHON="${PYTHON:-python3}"
while [ "$#" -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES="$2"; shift 2 ;;
    --blocks) BLOCKS="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --dry-run) DRY=(--dry-run); shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/cbert_bundle.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/site" "$WORK/src" "$WORK/data" "$OUT_DIR"
# Wheels: only those whose module this python cannot import yet (never replace what is installed).
MISSING=()
for wheel in "$HERE"/wheels/*.whl; do
  [ -e "$wheel" ] || continue
  module="$(basename "$wheel" | cut -d- -f1 | tr 'A-Z' 'a-z')"
  "$PYTHON" -c "import $module" 2>/dev/null || MISSING+=("$wheel")
done
if [ "${#MISSING[@]}" -gt 0 ]; then
  echo "[run.sh] installing ${#MISSING[@]} wheel(s) into $WORK/site: ${MISSING[*]##*/}"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --find-links "$HERE/wheels" \
    --target "$WORK/site" "${MISSING[@]}"
fi
tar -xzf "$HERE/src.tar.gz" -C "$WORK/src"
tar -xzf "$HERE/model.tar.gz" -C "$WORK"
for archive in "$HERE"/data.tar.*; do
  [ -e "$archive" ] && tar -xf "$archive" -C "$WORK/data"
done
export PYTHONPATH="$WORK/src:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export CONTRASTIVE_BERT_DATA="$WORK/data" CONTRASTIVE_BERT_DEFAULT_MODEL="$WORK/model"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg HF_DATASETS_CACHE="$WORK/hf_cache"
# Preflight: what the blocks import, with the versions (datasets 5.2 needs pyarrow >= 24, fsspec <= 2026.9).
"$PYTHON" - <<'PY'
import importlib.metadata as m, sys
import torch, datasets, contrastive_bert.benchmarking, contrastive_bert.training  # noqa: F401  (fails here, not in a block)
versions = {name: m.version(name) for name in ("sentence-transformers", "transformers", "datasets", "pyarrow", "fsspec",
                                               "huggingface-hub")}
print("[run.sh] python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      " ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
PY
"$PYTHON" "$WORK/src/scripts/offline/run_blocks.py" --src "$WORK/src" --out "$OUT_DIR" --results "$HERE/results" \
  --blocks "$BLOCKS" --minutes "$MINUTES" --device "$DEVICE" --threads "$THREADS" "${DRY[@]}"
