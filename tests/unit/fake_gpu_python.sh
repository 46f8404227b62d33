#!/usr/bin/env bash
# A stand-in for python in benchmarks/run_gpu.sh's CPU tests (PYTHON=this): logs every call with the GPU
# visibility and seed it sees, answers the probes, and writes the files a real run writes; nothing is imported.
echo "CALL cvd=${CUDA_VISIBLE_DEVICES:-} seed=${CONFORMANCE_SEED:-} autotune=${CONFORMANCE_GEMLITE_AUTOTUNE:-} $*" \
  >> "$FAKE_LOG"
case "$*" in
  *device_count*) echo "${FAKE_GPUS:-2}" ;;
  *"import gemlite"*) echo "gemlite 0.6.0" ;;
  *"-m pip"*) echo "Successfully installed (fake)" ;;
  *"-m pytest"*)
    args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do
      case "${args[$i]}" in --suite-summary|--conformance-report) echo '{"records": []}' > "${args[$((i + 1))]}" ;; esac
    done
    echo "3 passed in 0.01s (fake)" ;;
  *"-m conformance bench"*)
    args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do
      if [ "${args[$i]}" = "--out" ]; then
        mkdir -p "${args[$((i + 1))]}"
        for f in bench.json bench.md bench_roofline.png; do echo "- fake" > "${args[$((i + 1))]}/$f"; done
      fi
    done ;;
  *"-m benchmarks.two_gpu"*) echo '{"ok": true}' > "${*: -1}" ;;
  *"-m benchmarks.gpu_ci"*|*"-m benchmarks.gemlite_runs"*) echo '{"fake": true}' > "$3" ;;  # $1 -m, $2 module
  *) cat > /dev/null ;;  # the smoke's script on stdin
esac
exit 0
