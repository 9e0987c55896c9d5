#!/usr/bin/env bash
# Prints the Python interpreter sparse_mla runs under, after making sure it has the packages of
# tools/ci/requirements.txt (torch, triton, numpy, pytest, absl-py, matplotlib):
#   1. $PYTHON_BIN_PATH when set: used as it is; missing packages are an error naming them.
#   2. python3 on PATH when it has them all (a GPU machine's CUDA build of PyTorch stays in use).
#   3. Otherwise a virtual environment, $SPARSE_MLA_CACHE/python (default
#      ${XDG_CACHE_HOME:-$HOME/.cache}/sparse_mla/python), made from python3 with its site packages
#      visible, into which pip installs the missing ones (from requirements.txt's pins).
# Progress goes to stderr; stdout is the interpreter's absolute path (sys.executable).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requirements=$root/tools/ci/requirements.txt
venv=${SPARSE_MLA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparse_mla}/python

# The requirement lines whose module the given interpreter cannot import.
missing_requirements() {
  "$1" - "$requirements" <<'PY'
import importlib.util
import re
import sys

MODULE_OF = {"absl-py": "absl"}  # pip names that differ from the module's
for line in open(sys.argv[1]):
    requirement = line.split("#")[0].strip()
    if requirement:
        name = re.split(r"[=<>!~\[ ;]", requirement)[0]
        if importlib.util.find_spec(MODULE_OF.get(name, name)) is None:
            print(requirement)
PY
}

executable() {
  "$1" -c 'import sys; print(sys.executable)'
}

if [ -n "${PYTHON_BIN_PATH:-}" ]; then
  missing=$(missing_requirements "$PYTHON_BIN_PATH")
  if [ -n "$missing" ]; then
    echo "tools/python_env.sh: PYTHON_BIN_PATH=$PYTHON_BIN_PATH lacks: $(echo $missing)." \
      "Install them ($PYTHON_BIN_PATH -m pip install $(echo $missing): only those, so its torch stays) or unset PYTHON_BIN_PATH." >&2
    exit 1
  fi
  echo "$PYTHON_BIN_PATH"
  exit 0
fi

python3=$(command -v python3) || { echo "tools/python_env.sh: no python3 on PATH (Python >= 3.10 needed)" >&2; exit 1; }
if [ -z "$(missing_requirements "$python3")" ]; then
  executable "$python3"
  exit 0
fi
if [ ! -x "$venv/bin/python3" ]; then
  echo "tools/python_env.sh: $python3 lacks some of tools/ci/requirements.txt; creating $venv" >&2
  "$python3" -m venv --system-site-packages "$venv" >&2 || {
    echo "tools/python_env.sh: $python3 -m venv failed (Debian: apt-get install python3-venv), or set PYTHON_BIN_PATH" >&2
    exit 1
  }
fi
missing=$(missing_requirements "$venv/bin/python3")
if [ -n "$missing" ]; then
  echo "tools/python_env.sh: installing into $venv: $(echo $missing) (torch: up to several GB, minutes the first time)" >&2
  # shellcheck disable=SC2086  # one argument per requirement line
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check $missing >&2
fi
executable "$venv/bin/python3"
