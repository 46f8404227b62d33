#!/usr/bin/env bash
# torch's CUDA tinygemm (aten._weight_int4pack_mm, kernel torch_int4_tinygemm) judged by the suite on one GPU, and
# the probes of its unchecked scales_and_zeros; every result is JSON under OUTDIR (one call, <= 570 s wall):
#
#   CONFORMANCE_COMMIT=<sha> CONFORMANCE_TREE_CLEAN=<0|1> bash benchmarks/third_party_gpu.sh OUTDIR
#
# Files back (6): tinygemm_ci.json and tinygemm_nightly.json (--conformance-report of the ci and nightly profiles),
# run_ci.json and run_nightly.json (benchmarks/third_party.py record: the runs third_party.json holds),
# tinygemm_probe.json (benchmarks/tinygemm_probe.py), third_party_gpu.log. Merge here with
#   python -m benchmarks.third_party merge <the CPU runs> OUTDIR/run_ci.json OUTDIR/run_nightly.json \
#       --out benchmarks/results/third_party.json
# (docs/plugins.md lists the CPU runs). The nightly step gets what the budget has left and writes as it goes.
set -x
set -o pipefail
export PYTHONUNBUFFERED=1
OUT="${1:?usage: bash benchmarks/third_party_gpu.sh OUTDIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
BUDGET_S="${BUDGET_S:-570}"
T0=$SECONDS
if [ -z "${CONFORMANCE_SEED:-}" ] && [ -n "${CONFORMANCE_COMMIT:-}" ]; then
  export CONFORMANCE_SEED="0x${CONFORMANCE_COMMIT:0:8}"  # the seed CI uses for that commit
fi
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/conformance_inductor}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/conformance_triton}"
left() { echo $(( BUDGET_S - (SECONDS - T0) )); }
MACHINE="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(nproc) CPU cores"
SUITE=(conformance/suite -p no:cacheprovider -q --conformance-plugin conformance.adapters.torch_int4
       --conformance-kernels torch_int4_tinygemm)
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  timeout 90 "$PY" benchmarks/tinygemm_probe.py "$OUT/tinygemm_probe.json"
  for profile in ci nightly; do
    limit=$(( $(left) - 25 ))
    [ "$profile" = ci ] && limit=$(( limit < 300 ? limit : 300 ))
    [ "$limit" -lt 30 ] && { echo "no time left for the $profile profile"; continue; }
    cmd="python -m pytest ${SUITE[*]} -n 8 --conformance-profile $profile"
    timeout "$limit" "$PY" -m pytest "${SUITE[@]}" -n 8 --conformance-profile "$profile" \
      --conformance-report "$OUT/tinygemm_$profile.json"
    echo "pytest $profile exit $? after $((SECONDS - T0)) s"
    [ -f "$OUT/tinygemm_$profile.json" ] && "$PY" -m benchmarks.third_party record \
      --report "$OUT/tinygemm_$profile.json" --command "$cmd" --machine "$MACHINE" --out "$OUT/run_$profile.json"
  done
  echo "done after $((SECONDS - T0)) s"
} 2>&1 | tee "$OUT/third_party_gpu.log"
