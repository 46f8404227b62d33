#!/usr/bin/env bash
# Install the project into the active Python environment.
# A machine that already has torch and triton (a GPU machine) keeps them; a fresh CPU machine gets
# torch 2.13.0 (its CPU wheel lies on disk; an unpinned torch pulls a multi-GB CUDA build) and
# triton 3.9.0, whose interpreter (TRITON_INTERPRET=1) runs our kernels on CPU and whose known
# interpreter numeric bugs conformance/core/interpreter_fixes.py patches (pinned: the patch is version-specific).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
python -c "import triton" 2>/dev/null || python -m pip install -q "triton==3.9.0"
python -m pip install -q -e ".[dev]"
if [ "${CONFORMANCE_INTEROP:-1}" = 1 ]; then
  python -m pip install -q -e ".[interop]" || { echo "setup: interop extra (compressed-tensors) failed to install" >&2; exit 1; }
fi
python -c "import torch, triton; print(f'setup: torch {torch.__version__}, triton {triton.__version__}')"
