#!/usr/bin/env bash
# Install the project into the active Python environment.
#   bash scripts/setup.sh                          # the locked environment (requirements/lock.txt): CI, the README
#   CONFORMANCE_DEPS=latest bash scripts/setup.sh  # today's newest releases of everything but torch and triton
# A machine that already has torch and triton (a GPU machine) keeps them; a fresh CPU machine gets torch 2.13.0
# (its CPU wheel lies on disk; an unpinned torch pulls a multi-GB CUDA build) and triton 3.9.0, whose interpreter
# (TRITON_INTERPRET=1) runs our kernels on CPU and whose known interpreter numeric bugs
# conformance/core/interpreter_fixes.py patches (pinned in both lanes: the patch is version-specific).
# The lock pins every other package, so the same commands give the same environment next month as today;
# scripts/deps_drift.py runs the tests under `latest` and records what moved (docs/ci.md).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=2.13.0 TRITON=3.9.0
deps=${CONFORMANCE_DEPS:-lock}
case "$deps" in
  lock | latest) ;;
  *) echo "setup: CONFORMANCE_DEPS=$deps is not a dependency lane (allowed: lock, latest)" >&2; exit 2 ;;
esac
py=$(python -c 'import platform; print(platform.python_version())')
locked_py=$(sed -n 's/.* with Python \([0-9.]*\),$/\1/p' requirements/lock.txt)
if [ "$deps" = lock ] && [ "${py%.*}" != "${locked_py%.*}" ]; then
  echo "setup: note: requirements/lock.txt was made with Python $locked_py, this is $py (pins may lack wheels here)" >&2
fi
quiet() { "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; return "${PIPESTATUS[0]}"; }
if [ "$deps" = lock ]; then
  # every pin at once and nothing else (--no-deps: the lock is complete; setuptools comes from it too, so the
  # editable build below uses the locked one instead of fetching today's into an isolated build env)
  quiet python -m pip install -q --no-deps -r requirements/lock.txt
  python -c "import torch" 2>/dev/null || quiet python -m pip install -q --no-deps "torch==$TORCH"
  python -c "import triton" 2>/dev/null || quiet python -m pip install -q --no-deps "triton==$TRITON"
  quiet python -m pip install -q --no-deps --no-build-isolation -e .
  # only the packages the lock installed matter; a GPU image's own site-packages may carry unrelated conflicts
  locked=$(sed -n 's/^\([a-zA-Z0-9_.-]*\)==.*/^\1 /p' requirements/lock.txt | paste -sd'|')
  if ! check=$(python -m pip check 2>&1) && grep -i -E "$locked" <<<"$check" >&2; then
    echo "setup: the locked environment is inconsistent (pip check above); refresh the lock: bash scripts/lock.sh" >&2
    exit 1
  fi
else
  quiet python -m pip install -q --upgrade pip
  python -c "import torch" 2>/dev/null || quiet python -m pip install -q "torch==$TORCH"
  python -c "import triton" 2>/dev/null || quiet python -m pip install -q "triton==$TRITON"
  # --upgrade-strategy eager: a venv that holds the lock moves to today's newest too; the constraint keeps the
  # torch and triton this machine has (an eager upgrade would otherwise replace them)
  keep=$(mktemp)
  python -c "import torch, triton; print(f'torch=={torch.__version__}\ntriton=={triton.__version__}')" > "$keep"
  quiet python -m pip install -q --upgrade --upgrade-strategy eager -c "$keep" -e ".[dev,interop]"
  rm -f "$keep"
fi
python -c "import torch, triton; print(f'setup: torch {torch.__version__}, triton {triton.__version__}, deps $deps')"
