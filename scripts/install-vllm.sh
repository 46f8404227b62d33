#!/usr/bin/env bash
# Install a vLLM release for the conformance tests into its own directory, never touching torch.
#
#   bash scripts/install-vllm.sh [--wheels WHEELS] [VERSION] [DIR]
#   bash scripts/install-vllm.sh --bundle OUT [--python-version X.Y] [--exclude NAME,NAME] [VERSION]
#
# Install (default VERSION 0.33.0; 0.34.0 too, DIR .vllm/site): `pip install --no-deps --target DIR` of the vllm wheel and of
# the pure-Python packages it imports on the way to its kernels, pinned one per line in
# scripts/vllm-requirements.txt (its first line names the vLLM version the pins are for). torch, triton and the
# CUDA wheels are not on the list and --no-deps keeps pip from pulling them. --wheels WHEELS installs from a
# directory of wheels only (--no-index): every pinned package found there is installed; one that is not there must
# already be installed in this Python (its name and version are printed), else the install stops with an error.
# Then DIR is checked (scripts/vllm_bundle.py check) and the adapter's kernel package imported. Use it with
#   PYTHONPATH=DIR python -m conformance --plugin conformance.adapters.vllm list
#
# --bundle OUT: a directory of wheels for another machine (default Python 3.12, the H200's): vLLM's wheel without
# its compiled files (scripts/vllm_bundle.py slim) and the pinned packages' wheels for that Python, minus
# --exclude (packages that machine already has); prints its size. Install it there with --wheels OUT.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
reqs="$here/vllm-requirements.txt"
wheels="" bundle="" pyver="3.12" exclude=""
pos=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) wheels="${2:?--wheels needs a directory}"; shift 2 ;;
    --bundle) bundle="${2:?--bundle needs a directory}"; shift 2 ;;
    --python-version) pyver="${2:?--python-version needs X.Y}"; shift 2 ;;
    --exclude) exclude="${2:?--exclude needs NAME,NAME}"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "error: option $1 is unknown (allowed: --wheels DIR, --bundle OUT, --python-version X.Y, --exclude NAMES)" >&2; exit 2 ;;
    *) pos+=("$1"); shift ;;
  esac
done
version="${pos[0]:-0.33.0}"
dir="${pos[1]:-$repo/.vllm/site}"
[ ${#pos[@]} -le 2 ] || { echo "error: arguments=${pos[*]} are too many (allowed: [VERSION] [DIR])" >&2; exit 2; }
pinned_for="$(sed -n '1s/^# vllm==\([^: ]*\).*/\1/p' "$reqs")"  # comma-separated versions
case ",$pinned_for," in *",$version,"*) ;; *)
  echo "error: VERSION=$version has no pinned package list (allowed: one of $pinned_for, the versions scripts/vllm-requirements.txt is for)" >&2
  exit 2 ;;
esac
py="${PYTHON:-python}"
pins=$(grep -v '^#' "$reqs" | sed 's/#.*//' | awk 'NF')

if [ -n "$bundle" ]; then
  [ -z "$wheels" ] || { echo "error: --bundle and --wheels do not go together" >&2; exit 2; }
  mkdir -p "$bundle"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  start=$SECONDS
  "$py" -m pip download --no-deps -q -d "$tmp" "vllm==$version"
  "$py" "$here/vllm_bundle.py" slim "$tmp"/vllm-"$version"-*.whl "$bundle"
  keep=$(for p in $pins; do n="${p%%==*}"; case ",$exclude," in *",$n,"*) ;; *) echo "$p" ;; esac; done)
  abi="cp${pyver/./}"
  plats=""
  for p in manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1; do
    plats="$plats --platform ${p}_x86_64"
  done
  # shellcheck disable=SC2086 - one --platform flag per word
  "$py" -m pip download --no-deps -q --only-binary=:all: --python-version "$pyver" --implementation cp \
    --abi "$abi" --abi abi3 --abi none $plats --platform any -d "$bundle" $keep
  [ -z "$exclude" ] || echo "bundle: left out (the target machine has them): $exclude"
  "$py" "$here/vllm_bundle.py" size "$bundle"
  echo "bundle: $bundle for Python $pyver in $((SECONDS - start)) s; install there with: bash scripts/install-vllm.sh --wheels $bundle $version DIR"
  exit 0
fi

start=$SECONDS
mkdir -p "$dir"
if [ -n "$wheels" ]; then
  present=() from_env=()
  for p in $pins; do
    n="${p%%==*}"; v="${p#*==}"
    glob="$(echo "$n" | tr '-' '_')"
    if [ -n "$(ls "$wheels"/"$glob"-"$v"-*.whl "$wheels"/"$n"-"$v"-*.whl 2>/dev/null | head -1)" ]; then
      present+=("$p")
    elif have="$("$py" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$n" 2>/dev/null)"; then
      from_env+=("$n==$have")
    else
      echo "error: package=$p is neither in --wheels $wheels nor installed in $py (allowed: a wheel in $wheels, or already installed)" >&2
      exit 1
    fi
  done
  "$py" -m pip install --no-deps --no-index --find-links "$wheels" --target "$dir" -q --upgrade "vllm==$version" "${present[@]}"
  [ ${#from_env[@]} -eq 0 ] || echo "install: taken from this Python, not from $wheels: ${from_env[*]}"
else
  # shellcheck disable=SC2086 - one requirement per word
  "$py" -m pip install --no-deps --target "$dir" -q --upgrade "vllm==$version" $pins
fi
echo "install: vllm==$version and $(echo "$pins" | wc -l) pinned packages into $dir in $((SECONDS - start)) s"
if [ -z "$wheels" ]; then
  "$py" "$here/vllm_bundle.py" check "$dir" "$reqs"
fi
cd "$repo"
PYTHONPATH="$dir:$repo${PYTHONPATH:+:$PYTHONPATH}" "$py" -c "
import conformance.adapters.vllm as a
print('install: import ok:', a.describe())
"
