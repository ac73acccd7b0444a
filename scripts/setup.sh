#!/usr/bin/env bash
# Create (or refresh) the project's local virtual environment .venv/ and install the package
# with its test extras. Quick when nothing changed: a stamp of pyproject.toml + constraints
# skips the install. On a CPU machine constraints-cpu.txt pins the torch 2.13.0 CPU build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.contrastive_bert-installed
want=$(cat pyproject.toml constraints-cpu.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]" -c constraints-cpu.txt
  echo "$want" > "$stamp"
fi
