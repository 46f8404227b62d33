"""Run every Triton-backed kernel on this machine's GPU over fixed exact-tier cases plus a few large
statistical-tier shapes, through the suite's own harness, and write one JSON of verdicts.

Usage (on a GPU machine, from the repo root): PYTHONPATH=. python benchmarks/gpu_kernel_check.py OUT.json
The hybrid kernel's gate refuses CUDA targets (it is a gfx11/gfx12 kernel), but its Triton skinny path
runs on any GPU: it is run here through the harness with the gate bypassed and labelled so.
"""
from __future__ import annotations

import json
import sys
import time

import torch

from conformance.cases.ids import Case
from conformance.checks import harness
from conformance.core import registry
from conformance.core.targets import detect_target, parse_target

EXACT = [  # (M, N, K, group, weight_type, act_order, dtype, format)
    (1, 64, 128, 32, "uint4b8", False, "float16", "gptq_v1"),
    (3, 136, 256, 64, "uint4", False, "bfloat16", "gptq_v2"),
    (17, 256, 512, 128, "uint4", False, "float16", "awq"),
    (33, 512, 1024, -1, "uint4b8", False, "bfloat16", "compressed_tensors"),
    (64, 128, 256, 256, "uint4", False, "float16", "compressed_tensors"),
    (5, 64, 512, 128, "uint4", True, "bfloat16", "gptq_v1"),
    (257, 1024, 2048, 128, "uint4b8", True, "float16", "gptq_v2"),
]
LARGE = [  # statistical tier, realistic data
    (1, 4096, 4096, 128, "uint4b8", False, "float16", "gptq_v2"),
    (16, 14336, 4096, 128, "uint4", False, "bfloat16", "compressed_tensors"),
    (1, 4096, 14336, 128, "uint4b8", False, "bfloat16", "gptq_v1"),
    (512, 4096, 4096, 64, "uint4", False, "float16", "awq"),
    (2048, 4096, 14336, 128, "uint4b8", False, "float16", "gptq_v2"),
]
FP8 = [  # (tokens, hidden, group, dtype, ue8m0, column_major)
    (1, 7168, 128, "bfloat16", False, False), (64, 7168, 128, "bfloat16", True, True),
    (8192, 7168, 128, "bfloat16", False, False), (33, 4096, 64, "float16", False, True),
]


QUICK = False  # --quick: the exact cases only, small fp8 shapes (to check this script on a CPU)


def w4a16_cases(kernel: str):
    out = []
    tiers = (("exact", EXACT[:5], "exact"),) if QUICK else (("exact", EXACT, "exact"), ("statistical", LARGE, "normal"))
    for tier, rows, regime in tiers:
        for i, (M, N, K, g, wt, ao, dt, fmt) in enumerate(rows):
            if ao and fmt == "awq":
                continue
            out.append(Case("w4a16", kernel, regime, tier, 1000 + i, g, dt, M=M, N=N, K=K, weight_type=wt,
                            act_order=ao, format=fmt))
    return out


def fp8_cases(kernel: str):
    out = []
    for i, (T, H, g, dt, ue, cm) in enumerate(FP8):
        if QUICK and T * H > 64 * 7168:
            continue
        for tier, regime in (("exact", "normal"), ("exact", "fp8_boundaries"), ("statistical", "heavy_tailed")):
            out.append(Case("fp8_group_quant", kernel, regime, tier, 2000 + i, g, dt, tokens=T, hidden=H,
                            fp8_dtype="float8_e4m3fn", ue8m0=ue, column_major_scales=cm))
    return out


class _GateBypass:
    """Wraps a kernel so its gate accepts: used only for the hybrid Triton path on CUDA, labelled in the JSON."""

    def __init__(self, k):
        self._k = k

    def __getattr__(self, name):
        return getattr(self._k, name)

    def can_implement(self, config, target):
        return None


def main(out_path: str) -> int:
    registry.load_all()
    target = detect_target()
    rows = []
    plan = [("triton_w4a16", w4a16_cases), ("triton_w4a16_actorder", w4a16_cases),
            ("torch_dequant_w4a16", w4a16_cases), ("rdna_hybrid_w4a16", w4a16_cases),
            ("fp8_group_quant_triton", fp8_cases), ("fp8_group_quant_native", fp8_cases)]
    for name, make in plan:
        k = registry.get_kernel(name)
        bypass = name == "rdna_hybrid_w4a16"
        for case in make(name):
            # the bypass lifts only the hybrid's target gate: configs it refuses on its own gfx11 target stay refused
            gate_target = parse_target("gfx1100") if bypass else target
            refusal = k.can_implement(case.config(), gate_target)
            if refusal is not None:
                rows.append({"case_id": case.id, "kernel": name, "outcome": "skip", "detail": refusal})
                continue
            t0 = time.perf_counter()
            v = harness.run_case(case, _GateBypass(k) if bypass else k, target, record=False)
            rows.append({"case_id": v.case_id, "kernel": name, "tier": v.check, "outcome": v.outcome,
                         "run_mode": v.run_mode, "metrics": v.metrics, "detail": v.detail[:300],
                         "gate_bypassed": bypass, "seconds": round(time.perf_counter() - t0, 3)})
            print(f"{v.outcome:5s} {v.run_mode} {v.case_id} {json.dumps(v.metrics)[:160]}", flush=True)
    env = {"torch": torch.__version__, "target": str(target),
           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    import triton

    env["triton"] = triton.__version__
    summary = {}
    for r in rows:
        s = summary.setdefault(r["kernel"], {"pass": 0, "fail": 0, "error": 0, "skip": 0, "max_ratio": 0.0})
        s[r["outcome"]] += 1
        ratio = (r.get("metrics") or {}).get("max_ratio")
        if isinstance(ratio, (int, float)):
            s["max_ratio"] = max(s["max_ratio"], ratio)
    with open(out_path, "w") as f:
        json.dump({"env": env, "summary": summary, "cases": rows}, f, indent=1, default=str)
    print(json.dumps(summary, indent=1))
    return 0 if all(s["fail"] == 0 and s["error"] == 0 for s in summary.values()) else 1


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--quick"]
    QUICK = "--quick" in sys.argv[1:]
    sys.exit(main(args[0] if args else "gpu_kernel_check.json"))
