#!/usr/bin/env bash
# The main job on defaults: set up .venv/, fine-tune the bundled all-MiniLM-L6-v2 on STS-B + MRPC
# positive pairs (MNRL, one epoch), evaluate STS-B test before and after, print both.
# Each run writes a new folder under output/ (an existing run is never overwritten).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CONTRASTIVE_BERT_DATA=${CONTRASTIVE_BERT_DATA:-$(cd .. && pwd)/shared/data}
.venv/bin/contrastive-bert train --recipe scripts/recipes/quickstart.yaml \
  --output-dir "output/quickstart-$(date +%Y%m%d-%H%M%S)" "$@"
echo "quickstart: ${SECONDS} s wall time (set-up included)" >&2
