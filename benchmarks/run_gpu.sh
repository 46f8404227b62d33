#!/usr/bin/env bash
# GPU runs of the bench and the triton_w4a16 tile sweep, everything written under $OUT.
#
#   bash benchmarks/run_gpu.sh [STEP...]     STEP: smoke | sweep | sweep-fp8 | bench | bench-w4a16 | bench-fp8 | suite | gemlite | all
#
# `suite` runs the conformance suite, the regressions and the GPU kernel check on the device
# (suite.log, kernel_check.json; the full record goes to /tmp/suite.json). A `sweep` in the same call makes the later steps use its
# fresh table (CONFORMANCE_W4A16_TILES), not kernels/tiles/tiles_<arch>.json.
#
# One device command is limited to 10 minutes, so the usual plan is two calls:
#   call 1: bash benchmarks/run_gpu.sh sweep   (smoke + sweep, ~8 min; returns sweep/tiles_sm90.json)
#   copy sweep/tiles_sm90.json to kernels/tiles/ here (the kernel loads it from there), then
#   call 2: bash benchmarks/run_gpu.sh bench   (smoke + bench, ~6-8 min)
# A warm machine also keeps the sweep's table in /tmp/conformance_sweep, which `bench` uses when
# kernels/tiles/ has none for the arch. Files back (at most 8, 2 folders deep): smoke.log, sweep.log,
# sweep/tiles_<arch>.json, sweep/sweep_<arch>.json, bench.log, bench/bench.{json,md,png}.
set -x
set -o pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/gpu}"
mkdir -p "$OUT"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
STEPS="${*:-all}"
SWEEP_KEEP=/tmp/conformance_sweep
# keep inductor/triton caches off the repo copy's tracked paths
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/conformance_inductor}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/conformance_triton}"

has() { case " $STEPS " in *" $1 "*|*" all "*) return 0;; *) return 1;; esac; }

smoke() {
  {
    date -u
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv || true
    "$PY" - <<'EOF'
import sys, torch
from conformance import registry
registry.load_all()  # before importing triton: under an interpreter TRITON_INTERPRET must be set first
import triton
print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)
print("cuda available", torch.cuda.is_available(), "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
import importlib
tw = importlib.import_module("conformance_kernels.triton_w4a16")
from references.codecs import operands as ops
g = torch.Generator().manual_seed(0)
# exact-tier smoke of every kernel path on the GPU (x in {-1,0,1}, power-of-two scales: bit-exact)
K, N = 512, 256
q = torch.randint(0, 16, (K, N), generator=g, dtype=torch.int32)
s = torch.pow(2.0, torch.randint(-7, -3, (K // 128, N), generator=g).double()).half()
w64 = (q.double() - 8) * s.double().repeat_interleave(128, 0)
b_q = ops.triton_pack_qweight(q).cuda(); s = s.cuda()
T = tw.TileConfig
bad = 0
for M in (1, 3, 16, 33):
    x = torch.randint(-1, 2, (M, K), generator=g).half()
    ref = (x.double() @ w64).half().cuda()
    for cfg in (None, T(16, 64, 128, 4, 4, 3), T(16, 64, 128, 0, 4, 3, True), T(8, 64, 64, 2, 4, 3, True, False),
                T(4, 128, 64, 0, 4, 3, False, False), T(64, 128, 64, 1, 4, 3, True),
                T(16, 128, 128, 0, 4, 3, True, True, True), T(128, 128, 64, 1, 8, 3, True, True, True),
                T(1, 128, 64, 0, 4, 3, True, False, False, True), T(16, 128, 128, 0, 4, 3, True, True, True, True),
                T(64, 128, 64, 1, 4, 3, True, True, False, True), T(1, 128, 64, 1, 4, 1, True, True, False, True, True)):
        try:
            y = tw.launch_w4a16_gemm(x.cuda(), b_q, s, None, 128, 8, cfg)
            torch.cuda.synchronize()
            ok = torch.equal(y, ref)
        except Exception as e:
            ok = f"{type(e).__name__}: {str(e)[:200]}"
        bad += ok is not True
        print(f"smoke M={M} {cfg}: {ok} {tw.last_launch_config() if ok is True else ''}")
print("SMOKE", "OK" if bad == 0 else f"{bad} FAILED")
EOF
  } 2>&1 | tee "$OUT/smoke.log"
}

sweep() {
  mkdir -p "$OUT/sweep" "$SWEEP_KEEP"
  merge=""
  [ -n "${SWEEP_MERGE:-}" ] && merge="--merge $SWEEP_MERGE"
  timeout 500 "$PY" benchmarks/sweep_triton_w4a16.py --out "$OUT/sweep" --budget-s "${SWEEP_BUDGET_S:-400}" \
    ${SWEEP_MS:+--ms $SWEEP_MS} $merge 2>&1 | tee "$OUT/sweep.log"
  echo "sweep exit: $?"
  cp "$OUT"/sweep/tiles_*.json "$OUT"/sweep/sweep_*.json "$SWEEP_KEEP"/ 2>/dev/null || true
  fresh=$(ls "$OUT"/sweep/tiles_*.json 2>/dev/null | head -n 1)
  [ -n "$fresh" ] && export CONFORMANCE_W4A16_TILES="$fresh"
  tail -n 20 "$OUT/sweep.log"
}

bench() {  # $1: families
  arch=$("$PY" -c 'import torch; m, n = torch.cuda.get_device_capability(); print(f"sm{m}{n}")')
  if [ -z "${CONFORMANCE_W4A16_TILES:-}" ] && [ ! -f "kernels/tiles/tiles_$arch.json" ] && \
     [ -f "$SWEEP_KEEP/tiles_$arch.json" ]; then
    export CONFORMANCE_W4A16_TILES="$SWEEP_KEEP/tiles_$arch.json"
  fi
  echo "tile table: ${CONFORMANCE_W4A16_TILES:-kernels/tiles/tiles_$arch.json (or built-in defaults if absent)}"
  timeout "${BENCH_TIMEOUT_S:-540}" "$PY" -m conformance bench --out "$OUT/bench" --shapes "${BENCH_SHAPES:-issue}" \
    --m "${BENCH_M:-all}" --family "$1" ${BENCH_ARGS:-} 2>&1 | tee -a "$OUT/bench.log"
  echo "bench exit: $?"
  [ -f "$OUT/bench/bench.md" ] && cat "$OUT/bench/bench.md" | grep -v '^| .* | ok | ' | tail -n 60
  [ -f "$OUT/bench/bench.md" ] && grep -E '^\| (4096x4096|14336x4096|4096x14336|7168/g128) \| (1|16|4096|8192) \|' \
    "$OUT/bench/bench.md" | tail -n 40
}

sweep_fp8() {
  timeout 240 "$PY" benchmarks/sweep_fp8_group_quant.py "$OUT/sweep_fp8.json" 2>&1 | tee /tmp/sweep_fp8.log
  echo "sweep-fp8 exit: $?"
}

suite() {
  echo "tile table: ${CONFORMANCE_W4A16_TILES:-kernels/tiles/tiles_<arch>.json}"
  timeout "${SUITE_TIMEOUT_S:-300}" "$PY" -m pytest conformance/suite -n 8 -q -p no:cacheprovider \
    --conformance-report /tmp/suite.json 2>&1 | tail -n 60 | tee "$OUT/suite.log"
  echo "suite exit: $?" | tee -a "$OUT/suite.log"
  timeout 240 "$PY" benchmarks/gpu_kernel_check.py "$OUT/kernel_check.json" 2>&1 | tail -n 30 | tee -a "$OUT/suite.log"
}

gemlite() {  # the suite on GemLite's A16W4 (conformance/adapters/gemlite.py): ci profile, then nightly with a cap
  # needs the wheels built on the CPU machine into .whl/ (gemlite and its tqdm; numpy and triton are here)
  rm -rf /tmp/site && "$PY" -m pip install --no-deps --no-index --target /tmp/site .whl/*.whl 2>&1 | tail -n 2
  export PYTHONPATH="/tmp/site:$PYTHONPATH"
  for prof in ci nightly; do
    cap=${GEMLITE_CI_TIMEOUT_S:-240}; [ "$prof" = nightly ] && cap=${GEMLITE_NIGHTLY_TIMEOUT_S:-300}
    timeout "$cap" "$PY" -m pytest conformance/suite -n 8 -q -p no:cacheprovider \
      --conformance-plugin conformance.adapters.gemlite --conformance-kernels gemlite_a16w4 \
      --conformance-profile "$prof" --conformance-report "$OUT/gemlite_$prof.json" 2>&1 | tail -n 40 \
      | tee "$OUT/gemlite_$prof.log"
    echo "gemlite $prof exit: $?" | tee -a "$OUT/gemlite_$prof.log"
  done
}

smoke
has sweep && sweep
has sweep-fp8 && sweep_fp8
if has bench || has bench-w4a16 || has bench-fp8; then
  fams="w4a16,fp8_group_quant"
  case " $STEPS " in *" bench-w4a16 "*) fams="w4a16";; *" bench-fp8 "*) fams="fp8_group_quant";; esac
  bench "$fams"
fi
has suite && suite
case " $STEPS " in *" gemlite "*) gemlite;; esac  # not part of `all`: needs .whl/ and a GPU
ls -la "$OUT" "$OUT"/* 2>/dev/null
