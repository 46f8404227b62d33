"""Every row of triton_w4a16's tile table for this device runs through the harness (triton_w4a16, and
triton_w4a16_actorder on act-order weights: one GEMM, one table), for both weight types and both act dtypes,
in the exact and the statistical tier.

The table picks the kernel path by M (GEMV, magic swap_ab dot, dequant_mm, ...), and the suite's hypothesis
draws (M <= 40 in the CI profile) reach only some rows; a tuned table that routes M=256 to a broken path
would pass the rest of the suite. On CPU this checks the interpreter table at small shapes; on a GPU the
table in use there (the measured sm90 one on an H200) at N = K = 512 (both tiers). Each case also
asserts that the launch really took that row's path.
"""
from __future__ import annotations

import importlib

import pytest
import torch

from conformance.cases.ids import Case
from conformance.checks.harness import run_case
from conformance.core import registry
from conformance.core.runtime import kernel_device
from conformance.core.targets import detect_target
from references.generators import exact_tier_max_k

registry.load_all()
tw = importlib.import_module("conformance_kernels.triton_w4a16")

GROUP = 128
GPU_SIZE = 512  # N = K of the rows on a GPU, and the catch-all row's largest M (see _table)
PATH_FIELDS = ("use_dot", "swap_ab", "magic", "dequant_mm", "packed_load", "planar")
PLANAR_KERNELS = ("triton_w4a16",)  # its load step also builds the planar operand, so its planar rows come first


def _table(planar: bool):
    """(table kind, rows, N, K) for the device the kernel runs on here; `planar`: the rows a call passing the planar
    operand takes (the kind's planar rows, then the main rows above them)."""
    dev = kernel_device()
    if dev == "cpu":
        kind, N, K = "interpreter", 128, 256  # 2 groups of 128, 2 K tiles: every path, at interpreter cost
    else:
        # 512: every row's tiles run full-size, with at least two blocks along N and along K (the largest tiles are
        # 256 x 128; test_shape_spans_several_tiles checks it). The weights, codecs and fp64 references on the host
        # are what an item costs: at 2048 ~6 s on an H200 worker, at 1024 the 52 items were 77 of the warm suite's
        # 141 busy worker-seconds on an H100 (benchmarks/results/h100/gpu_ci.json at 70e845c). Against 1024, every
        # row takes the same path with the same tiles on sm90; only the automatic split-K count halves (16 -> 8,
        # 8 -> 4), still several splits
        kind, N, K = tw.gpu_tile_kind(torch.device(dev)), GPU_SIZE, GPU_SIZE
    return kind, effective_rows(tw.TILE_TABLE[kind], tw.PLANAR_TABLE.get(kind, []) if planar else []), N, K


def effective_rows(main, planar) -> list:
    """The (max_m, row) list a launch walks (kernels.triton_w4a16.table_tiles): planar rows first, then the main
    rows that still own some M above the last planar row."""
    if not planar:
        return list(main)
    top = planar[-1][0]
    return list(planar) + [(m, c) for m, c in main if m is None or m > top]


def row_ms(rows, big: int) -> list[tuple[int, object]]:
    """(M, row) pairs: each row at its largest M; the catch-all just past the previous row and at `big`."""
    out, prev = [], 0
    for max_m, cfg in rows:
        if max_m is not None:
            out.append((max_m, cfg))
            prev = max_m
        else:
            out += [(m, cfg) for m in sorted({prev + 1, max(prev + 1, big)})]
    return out


def test_effective_rows_put_planar_rows_first():
    main = [(1, "g"), (16, "s"), (64, "d"), (None, "c")]
    assert effective_rows(main, [(16, "p16"), (32, "p32")]) == [(16, "p16"), (32, "p32"), (64, "d"), (None, "c")]
    assert effective_rows(main, []) == main


def test_row_ms_covers_each_row_and_both_ends_of_the_catch_all():
    rows = [(1, "a"), (16, "b"), (None, "c")]
    assert row_ms(rows, 1024) == [(1, "a"), (16, "b"), (17, "c"), (1024, "c")]
    assert row_ms([(None, "c")], 8) == [(1, "c"), (8, "c")]


KERNELS = ("triton_w4a16", "triton_w4a16_actorder")  # one GEMM, one table


@pytest.mark.parametrize("planar", [False, True])
def test_shape_spans_several_tiles(planar):
    """On a GPU the rows run full-size and tiled: N and K hold at least two of every row's largest N and K blocks."""
    kind, rows, N, K = _table(planar)
    if kind == "interpreter":
        pytest.skip("the interpreter's shape is sized for its cost (fit_tiles shrinks the blocks to it)")
    assert N >= 2 * max(cfg.block_n for _, cfg in rows) and K >= 2 * max(cfg.block_k for _, cfg in rows), (N, K)


def _row_cases(kernel_name: str) -> tuple:
    """(table kind, N, K, [(M, row), ...]) for `kernel_name` on the device the kernel runs on here."""
    kind, rows, N, K = _table(kernel_name in PLANAR_KERNELS)
    return kind, N, K, row_ms(rows, 64 if kind == "interpreter" else GPU_SIZE)


def row_cases(kernel_name: str, row: int, wtype: str, dtype: str) -> list:
    """The Cases one item runs: the row's M at this device's N and K, in the exact and the statistical tier."""
    kind, N, K, cases = ROWS[kernel_name]
    M, _ = cases[row]
    k_exact = min(K, exact_tier_max_k(wtype) // GROUP * GROUP)
    act_order = kernel_name == "triton_w4a16_actorder"
    return [Case("w4a16", kernel_name, regime, tier, 7000 + row, GROUP, dtype, M=M, N=N, K=kk, weight_type=wtype,
                 act_order=act_order, format="gptq_v2")
            for tier, regime, kk in (("exact", "exact", k_exact), ("statistical", "normal", K))]


# one test item per (kernel, row, weight type, act dtype): on a GPU a row costs about a second at N = K = 512 (weights
# and fp64 references on the host), so the rows spread over the xdist workers instead of one worker running a whole
# table; each item declares its cases (conformance_cases), so a GPU run's prewarm compiles the rows' programs with
# the others before any test instead of in the rows' first launches
ROWS = {name: _row_cases(name) for name in KERNELS}
ROW_PARAMS = [pytest.param(name, i, wtype, dtype, id=f"{name}-row{i}-M{M}-{wtype}-{dtype}",
                           marks=pytest.mark.conformance_cases(*row_cases(name, i, wtype, dtype)))
              for name in KERNELS for i, (M, _) in enumerate(ROWS[name][3])
              for wtype in ("uint4b8", "uint4") for dtype in ("float16", "bfloat16")]


@pytest.mark.parametrize("kernel_name,row,wtype,dtype", ROW_PARAMS)
def test_every_tile_row_passes_on_this_device(kernel_name, row, wtype, dtype):
    kind, _, _, cases = ROWS[kernel_name]
    target = detect_target()
    k = registry.get_kernel(kernel_name)
    _, cfg = cases[row]
    failures = []
    for case in row_cases(kernel_name, row, wtype, dtype):
        tw._LAST_LAUNCH.clear()
        v = run_case(case, k, target)
        launched = tw.last_launch_config()
        if not v.passed:
            failures.append(v.line())
        elif {f: launched.get(f) for f in PATH_FIELDS} != {f: getattr(cfg, f) for f in PATH_FIELDS}:
            failures.append(f"{case.id}: launched {launched} instead of the {kind} row {cfg}")
    assert not failures, "\n".join(failures)
