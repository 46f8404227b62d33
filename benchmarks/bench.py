"""GPU benchmark machinery: the roofline bytes model, an SM copy kernel for the copy bandwidth, CUDA-graph
and eager timing over rotating buffers, the dense baseline, and the correctness gate run before timing.

Timing method (see benchmarks/README.md):
- Graph time: the calls are captured in one CUDA graph and replayed; each replay is bracketed by CUDA
  events; the figure is the median replay time over the calls in it. Launch overhead is excluded.
- Eager time: the same calls launched from Python back to back between two events; includes the
  launch overhead (CPU-side Python and driver), so eager - graph shows what a graph saves.
- L2: no flush. H200's L2 (60 MB) holds a whole 4096x4096 int4 weight, so repeated calls on one buffer
  would time the cache. Instead each graph cycles through `n_sets` copies of the operands whose total
  is >= L2_ROTATION_FACTOR x L2, as decoding does (each layer's weight is read once per token).
  A flush kernel between calls (do_bench's choice) would put its own time into the graph.
- Copy bandwidth: a Triton copy kernel launched eagerly (an SM copy; a copy captured in a graph becomes a
  copy-engine transfer and reads ~35% lower), bytes read + written over the median time.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from references.errors import InvalidInput, require

EXIT_NO_GPU = 3  # `python -m conformance bench` on a machine without a GPU
L2_ROTATION_FACTOR = 3
MIN_CALLS_PER_GRAPH = 8  # amortizes the graph launch and the first-kernel gap inside one replay
TIME_BUDGET_S = 0.25  # per timing: slow calls get fewer repetitions (at least MIN_REPS)
MIN_REPS = 5
MAX_SETS = 32
MAX_ROTATION_BYTES = 8 << 30
W4A16_GROUP = 128
FP8_GROUP = 128

# Layer shapes (N outputs x K inputs) of common models, unsharded. "issue" are the shapes of the issue.
NAMED_SHAPES = {
    "issue": [(4096, 4096, "4096x4096"), (14336, 4096, "gate/up 14336x4096"), (4096, 14336, "down 4096x14336")],
    "llama2-7b": [(12288, 4096, "qkv"), (4096, 4096, "o"), (22016, 4096, "gate_up"), (4096, 11008, "down")],
    "llama3-8b": [(6144, 4096, "qkv"), (4096, 4096, "o"), (28672, 4096, "gate_up"), (4096, 14336, "down")],
    "llama3-70b": [(10240, 8192, "qkv"), (8192, 8192, "o"), (57344, 8192, "gate_up"), (8192, 28672, "down")],
}
DECODE_MS = (1, 2, 4, 8, 16, 32, 64)
PREFILL_MS = (128, 256, 512, 1024, 2048, 4096)
M_SETS = {"decode": DECODE_MS, "prefill": PREFILL_MS, "all": DECODE_MS + PREFILL_MS,
          "quick": (1, 16, 256, 4096)}
FP8_TOKENS = (1, 16, 128, 1024, 4096, 8192)
FP8_HIDDEN = 7168


class NoGPU(RuntimeError):
    """Raised where a measurement needs a GPU and this process has none."""


def no_gpu_reason() -> str | None:
    """Why nothing can be measured here (None when a CUDA/ROCm device is visible)."""
    if not torch.cuda.is_available():
        return ("no GPU: bench needs a CUDA or ROCm device and torch.cuda.is_available() is False here "
                f"(torch {torch.__version__}); nothing was measured")
    return None


# ------------------------------------------------------------------------------------------------
# Problems and the roofline model
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """A layer: N outputs, K inputs; `label` names it in tables; `ms` overrides the M list (MxNxK)."""

    N: int
    K: int
    label: str = ""
    ms: tuple = ()

    @property
    def name(self) -> str:
        return f"{self.N}x{self.K}"


def _int(text: str, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise InvalidInput(what, text, "a positive integer") from None
    require(v > 0, what, v, "a positive integer")
    return v


def parse_shapes(text: str) -> list[Shape]:
    """Comma-separated set names (NAMED_SHAPES), NxK layers, or MxNxK problems; duplicates dropped."""
    out: list[Shape] = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        if item in NAMED_SHAPES:
            out += [Shape(n, k, f"{item} {label}") for n, k, label in NAMED_SHAPES[item]]
            continue
        parts = item.lower().split("x")
        if len(parts) == 2:
            out.append(Shape(_int(parts[0], "--shapes N"), _int(parts[1], "--shapes K"), item))
        elif len(parts) == 3:
            m, n, k = (_int(p, f"--shapes {w}") for p, w in zip(parts, "MNK"))
            out.append(Shape(n, k, item, (m,)))
        else:
            raise InvalidInput("--shapes", item, f"a set name {sorted(NAMED_SHAPES)}, NxK or MxNxK")
    require(out, "--shapes", text, f"at least one of {sorted(NAMED_SHAPES)}, NxK or MxNxK")
    seen, uniq = set(), []
    for s in out:
        if (s.N, s.K, s.ms) not in seen:
            seen.add((s.N, s.K, s.ms))
            uniq.append(s)
    return uniq


def parse_ms(text: str) -> tuple[int, ...]:
    """Comma-separated M values or set names (decode 1..64, prefill 128..4096, all, quick), sorted."""
    ms: set[int] = set()
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        if item in M_SETS:
            ms.update(M_SETS[item])
        else:
            ms.add(_int(item, "--m"))
    require(ms, "--m", text, f"M values or sets {sorted(M_SETS)}")
    return tuple(sorted(ms))


def w4a16_bytes(M: int, N: int, K: int, group_size: int = W4A16_GROUP, has_zeros: bool = False,
                act_bytes: int = 2) -> int:
    """Fewest bytes a W4A16 GEMM moves: int4 weight K*N/2, scales G*N*2, zeros G*N/2, x M*K*2, y M*N*2."""
    G = K // (K if group_size == -1 else group_size)
    return K * N // 2 + G * N * act_bytes + (G * N // 2 if has_zeros else 0) + M * K * act_bytes + M * N * act_bytes


def dense_bytes(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """Fewest bytes of a dense GEMM: the K*N weight, x and y, each once."""
    return (K * N + M * K + M * N) * act_bytes


def fp8_quant_bytes(tokens: int, hidden: int, group_size: int = FP8_GROUP, in_bytes: int = 2) -> int:
    """Fewest bytes of per-token-group fp8 quant: x read, q written (1 byte), fp32 scales written."""
    return tokens * hidden * (in_bytes + 1) + tokens * (hidden // group_size) * 4


def roofline_us(nbytes: int, flops: float, copy_gbps: float, peak_tflops: float | None = None) -> float:
    """The floor in microseconds: bytes over the copy bandwidth, or flops over the matrix rate if larger."""
    require(copy_gbps > 0, "copy_gbps", copy_gbps, "a positive bandwidth in GB/s")
    t = nbytes / (copy_gbps * 1e3)  # GB/s = 1e3 bytes/us
    if peak_tflops:
        t = max(t, flops / (peak_tflops * 1e6))  # TFLOP/s = 1e6 flop/us
    return t


def rotation_sets(bytes_per_set: int, l2_bytes: int) -> int:
    """Operand copies to cycle through so one pass over them is >= L2_ROTATION_FACTOR x L2."""
    require(bytes_per_set > 0, "bytes_per_set", bytes_per_set, "positive")
    n = math.ceil(L2_ROTATION_FACTOR * l2_bytes / bytes_per_set)
    n = min(n, MAX_SETS, max(1, MAX_ROTATION_BYTES // bytes_per_set))
    return max(1, n)


# ------------------------------------------------------------------------------------------------
# Timers
# ------------------------------------------------------------------------------------------------

@dataclass
class Timing:
    """Median microseconds per call, and the spread (min, max) over repetitions."""

    median_us: float
    min_us: float
    max_us: float
    calls: int
    reps: int

    def to_dict(self) -> dict:
        return {"median_us": round(self.median_us, 3), "min_us": round(self.min_us, 3),
                "max_us": round(self.max_us, 3), "calls_per_rep": self.calls, "reps": self.reps}


def _timing(ms_per_rep: list[float], calls: int) -> Timing:
    us = [t * 1e3 / calls for t in ms_per_rep]
    return Timing(statistics.median(us), min(us), max(us), calls, len(us))


class CudaTimer:
    """CUDA-graph replay and eager timing with CUDA events on the current stream; `budget_s` caps the timed
    repetitions of one timing (slow calls get fewer, never fewer than MIN_REPS)."""

    def __init__(self, replays: int = 50, eager_reps: int = 15, warmup: int = 3, budget_s: float = TIME_BUDGET_S):
        self.replays, self.eager_reps, self.warmup, self.budget_s = replays, eager_reps, warmup, budget_s

    def _reps(self, wanted: int, seconds_per_rep: float) -> int:
        """Fewer repetitions for slow calls (large M): at most ~budget_s per timing, never fewer than MIN_REPS."""
        if seconds_per_rep <= 0:
            return wanted
        return max(MIN_REPS, min(wanted, int(self.budget_s / seconds_per_rep)))

    @staticmethod
    def _cycle(calls: list[Callable]) -> list[Callable]:
        n = max(MIN_CALLS_PER_GRAPH, len(calls))
        return [calls[i % len(calls)] for i in range(n)]

    def graph(self, calls: list[Callable]) -> Timing:
        seq = self._cycle(calls)
        for f in calls:  # compile, autotune, allocate outside the capture
            f()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for f in seq:
                f()
        t0 = time.perf_counter()
        for _ in range(self.warmup):
            g.replay()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(self._reps(self.replays, (time.perf_counter() - t0) / self.warmup))]
        for s, e in ev:
            s.record()
            g.replay()
            e.record()
        torch.cuda.synchronize()
        t = _timing([s.elapsed_time(e) for s, e in ev], len(seq))
        del g
        return t

    def eager(self, calls: list[Callable]) -> Timing:
        seq = self._cycle(calls)
        t0 = time.perf_counter()
        for _ in range(self.warmup):
            for f in seq:
                f()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(self._reps(self.eager_reps, (time.perf_counter() - t0) / self.warmup))]
        for s, e in ev:
            s.record()
            for f in seq:
                f()
            e.record()
        torch.cuda.synchronize()
        return _timing([s.elapsed_time(e) for s, e in ev], len(seq))


def _copy_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _sm_copy(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)

    return _sm_copy


def copy_bandwidth_gbps(device="cuda", nbytes: int = 2 << 30, reps: int = 20) -> dict:
    """Device copy bandwidth through a Triton SM copy kernel (not a captured memcpy): bytes read +
    written over the median of `reps` eager launches. Also reports torch's copy_ for comparison."""
    kern = _copy_kernel()
    n = nbytes // 4
    src = torch.randn(n, device=device)  # random, not zeros
    dst = torch.empty_like(src)
    block = 8192
    grid = (math.ceil(n / block),)

    def run():
        kern[grid](src, dst, n, BLOCK=block, num_warps=8)

    run()
    torch.cuda.synchronize()
    require(torch.equal(src[-1000:], dst[-1000:]) and torch.equal(src[:1000], dst[:1000]),
            "sm copy kernel", "output differs from input", "an exact copy")
    t = CudaTimer(eager_reps=reps).eager([run])
    t_torch = CudaTimer(eager_reps=reps).eager([lambda: dst.copy_(src)])
    moved = 2 * n * 4
    return {"gbps": moved / (t.median_us * 1e3), "torch_copy_gbps": moved / (t_torch.median_us * 1e3),
            "bytes": moved, "median_us": round(t.median_us, 2)}


def matmul_peak_tflops(device="cuda", dtype=torch.float16, n: int = 8192) -> float:
    """Dense n^3 matmul rate on random data (the compute ceiling of the roofline)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    t = CudaTimer(eager_reps=10).eager([lambda: torch.matmul(a, b)])
    return 2 * n ** 3 / (t.median_us * 1e6)


# ------------------------------------------------------------------------------------------------
# Correctness gate (before any timing)
# ------------------------------------------------------------------------------------------------

@dataclass
class Gate:
    ok: bool
    detail: str
    metrics: dict = field(default_factory=dict)


def gptq_dequant_linear(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
                        zp_bias: int) -> torch.Tensor:
    """The compiled baseline as a user writes it in plain torch, on the layout that compiles best: GPTQ's qweight
    int32 [K/8, N] (8 consecutive K rows per word, low nibble first) unpacked with shifts and masks, (q - bias) * s
    per group in the act dtype, then F.linear. Symmetric types only (uint4b8: bias 8)."""
    K8, N = qweight.shape
    shifts = torch.arange(0, 32, 4, device=qweight.device, dtype=torch.int32).view(1, 8, 1)
    q = (qweight.unsqueeze(1) >> shifts) & 0xF  # [K/8, 8, N]
    w = (q.reshape(-1, group_size, N) - zp_bias).to(x.dtype) * scales.unsqueeze(1)  # [G, group, N]
    return torch.nn.functional.linear(x, w.reshape(K8 * 8, N).t())


def dense_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The dense baseline: F.linear with the act-dtype weight [N, K], as a model holds it."""
    return torch.nn.functional.linear(x, weight)


# Bench data is drawn on the device: the reference generator's fp64 round-to-nearest of a 57344 x 8192 weight
# takes tens of seconds on a CPU, and timing does not depend on the values. q is uniform over the stored range,
# scales uniform in [SCALE_LO, 2 * SCALE_LO) (never zero), x normal.
SCALE_LO = 0.004


def bench_weight(K: int, N: int, group_size: int, wtype: str, act: torch.dtype, seed: int, device):
    """A CanonicalWeight for the bench, drawn on `device` with a seeded generator (symmetric types)."""
    from references.scalar_types import scalar_type
    from references.weight import CanonicalWeight

    t = scalar_type(wtype)
    require(t.has_bias(), "weight_type", wtype, "a symmetric (biased) type such as uint4b8")
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randint(t.min, t.max + 1, (K, N), generator=gen, device=device, dtype=torch.int32)
    G = K // group_size
    s = (torch.rand((G, N), generator=gen, device=device) + 1) * SCALE_LO
    return CanonicalWeight(q, s.to(act), None, None, group_size, t)


def bench_activations(M: int, K: int, act: torch.dtype, seed: int, device) -> torch.Tensor:
    """x [M, K] ~ N(0, 1) in the act dtype, drawn on `device`."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn((M, K), generator=gen, device=device).to(act)


class PlainDequantDeclared:
    """Declared numerics of the plain-torch baselines (gptq_dequant_linear, compiled or not, and dense_linear on
    the dequantized weight) for the correctness gate: W rounded once into the act dtype; the act-dtype GEMM may
    reduce in the act dtype (torch's default allows it on CUDA), so the accumulation is declared in the act
    dtype: the gate is looser than for fp32-accumulating kernels."""

    def numerics(self, config, M=None):
        from conformance.core.dtypes import torch_dtype
        from conformance.core.kernel import Numerics

        act = torch_dtype(config.dtype)
        return Numerics(dequant_dtype=act, accumulation=(act, None, None))


def gate_w4a16(kernel, config, y: torch.Tensor, y_ref: torch.Tensor, S: torch.Tensor, R: torch.Tensor,
               K: int, act: torch.dtype) -> Gate:
    """The statistical tier: |y - y_ref| / tol <= 1 everywhere with the kernel's declared numerics."""
    from conformance.checks.tolerance import compare_statistical, error_model_for

    if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(y_ref.shape) or y.dtype != act:
        got = (tuple(y.shape), y.dtype) if isinstance(y, torch.Tensor) else type(y).__name__
        return Gate(False, f"output {got} is not {tuple(y_ref.shape)} {act}")
    cmp = compare_statistical(y.to(y_ref.device), y_ref, S, error_model_for(kernel, config, act, y_ref.shape[0]), K,
                              R=R)
    return Gate(cmp.ok, cmp.detail, {k: cmp.metrics[k] for k in ("max_ratio", "nmse")})


def gate_fp8(kernel, x: torch.Tensor, out, group_size: int, fp8_dtype: str, params=None) -> Gate:
    """The fp8 family's statistical-tier comparison (the suite's, not a copy): scales within 4 fp32 ulp of the
    reference under the kernel's zero-group policy, and every q within one fp8 step of x / s."""
    from conformance.core.dtypes import dtype_name
    from conformance.families import get_family

    fam = get_family(kernel.family)
    config = fam.config_type(group_size=group_size, dtype=dtype_name(x.dtype), fp8_dtype=fp8_dtype,
                             hidden=x.shape[-1])
    from conformance.checks import guard

    g = fam.grade(kernel, config, x, out, guard.call(kernel, "load", config) if params is None else params,
                  "statistical")
    return Gate(g.ok, g.detail, g.metrics)
