"""GPU-only probes of the input checks of torch's CUDA tinygemm (`aten._weight_int4pack_mm`), written as JSON.

    python benchmarks/tinygemm_probe.py OUT.json

Reading int4mm.cu, `_weight_int4pack_mm_cuda` checks scales_and_zeros' dim (3), size(1) == N and size(2) == 2,
but neither its dtype (the kernel reads it as bf16 pairs whatever it holds) nor size(0) == K / group_size.
Each probe runs in a fresh subprocess (an illegal memory access poisons the CUDA context) on M=4, N=64, K=256,
group 64, and reports rc, whether the op raised (and its message), and for calls that returned: finite, the
relative max difference from the correct bf16 call, and whether it equals the call on the bytes reinterpreted
as bf16 (`same_as_bytes_as_bf16`):
- sz_bf16: the correct call (the baseline; must match x @ W to bf16 rounding);
- sz_float16, sz_float32: scales_and_zeros in fp16 / fp32 holding the same values;
- sz_short: K / group_size - 1 groups (the last group read out of bounds);
- sz_empty: [0, N, 2] (reported as pytorch#189829: an illegal read).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBES = ("sz_bf16", "sz_float16", "sz_float32", "sz_short", "sz_empty")

CHILD = textwrap.dedent('''
    import json, sys, torch
    probe = sys.argv[1]
    torch.manual_seed(0)
    M, N, K, g = 4, 64, 256, 64
    G = K // g
    q = torch.randint(0, 16, (N, K), dtype=torch.int32)
    w8 = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8).cuda()  # torchao's own line, not references.packing
    packed = torch.ops.aten._convert_weight_to_int4pack(w8, 8)
    s = (torch.rand(G, N) * 0.02 + 0.005).to(torch.bfloat16)
    z = torch.randint(0, 16, (G, N))
    zf = ((8 - z).double() * s.double()).to(torch.bfloat16)
    sz = torch.stack([s, zf], -1).contiguous().cuda()
    x = torch.randn(M, K).to(torch.bfloat16).cuda()
    gi = torch.arange(K) // g
    W = ((q.t().double() - 8) * s.double()[gi] + zf.double()[gi]).to(torch.bfloat16)
    ref = (x.cpu().float() @ W.float()).to(torch.bfloat16)
    base = torch.ops.aten._weight_int4pack_mm(x, packed, g, sz).cpu()
    out = {"probe": probe, "baseline_rel_err": float((base.double() - ref.double()).abs().max()
                                                     / ref.double().abs().max())}
    if probe == "sz_bf16":
        arg = sz
    elif probe in ("sz_float16", "sz_float32"):
        arg = sz.to(getattr(torch, probe[3:]))
    elif probe == "sz_short":
        arg = sz[: G - 1].contiguous()
    else:
        arg = torch.empty(0, N, 2, dtype=torch.bfloat16, device="cuda")
    out["sz"] = {"dtype": str(arg.dtype), "shape": list(arg.shape)}
    try:
        y = torch.ops.aten._weight_int4pack_mm(x, packed, g, arg)
        torch.cuda.synchronize()
        y = y.cpu()
        out["raised"] = None
        out["finite"] = bool(torch.isfinite(y.float()).all())
        out["rel_diff_from_bf16_call"] = float((y.double() - base.double()).abs().max() / base.double().abs().max())
        if arg.dtype != torch.bfloat16 and arg.numel():
            flat = arg.contiguous().view(torch.bfloat16).reshape(-1)[: G * N * 2].reshape(G, N, 2)
            as_bf16 = torch.ops.aten._weight_int4pack_mm(x, packed, g, flat.contiguous()).cpu()
            out["same_as_bytes_as_bf16"] = bool(torch.equal(y.view(torch.int16), as_bf16.view(torch.int16)))
    except Exception as e:
        out["raised"] = type(e).__name__ + ": " + " ".join(str(e).split())[:300]
    print("PROBE_JSON " + json.dumps(out))
''')


def run_probe(name: str, timeout_s: float = 60.0) -> dict:
    """One probe in a fresh Python process: its JSON line, rc and the tail of stderr."""
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"probe": name, "rc": None, "error": f"timeout after {timeout_s} s"}
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("PROBE_JSON ")), None)
    res = json.loads(line[len("PROBE_JSON "):]) if line else {"probe": name}
    res["rc"] = p.returncode
    if p.returncode != 0 or line is None:
        res["stderr_tail"] = " ".join(p.stderr.split())[-600:]
    return res


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python benchmarks/tinygemm_probe.py OUT.json", file=sys.stderr)
        return 2
    import torch

    doc = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "probes": [run_probe(n) for n in PROBES]}
    with open(argv[0], "w") as f:
        json.dump(doc, f, indent=1)
    for p in doc["probes"]:
        print(json.dumps(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
