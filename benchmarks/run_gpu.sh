#!/usr/bin/env bash
# GPU runs of the bench and the triton_w4a16 tile sweep, everything written under $OUT.
#
#   bash benchmarks/run_gpu.sh [STEP...]     STEP: smoke | sweep | sweep-fp8 | bench | bench-w4a16 | bench-fp8 | suite | gemlite
#                                            | all | final | two-gpu | ci | gemlite5
#
# Scratch: everything the script writes outside $OUT goes under $SCRATCH (default /tmp), each path its own variable
# that a caller can point elsewhere (tests/unit/test_bench_gpu_runs.py points them all into its tmp dir):
# SWEEP_KEEP, GEMLITE_SITE (the GemLite install; emptied and refilled by each install), SUITE_JSON, CI_SCRATCH,
# GEMLITE5_SCRATCH, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, CONFORMANCE_CACHE_DIR.
#
# `ci` (one H200, one call, <= ~8 min): benchmarks/gpu_ci.py runs the README's test command (python -m pytest -n
# auto, <= CI_README_S = 240 s), then the shipped suite from an empty Triton cache (<= CI_SUITE_COLD_S = 120 s) and
# again with that cache (<= CI_SUITE_WARM_S = 60 s), and writes $OUT/gpu_ci.json (commit, clean, device, torch,
# triton; per run: command, wall_s, passed, failed, skipped, errors, jit_compiles, jit_seconds); logs
# ci_<run>.log beside it. Record it as benchmarks/results/h200/gpu_ci.json. CI_RUNS=readme_tests (or
# suite_cold,suite_warm) runs only those, e.g. to give one more time in a call of its own. Before the runs it compiles
# the site-packages' missing .pyc files (an image without them recompiles torch's sources in every process; CI_BYTECODE=0
# skips it); gpu_ci.json's python_bytecode records the state and what was done.
# `gemlite5`: benchmarks/gemlite_runs.py, GEMLITE5_RUNS (5) consecutive ci-profile GemLite runs, each under
# GEMLITE5_RUN_S (100 s), within GEMLITE5_BUDGET_S (540 s): exit code and wall of each in $OUT/gemlite5.json
# (needs .whl/ as `gemlite`). Runs slower than the limit: split over two calls (GEMLITE5_RUNS=3, then 2).
# Neither runs the smoke first.
#
# `final` (one H200, one call, <= FINAL_BUDGET_S = 570 s wall): smoke, the suite on the device (GemLite as a plugin
# when .whl/ holds its wheels), then the bench of the README (issue shapes, llama3-8b, llama3-70b, 12 M values,
# dense / torch.compile static and dynamic M / GemLite baselines). Each step's time limit is what the budget has
# left, and each writes as it goes, so a step cut short still returns what it finished. Files back (8):
# smoke.log, suite.log, suite_summary.json, suite_records.json, bench.log, bench/bench.{json,md,png}.
# `two-gpu` (two GPUs): the suite -n 4 on one GPU, then -n 4 pinned over both, same seed; benchmarks/two_gpu.py
# compares the verdicts and the worker -> GPU map (two_gpu.json). ONE_GPU_REPORT=path skips the one-GPU run.
# Pass the code identity the figures are recorded with (the tree copy there has no .git):
#   CONFORMANCE_COMMIT=<sha> CONFORMANCE_TREE_CLEAN=<0|1> bash benchmarks/run_gpu.sh final
# (`python -m conformance_bench.provenance` prints that prefix); the suite's seed is then the commit's, as in CI.
#
# `suite` runs the conformance suite, the regressions and the GPU kernel check on the device
# (suite.log, kernel_check.json; the full record goes to $SUITE_JSON). A `sweep` in the same call makes the later steps use its
# fresh table (CONFORMANCE_W4A16_TILES), not kernels/tiles/tiles_<arch>.json.
#
# One device command is limited to 10 minutes, so the usual plan is two calls:
#   call 1: bash benchmarks/run_gpu.sh sweep   (smoke + sweep, ~8 min; returns sweep/tiles_sm90.json)
#   copy sweep/tiles_sm90.json to kernels/tiles/ here (the kernel loads it from there), then
#   call 2: bash benchmarks/run_gpu.sh bench   (smoke + bench, ~6-8 min)
# A warm machine also keeps the sweep's table in $SWEEP_KEEP, which `bench` uses when
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
SCRATCH="${SCRATCH:-/tmp}"
SWEEP_KEEP="${SWEEP_KEEP:-$SCRATCH/conformance_sweep}"
GEMLITE_SITE="${GEMLITE_SITE:-$SCRATCH/conformance_gemlite_site}"  # this script's own: removed before each install
SUITE_JSON="${SUITE_JSON:-$SCRATCH/suite.json}"
CI_SCRATCH="${CI_SCRATCH:-$SCRATCH/conformance_ci}"
GEMLITE5_SCRATCH="${GEMLITE5_SCRATCH:-$SCRATCH/conformance_gemlite5}"
T0=$SECONDS
# the suite's seed when the commit is given: the one CI uses for that commit (conformance/cases/seeds.py)
if [ -z "${CONFORMANCE_SEED:-}" ] && [ -n "${CONFORMANCE_COMMIT:-}" ]; then
  export CONFORMANCE_SEED="0x${CONFORMANCE_COMMIT:0:8}"
fi
# keep inductor/triton caches off the repo copy's tracked paths
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$SCRATCH/conformance_inductor}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$SCRATCH/conformance_triton}"
export CONFORMANCE_CACHE_DIR="${CONFORMANCE_CACHE_DIR:-$SCRATCH/conformance_cache}"  # example database, replays

has() { case " $STEPS " in *" $1 "*|*" all "*) return 0;; *) return 1;; esac; }

smoke() {
  {
    date -u
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv || true
    timeout "${SMOKE_TIMEOUT_S:-600}" "$PY" - <<'EOF'
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
  mkdir -p "$SCRATCH"
  timeout 240 "$PY" benchmarks/sweep_fp8_group_quant.py "$OUT/sweep_fp8.json" 2>&1 | tee "$SCRATCH/sweep_fp8.log"
  echo "sweep-fp8 exit: $?"
}

suite() {
  echo "tile table: ${CONFORMANCE_W4A16_TILES:-kernels/tiles/tiles_<arch>.json}"
  timeout "${SUITE_TIMEOUT_S:-300}" "$PY" -m pytest conformance/suite -n 8 -q -p no:cacheprovider \
    --conformance-report "$SUITE_JSON" 2>&1 | tail -n 60 | tee "$OUT/suite.log"
  echo "suite exit: $?" | tee -a "$OUT/suite.log"
  timeout 240 "$PY" benchmarks/gpu_kernel_check.py "$OUT/kernel_check.json" 2>&1 | tail -n 30 | tee -a "$OUT/suite.log"
}

gemlite_install() {  # GemLite's wheels from .whl/ (built on the CPU machine; carried there): 0 when gemlite imports
  ls .whl/gemlite-*.whl >/dev/null 2>&1 || { echo "gemlite: no .whl/gemlite-*.whl here, GemLite not installed"; return 1; }
  rm -rf "$GEMLITE_SITE" && "$PY" -m pip install --no-deps --no-index --target "$GEMLITE_SITE" .whl/*.whl 2>&1 \
    | tail -n 2
  export PYTHONPATH="$GEMLITE_SITE:$PYTHONPATH"
  local out rc
  out=$("$PY" -c 'import gemlite; print("gemlite", gemlite.__version__ if hasattr(gemlite, "__version__") else "?")' 2>&1)
  rc=$?
  echo "$out" | tail -n 3
  return $rc
}

gemlite() {  # the suite on GemLite's A16W4 (conformance/adapters/gemlite.py): ci profile, then nightly with a cap
  # needs the wheels built on the CPU machine into .whl/ (gemlite and its tqdm; numpy and triton are here)
  gemlite_install || true
  for prof in ci nightly; do
    cap=${GEMLITE_CI_TIMEOUT_S:-240}; [ "$prof" = nightly ] && cap=${GEMLITE_NIGHTLY_TIMEOUT_S:-300}
    timeout "$cap" "$PY" -m pytest conformance/suite -n 8 -q -p no:cacheprovider \
      --conformance-plugin conformance.adapters.gemlite --conformance-kernels gemlite_a16w4 \
      --conformance-profile "$prof" --conformance-report "$OUT/gemlite_$prof.json" 2>&1 | tail -n 40 \
      | tee "$OUT/gemlite_$prof.log"
    echo "gemlite $prof exit: $?" | tee -a "$OUT/gemlite_$prof.log"
  done
}

left() { echo $(( ${FINAL_BUDGET_S:-570} - (SECONDS - T0) )); }  # seconds the one-call budget has left
cap() {  # cap WANT RESERVE: WANT seconds, or what is left after keeping RESERVE for the later steps (>= 1)
  local c=$(( $(left) - $2 ))
  [ "$c" -gt "$1" ] && c=$1
  [ "$c" -lt 1 ] && c=1
  echo "$c"
}

SUITE_FLAGS="-q -p no:cacheprovider -p benchmarks.suite_record"  # the recorder: GPU per record, summary JSON
# the README's bench (benchmarks/README.md "What each row is"): fp8 first (seconds), then the issue's two shapes,
# llama3-8b, llama3-70b (largest last); ours and the baselines; the compile-boundary check on the issue shapes
FINAL_BENCH="--shapes 14336x4096,4096x14336,llama3-8b,llama3-70b --m 1,2,4,8,16,32,64,128,256,512,1024,4096
  --family fp8_group_quant,w4a16 --kernels triton_w4a16,fp8_group_quant_triton,fp8_group_quant_native
  --baselines dense,compile,gemlite --compile-boundary-shapes 14336x4096,4096x14336
  --replays 20 --eager-reps 5 --budget-s 0.1"

final() {
  local plugin=""
  export CONFORMANCE_GEMLITE_AUTOTUNE="${CONFORMANCE_GEMLITE_AUTOTUNE:-default}"  # one config per shape: no tuning
  gemlite_install && plugin="--conformance-plugin conformance.adapters.gemlite"
  local t=$(cap "${FINAL_SUITE_S:-210}" "${FINAL_BENCH_MIN_S:-270}")
  echo "final: suite, ${t} s limit, $(left) s left"
  timeout "$t" "$PY" -m pytest conformance/suite -n 8 $SUITE_FLAGS $plugin \
    --suite-summary "$OUT/suite_summary.json" --conformance-report "$OUT/suite_records.json" 2>&1 | tail -n 80 \
    | tee "$OUT/suite.log"
  echo "suite exit: $? after $((SECONDS - T0)) s" | tee -a "$OUT/suite.log"
  t=$(cap "${FINAL_BENCH_S:-300}" 10)
  echo "final: bench, ${t} s limit, $(left) s left"
  timeout "$t" "$PY" -m conformance bench --out "$OUT/bench" $FINAL_BENCH 2>&1 | tee "$OUT/bench.log" | tail -n 40
  echo "bench exit: $? after $((SECONDS - T0)) s" | tee -a "$OUT/bench.log"
  [ -f "$OUT/bench/bench.md" ] && grep -E '^- |^## |PARTIAL' "$OUT/bench/bench.md" | tail -n 30
}

ci() {  # kernel CI on this GPU, timed and counted: $OUT/gpu_ci.json (benchmarks/gpu_ci.py)
  timeout -k 10 "${CI_TIMEOUT_S:-560}" "$PY" -m benchmarks.gpu_ci "$OUT/gpu_ci.json" --scratch "$CI_SCRATCH" \
    ${CI_RUNS:+--runs "$CI_RUNS"} $([ "${CI_BYTECODE:-1}" = 0 ] || echo --compile-bytecode) 2>&1 | tee "$OUT/ci.log"
  echo "ci exit: $? after $((SECONDS - T0)) s" | tee -a "$OUT/ci.log"
}

gemlite5() {  # consecutive ci-profile GemLite runs, each under a limit: $OUT/gemlite5.json (benchmarks/gemlite_runs.py)
  gemlite_install || echo "gemlite5: GemLite did not install; the runs will skip gemlite_a16w4 (its gate says why)"
  timeout -k 10 "$(( ${GEMLITE5_BUDGET_S:-540} + 30 ))" "$PY" -m benchmarks.gemlite_runs "$OUT/gemlite5.json" \
    --scratch "$GEMLITE5_SCRATCH" --runs "${GEMLITE5_RUNS:-5}" --run-s "${GEMLITE5_RUN_S:-100}" \
    --budget-s "${GEMLITE5_BUDGET_S:-540}" 2>&1 | tee "$OUT/gemlite5.log"
  echo "gemlite5 exit: $? after $((SECONDS - T0)) s" | tee -a "$OUT/gemlite5.log"
}

two_gpu() {
  local n plugin="" one="${ONE_GPU_REPORT:-}" first
  n=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
  [ "$n" -ge 2 ] || { echo "two-gpu: needs two GPUs, torch sees $n"; return 1; }
  export CONFORMANCE_GEMLITE_AUTOTUNE="${CONFORMANCE_GEMLITE_AUTOTUNE:-default}"  # verdicts must not depend on tuning
  gemlite_install && plugin="--conformance-plugin conformance.adapters.gemlite"
  if [ -z "$one" ]; then
    first="${CUDA_VISIBLE_DEVICES:-0}"; first="${first%%,*}"
    CUDA_VISIBLE_DEVICES="$first" timeout "$(cap "${TWO_GPU_RUN_S:-240}" 200)" "$PY" -m pytest conformance/suite \
      -n 4 $SUITE_FLAGS $plugin --suite-summary "$OUT/one_gpu_summary.json" \
      --conformance-report "$OUT/one_gpu_records.json" 2>&1 | tail -n 40 | tee "$OUT/one_gpu.log"
    echo "one-GPU suite exit: $? after $((SECONDS - T0)) s" | tee -a "$OUT/one_gpu.log"
    one="$OUT/one_gpu_records.json"
  fi
  timeout "$(cap "${TWO_GPU_RUN_S:-240}" 15)" "$PY" -m pytest conformance/suite -n 4 $SUITE_FLAGS $plugin \
    --suite-summary "$OUT/two_gpu_summary.json" --conformance-report "$OUT/two_gpu_records.json" 2>&1 | tail -n 40 \
    | tee "$OUT/two_gpu.log"
  echo "two-GPU suite exit: $? after $((SECONDS - T0)) s" | tee -a "$OUT/two_gpu.log"
  "$PY" -m benchmarks.two_gpu "$one" "$OUT/two_gpu_records.json" "$OUT/two_gpu.json"
  echo "two-gpu compare exit: $?"
}

case " $STEPS " in *" final "*|*" two-gpu "*) export SMOKE_TIMEOUT_S="${SMOKE_TIMEOUT_S:-90}";; esac  # one-call budgets
need_smoke=0
for s in $STEPS; do case "$s" in ci|gemlite5) ;; *) need_smoke=1;; esac; done  # ci, gemlite5: their own budgets
[ "$need_smoke" = 1 ] && smoke
has sweep && sweep
has sweep-fp8 && sweep_fp8
if has bench || has bench-w4a16 || has bench-fp8; then
  fams="w4a16,fp8_group_quant"
  case " $STEPS " in *" bench-w4a16 "*) fams="w4a16";; *" bench-fp8 "*) fams="fp8_group_quant";; esac
  bench "$fams"
fi
has suite && suite
case " $STEPS " in *" gemlite "*) gemlite;; esac  # not part of `all`: needs .whl/ and a GPU
case " $STEPS " in *" final "*) final;; esac  # not part of `all`: one call of its own
case " $STEPS " in *" two-gpu "*) two_gpu;; esac  # not part of `all`: needs two GPUs
case " $STEPS " in *" ci "*) ci;; esac  # not part of `all`: one call of its own
case " $STEPS " in *" gemlite5 "*) gemlite5;; esac  # not part of `all`: one call of its own, needs .whl/
ls -la "$OUT" "$OUT"/* 2>/dev/null
