"""Host-side (Python) cost of one triton_w4a16 call with the Triton launches stubbed out: what eager decode
pays on top of the kernels and Triton's own launcher. Runs on any machine (no GPU, no interpreter work).

Usage (repo root): python benchmarks/probes/host_overhead.py [OUT.json]
Records the median of 5 rounds x 2000 calls for the wrapper (launch_w4a16_gemm) and the custom op.
"""
from __future__ import annotations

import importlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from conformance.core import registry  # noqa: E402


class _NoLaunch:
    """Stands in for a @triton.jit kernel: kernel[grid](...) does nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def measure(calls: int = 2000, rounds: int = 5) -> dict:
    registry.load_all()
    tw = importlib.import_module("conformance_kernels.triton_w4a16")
    saved = tw._w4a16_gemm_kernel, tw._splitk_reduce_kernel, tw._w4a16_dequant_kernel
    tw._w4a16_gemm_kernel = tw._splitk_reduce_kernel = tw._w4a16_dequant_kernel = _NoLaunch()
    try:
        K, N = 4096, 14336
        b = torch.zeros(K, N // 8, dtype=torch.int32)
        s = torch.zeros(K // 128, N, dtype=torch.float16)
        out = {}
        for M in (1, 16):  # decode: prefill M takes the dequant_mm path, whose torch.mm is real work
            x = torch.zeros(M, K, dtype=torch.float16)
            for name, fn in (("wrapper", lambda x=x: tw.launch_w4a16_gemm(x, b, s, None, 128, 8)),
                             ("custom_op", lambda x=x: torch.ops.conformance.triton_w4a16_gemm(x, b, s, None, 128, 8))):
                for _ in range(50):
                    fn()
                per_round = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    per_round.append((time.perf_counter() - t0) / calls * 1e6)
                out[f"{name}_M{M}_us"] = round(statistics.median(per_round), 2)
        return out
    finally:
        tw._w4a16_gemm_kernel, tw._splitk_reduce_kernel, tw._w4a16_dequant_kernel = saved


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    doc = {"python": platform.python_version(), "torch": torch.__version__, "machine": platform.machine(),
           "processor": platform.processor(), "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "note": "Triton launches stubbed: host Python of the wrapper and the custom-op dispatch only",
           **measure()}
    text = json.dumps(doc, indent=1)
    print(text)
    if argv:
        Path(argv[0]).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
