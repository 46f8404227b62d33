#!/usr/bin/env bash
# The vLLM adapter natively on the GPU machine (H200): vLLM's own Triton kernels through the suite. VLLM_VERSION picks
# the release (0.33.0, the default, or 0.34.0); the bundle must be of that release.
#
# Prepare here (CPU machine, needs the registry), once:
#   bash scripts/install-vllm.sh --bundle .vllm/bundle --exclude pillow,tqdm [0.34.0]
#   (vLLM's wheel without its compiled files + the pinned wheels for Python 3.12; the H200 image has pillow
#   and tqdm; ~58 MiB, so the tree with it stays under the device's 64 MiB)
# Run there, carrying the bundle (device tool: carry [".vllm/bundle"]):
#   bash benchmarks/vllm_gpu.sh "$OUT"
# Fold here, after the files come back:
#   python benchmarks/vllm_results.py add FILES_AT/vllm_h200.json --machine "H200 (torch 2.11, triton 3.6)" \
#       --command "bash benchmarks/vllm_gpu.sh \$OUT" [--vllm 0.34.0]
#
# Writes $OUT/vllm_h200.json (the suite report), $OUT/vllm_h200.log (its output, last 2 MB) and
# $OUT/vllm_list.txt (what the adapter found and each kernel's gate there).
set -uo pipefail
out="${1:?usage: benchmarks/vllm_gpu.sh OUT_DIR}"
mkdir -p "$out"
site="${VLLM_SITE:-/tmp/vllm-site}"
py="${PYTHON:-python3}"
export PYTHON="$py" PYTHONPATH="$site:$PWD" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
start=$SECONDS
bash scripts/install-vllm.sh --wheels .vllm/bundle "${VLLM_VERSION:-0.33.0}" "$site" > "$out/vllm_install.log" 2>&1 || {
  tail -20 "$out/vllm_install.log"; echo "install failed"; exit 1; }
grep -E "^(install|check):" "$out/vllm_install.log"
echo "install: $((SECONDS - start)) s"
timeout 90 "$py" -m conformance --plugin conformance.adapters.vllm list > "$out/vllm_list.txt" 2>&1
grep -E "^vllm_" "$out/vllm_list.txt" | cut -c1-160
kernels=vllm_triton_w4a16,vllm_rdna_hybrid_w4a16,vllm_fp8_group_quant_triton,vllm_fp8_group_quant,vllm_marlin,vllm_machete,vllm_exllama
timeout 420 "$py" -m pytest conformance/suite -n 8 -q -p no:cacheprovider \
  --conformance-plugin conformance.adapters.vllm --conformance-target auto --conformance-kernels "$kernels" \
  --conformance-report "$out/vllm_h200.json" > "$out/vllm_h200.full.log" 2>&1
rc=$?
tail -c 2000000 "$out/vllm_h200.full.log" > "$out/vllm_h200.log"; rm -f "$out/vllm_h200.full.log"
tail -5 "$out/vllm_h200.log"
echo "suite rc=$rc in $((SECONDS - start)) s"
