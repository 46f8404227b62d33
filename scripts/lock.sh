#!/usr/bin/env bash
# Make requirements/lock.txt: every direct and transitive dependency of the project with its dev and interop
# extras, pinned, for a CPU machine (torch 2.13.0, triton 3.9.0). torch and triton themselves are left out of the
# lock (setup.sh installs them only where they are missing, so a GPU machine keeps its own); their dependencies
# are in it. One command, pip-tools' pip-compile in a scratch venv of its own, with pip's own configuration (so
# `torch==2.13.0` resolves to the CPU build that pip finds, as setup.sh installs it). See docs/ci.md.
#   bash scripts/lock.sh            # rewrite the lock from today's releases
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=2.13.0 TRITON=3.9.0 PIP_TOOLS=7.7.0
tool=$(mktemp -d)
trap 'rm -rf "$tool"' EXIT
python3 -m venv "$tool/venv"
"$tool/venv/bin/python" -m pip install -q "pip-tools==$PIP_TOOLS" 2>&1 | { grep -v "is ignored: it is neither" >&2 || true; }
printf 'torch==%s\ntriton==%s\n' "$TORCH" "$TRITON" > "$tool/cpu-constraints.txt"
# --no-emit-*: the lock names no machine's index or wheel folder; --unsafe-package: torch and triton are
# resolved (their dependencies are pinned) but not written
CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh" "$tool/venv/bin/pip-compile" --quiet --no-emit-index-url \
  --no-emit-find-links --no-emit-trusted-host --strip-extras --no-header --extra dev --extra interop \
  --constraint "$tool/cpu-constraints.txt" --unsafe-package torch --unsafe-package triton \
  --output-file "$tool/lock.txt" pyproject.toml
{
  echo "# The locked environment of scripts/setup.sh (CONFORMANCE_DEPS=lock, the default): made by"
  echo "# \`bash scripts/lock.sh\` on $(date -u +%Y-%m-%d) with Python $(python3 -c 'import platform; print(platform.python_version())'),"
  echo "# resolved beside torch==$TORCH and triton==$TRITON (CPU builds; setup.sh installs those, not this file)."
  echo "# Do not edit by hand: docs/ci.md says how and when to refresh it."
  grep -v '^# The following packages are considered to be unsafe' "$tool/lock.txt" | grep -v '^# torch$\|^# triton$'
} > requirements/lock.txt
echo "lock: wrote requirements/lock.txt ($(grep -c '^[a-zA-Z]' requirements/lock.txt) packages)"
