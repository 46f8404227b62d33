"""benchmarks/probes/ptx_regs.py compiles the GEMM for sm90 with no GPU and reads ptxas's register report."""
import json
import os
import sys
from pathlib import Path

import pytest

from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]


def _run(*args):
    # TRITON_INTERPRET=0 in its environment, as the probe sets it for itself: the warm interpreter that serves it then
    # imported Triton in that mode too (tests/warm_python.py keys its interpreters by it)
    return warm_python.run([sys.executable, str(ROOT / "benchmarks" / "probes" / "ptx_regs.py"), *args], cwd=ROOT,
                          env=dict(os.environ, TRITON_INTERPRET="0"), capture_output=True, text=True, timeout=300)


def test_decode_tile_compiles_to_wgmma_with_its_register_count():
    p = _run("16,256,64,8,3,packed,swap,magic", "1,64,64,4,1,packed,gemv")
    assert p.returncode == 0, p.stderr[-2000:]
    dot, gemv = (json.loads(line) for line in p.stdout.splitlines() if line.startswith("{"))
    assert dot["arch"] == "sm90" and 0 < dot["registers"] <= 255 and dot["spill_store_bytes"] == 0
    assert dot["ptx"]["wgmma"] > 0 and gemv["ptx"]["wgmma"] == 0  # swap_ab uses tensor cores, the GEMV path FMAs
    assert dot["programs_per_sm_by_registers"] == 65536 // (dot["registers"] * 256)


@pytest.mark.parametrize("tile", ["16,256,64", "16,256,64,8,3,swapab"])
def test_bad_tile_is_refused_with_the_allowed_form(tile):
    p = _run(tile)
    assert p.returncode != 0 and f"TILE={tile!r}" in p.stderr and "block_m,block_n,block_k" in p.stderr
