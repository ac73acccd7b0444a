#!/usr/bin/env bash
# Write the offline GPU bundle: one folder (<= 50 MiB) with the base model in fp16, the data the
# named benchmark blocks read, the package source, wheels a GPU machine may lack, the run logs so
# far and run.sh (see the bundle's README.md).
#
#   bash scripts/offline_bundle.sh DIR [--benchmarks pairs_quality,acl_quality] [--model PATH]
#        [--data-dir DIR] [--compression xz|gz] [--no-wheels]
#
# Then, on the GPU machine: bash DIR/run.sh --minutes 9; back here:
#   .venv/bin/python -m contrastive_bert.benchmarking merge DIR/out eval/results/
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
exec "$PYTHON" "$REPO/scripts/offline/build_bundle.py" "$@"
