#!/usr/bin/env bash
# Set up .venv/ (if needed) and run the default test suite (slow tests excluded:
# run them with `bash scripts/test.sh -m slow`). Data come from ../shared/data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CONTRASTIVE_BERT_DATA=${CONTRASTIVE_BERT_DATA:-$(cd .. && pwd)/shared/data}
if [ "$#" -eq 0 ]; then set -- -m "not slow"; fi
status=0
.venv/bin/python -m pytest -q "$@" || status=$?
echo "test suite: ${SECONDS} s wall time (set-up included)" >&2
exit "$status"
