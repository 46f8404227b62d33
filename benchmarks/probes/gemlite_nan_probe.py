"""GPU probe: is a NaN from GemLite's A16W4 the kernel's own, or an unwritten/uninitialised output that only the
suite's NaN-filled allocations expose? Runs each case id's data through the adapter twice, once with torch's
uninitialised memory NaN-filled (as the harness runs kernels) and once without, and prints NaN counts and the
max error against the fp64 reference. Usage: python benchmarks/probes/gemlite_nan_probe.py CASE_ID [CASE_ID ...]
"""
from __future__ import annotations

import sys

import torch

from conformance.cases.ids import parse_case_id
from conformance.checks.execution import nan_filled_allocations
from conformance.core import registry
from references import codecs
from references.gemm import reference_gemm
from references.generators import random_activations, random_canonical


def probe(case_id: str) -> None:
    case = parse_case_id(case_id)
    k = registry.get_kernel(case.kernel)
    act = getattr(torch, case.dtype)
    w = random_canonical(case.K, case.N, case.group_size, case.weight_type, act, case.regime, case.seed,
                         act_order=case.act_order)
    x = random_activations(case.M, case.K, act, case.regime, case.seed).cuda()
    lin = k.load(codecs.encode(w, case.format))
    ref = reference_gemm(x.cpu(), w)
    for label, ctx in (("nan-filled allocations", nan_filled_allocations), ("plain allocations", None)):
        for rep in range(3):
            if ctx is None:
                y = k.apply(lin, x)
            else:
                with ctx():
                    y = k.apply(lin, x)
            y = y.float().cpu()
            bad = ~torch.isfinite(y)
            err = (y.double() - ref).abs().where(~bad, torch.zeros_like(ref)).max().item()
            cols = sorted({int(c) for c in bad.nonzero()[:, 1].tolist()})[:12]
            print(f"{case_id} | {label} | call {rep}: non-finite {int(bad.sum())}/{y.numel()} cols {cols} "
                  f"max|err| finite {err:.4g}")


if __name__ == "__main__":
    registry.load_all(["conformance.adapters.gemlite"])
    for cid in sys.argv[1:]:
        probe(cid)
