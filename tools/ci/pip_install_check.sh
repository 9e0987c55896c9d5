#!/usr/bin/env bash
# The pip package as a user installs it (docs/using.md, "Calling the backend from Python"): `pip install ./py`
# into a fresh virtual environment made from the system python3, isolated from the interpreter the
# tests ran under, so every dependency must come from the package's own metadata. Constrained by
# tools/ci/requirements.txt only to pick the pinned torch and triton CI already has on disk or in pip's
# cache. The decode step then runs from outside the checkout and must import the installed copy.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python3=$(command -v python3) || { echo "pip_install_check.sh: no python3 on PATH" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
venv=$scratch/venv
cp -r "$root/py" "$scratch/src"  # setuptools builds in the source folder: keep the checkout clean
"$python3" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$root/tools/ci/requirements.txt" "$scratch/src"
cd "$scratch"
"$venv/bin/python" - "$venv" <<'PY'
import pathlib
import sys

import sparse_mla
import torch

venv = pathlib.Path(sys.argv[1]).resolve()
for module in (sparse_mla, torch):
    where = pathlib.Path(module.__file__).resolve()
    if venv not in where.parents:
        sys.exit(f"pip_install_check.sh: {module.__name__} imported from {where}, outside the fresh venv {venv}")
print(f"pip_install_check.sh: sparse_mla {sparse_mla.__file__} with torch {torch.__version__}, both from {venv}")
PY
"$venv/bin/python" "$root/examples/decode_step.py"
