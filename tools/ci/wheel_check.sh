#!/usr/bin/env bash
# The wheel's CI check (.ci/run calls it; CPU machine, no GPU):
#   1. tools/build_wheel.py builds the wheel: the stable-ABI decode library compiled for sm_90a (FA3
#      needs sgl-attn's sources and is built on the H200 only: tools/gpu_routine.sh wheel).
#   2. In a fresh virtual environment per torch (2.15.0 CUDA build from PyPI; 2.14.1 CUDA build and
#      2.13.0 CPU build, both on local disk), `pip install <wheel>` next to that torch, then
#      tools/ci/check_wheel.py: the library is found in the installed package, uses only the stable ABI,
#      loads, and registers every op of its sources with that schema; then the op-level CPU tests
#      (tests/ops/test_decode_{workspace,plan}.py, test_op_library.py) against the installed package.
#   3. vLLM 0.33.0 from PyPI in the torch 2.14 environment, and
#      tests/vllm_adapter/test_vllm_signatures.py against it. vLLM 0.33.0 pins torch==2.14.0, so it is
#      installed without dependencies and then its declared dependencies, less the torch family and the
#      GPU kernel packages (none of which the modules under test import), under a constraint that keeps
#      torch 2.14.1.
# Prints the seconds of each phase. Usage: tools/ci/wheel_check.sh [WHEEL]
# WHEEL: check that wheel instead of building one (e.g. the H200's, built with FA3 against torch 2.11).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# pip, quiet but for errors; its resolver's complaint that vLLM's own pins are unmet is expected (step 3).
pip_install() {
  "$@" --quiet --disable-pip-version-check 2>&1 |
    { grep -vE "^WARNING: Location|^vllm 0.33.0 requires|^ERROR: pip's dependency resolver" || true; }
  return "${PIPESTATUS[0]}"
}
phase() { echo "wheel_check: $1: $((SECONDS - start)) s"; start=$SECONDS; }
start=$SECONDS

if [ $# -gt 0 ]; then
  wheel=$(realpath "$1")
else
  wheel=$(python3 "$root/tools/build_wheel.py" --out "$work/dist" | tail -1)
  phase "wheel built ($wheel)"
fi

rc=0
op_tests=("$root"/tests/ops/test_decode_workspace.py "$root"/tests/ops/test_decode_plan.py "$root"/tests/ops/test_op_library.py)
for torch_spec in torch==2.15.0 torch==2.14.1 torch==2.13.0; do
  venv=$work/venv-$torch_spec
  python3 -m venv "$venv"
  # torch 2.13 as the CPU suite has it (triton too, by tools/ci/requirements.txt's pins); the others bring their own.
  constraints=()
  [ "$torch_spec" = torch==2.13.0 ] && constraints=(-c "$root/tools/ci/requirements.txt")
  if [ "$torch_spec" = torch==2.15.0 ]; then
    # Past the cap a machine's pip configuration may set (/etc/xdg/pip: the releases on its disk): unread here.
    PIP_CONFIG_FILE=/dev/null pip_install "$venv/bin/pip" install "$torch_spec" "$wheel" pytest
  else
    pip_install "$venv/bin/pip" install "${constraints[@]}" "$torch_spec" "$wheel" pytest
  fi
  "$venv/bin/python" -c "import torch; assert torch.__version__.startswith('${torch_spec#torch==}'), torch.__version__"
  phase "$torch_spec and the wheel installed"
  (cd "$work" && "$venv/bin/python" "$root/tools/ci/check_wheel.py" "$root") || rc=1
  (cd "$work" && PYTHONPATH=$root/tests "$venv/bin/python" -m pytest -q -p no:cacheprovider "${op_tests[@]}") || rc=1
  phase "$torch_spec checked"
done

venv=$work/venv-torch==2.14.1
pip_install "$venv/bin/pip" install --no-deps vllm==0.33.0
"$venv/bin/python" - > "$work/vllm_requirements.txt" <<'PY'
import re
from importlib.metadata import requires

# Not imported by vllm.v1.attention.{backend,selector,backends.registry} nor vllm.platforms.interface:
# the torch family (vLLM pins torch==2.14.0) and packages of GPU kernels, model formats and decoding.
LEFT_OUT = {
    "torch", "torchaudio", "torchvision", "torchcodec", "flashinfer-python", "humming-kernels", "instanttensor",
    "nvidia-cudnn-frontend", "nvidia-cutlass-dsl", "quack-kernels", "tilelang", "tokenspeed-mla", "pynvvideocodec",
    "apache-tvm-ffi", "xgrammar", "fastsafetensors", "llguidance", "outlines-core", "outlines_core", "numba",
    "opencv-python-headless", "mistral-common", "mistral_common", "lm-format-enforcer", "compressed-tensors",
    "depyf", "ninja",
}
for requirement in requires("vllm"):
    if "extra ==" not in requirement and re.split(r"[ ;<>=!~\[(]", requirement)[0].lower() not in LEFT_OUT:
        print(requirement)
PY
echo "torch==2.14.1" > "$work/keep_torch.txt"
pip_install "$venv/bin/pip" install -c "$work/keep_torch.txt" -r "$work/vllm_requirements.txt" pytest
phase "vllm==0.33.0 installed"
(cd "$work" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/vllm_adapter/test_vllm_signatures.py") || rc=1
"$venv/bin/python" -c "import torch, vllm; print('wheel_check: vLLM', vllm.__version__, 'on torch', torch.__version__)"
phase "tests/vllm_adapter/test_vllm_signatures.py against vLLM 0.33.0"
exit $rc
