#!/usr/bin/env bash
# GemLite's bf16 NaN (docs/shipped-bugs.md) bisected across GemLite's releases on the GPU machine (H200), with
# --repeat: the NaN depends on the launch config GemLite's autotuner picks in each process (3 of 4 fresh-process
# replays failed on 0.6.0.post2), so a step is bad if any of its replays fails.
#
# Needs GemLite's wheels (pure Python, built on the CPU machine) in .whl/gemlite/ (device tool: carry [".whl"]).
# GemLite before 0.4.8 packs fp16 only (its A16Wn has no dtype): the adapter's gate refuses bf16 there, so the
# search starts at 0.4.8.
#   bash benchmarks/bisect_gpu.sh "$OUT"
# Writes $OUT/gemlite_nan_bisect.json (the bisect's record, when it ends with an answer: exit 0 or 1),
# $OUT/gemlite_nan_bisect.log (every step's verdict, also on exit 2 or a timeout) and $OUT/bisect_gpu_env.txt.
# Fold here, after the files come back:
#   python benchmarks/bisect_results.py add FILES_AT/gemlite_nan_bisect.json --commit SHA \
#       --machine "H200 (torch 2.11, triton 3.6)" --note "..."
set -uo pipefail
out="${1:?usage: benchmarks/bisect_gpu.sh OUT_DIR}"
mkdir -p "$out"
py="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
cache="${BISECT_CACHE:-${TMPDIR:-/tmp}/conformance-bisect-gpu}"
id="w4a16/gemlite_a16w4/M=9,N=40,K=256,g=128,wt=uint4,ao=0,dt=bf16,fmt=gptq_v2,regime=exact,tier=exact,seed=41"
{ git rev-parse HEAD 2>/dev/null; "$py" -c 'import torch, triton; print("torch", torch.__version__, "triton",
  triton.__version__, torch.cuda.get_device_name())'; ls .whl/gemlite; } > "$out/bisect_gpu_env.txt" 2>&1
cat "$out/bisect_gpu_env.txt"
start=$SECONDS
timeout -k 10 "${BISECT_TIMEOUT_S:-420}" "$py" -m conformance bisect "$id" --package gemlite \
  --good "${GEMLITE_GOOD:-0.4.8}" --bad 0.6.0.post2 --wheels .whl/gemlite --cache "$cache" \
  --plugin conformance.adapters.gemlite --repeat "${BISECT_REPEAT:-3}" --json "$out/gemlite_nan_bisect.json" \
  > "$out/gemlite_nan_bisect.log" 2>&1
rc=$?
grep -E "^(bisect|step|last|first|error)" "$out/gemlite_nan_bisect.log" | cut -c1-220
echo "gemlite bisect rc=$rc in $((SECONDS - start)) s"
