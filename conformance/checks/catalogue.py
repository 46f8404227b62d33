"""The shipped-bug catalogue: every pinned regression of docs/shipped-bugs.md as data, for every kernel.

An `Entry` is one bug that reached users upstream: its key, a one-line description, the upstream issue(s), the
pinned case(s) and a trap guard. A pinned case is kernel-independent: the family, the layer config and shape,
the data regime, the tier and the seed, written as the body of a case id (`M=5,N=32,...,seed=11`);
`Entry.case(kernel)` makes it a Case for any kernel. The trap guard `trap(case) -> str | None` proves that the
case's data really contains the trap (None), or says what is missing: a zero point of 0 below the top nibble, N/8
== G with asymmetric packed zeros, a g_idx that is not k // group_size... A change to the generators therefore
cannot quietly empty a regression.

The suite (conformance/suite/test_catalogue.py) runs every entry against every registered kernel of its family,
plugins included, on `catalogue_target` (the run target if the kernel's gate accepts the case there, else a
simulated target whose gate accepts it, as the suite does), and skips with the gate's own refusal otherwise.

    ENTRIES: tuple[Entry, ...]; entry(key) -> Entry; catalogue_target(kernel, case, target) -> (Target, refusal)
    run_entry(entry, kernel, target, record=True) -> EntryResult  (verdicts per pinned case)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from conformance.cases.ids import Case, parse_case_id
from conformance.core import registry
from conformance.core.dtypes import torch_dtype
from conformance.core.targets import Target, detect_target, parse_target


@dataclass(frozen=True)
class Entry:
    """One shipped bug: `cases` are case-id bodies without family and kernel (every key, regime, tier, seed)."""

    key: str
    bug: str
    upstream: tuple[str, ...]
    family: str
    cases: tuple[str, ...]
    trap: Callable[[Case], str | None]

    def case(self, i: int, kernel: str) -> Case:
        """Pinned case `i` for `kernel` (a registered name; the id grammar only needs a valid name)."""
        return parse_case_id(f"{self.family}/{kernel}/{self.cases[i]}")

    def all_cases(self, kernel: str) -> list[Case]:
        return [self.case(i, kernel) for i in range(len(self.cases))]


# ---- the data of a pinned w4a16 case, exactly as the family's run builds it ------------------------------------

def weight(case: Case):
    """The canonical weight the w4a16 family's `run` builds for `case` (same generator, same seed)."""
    from references.generators import random_canonical

    return random_canonical(case.K, case.N, case.group_size, case.weight_type, torch_dtype(case.dtype),
                            case.regime, case.seed, act_order=case.act_order)


def checkpoint(case: Case):
    """The checkpoint the family's `run` hands to `kernel.load` (GPTQ v1 with the int32 borrow)."""
    from references import codecs

    policy = {"v1_zero_policy": "borrow"} if case.format == "gptq_v1" else {}
    return codecs.encode(weight(case), case.format, **policy)


def _zero_tensor(ckpt) -> torch.Tensor | None:
    return ckpt.tensors.get("qzeros", ckpt.tensors.get("weight_zero_point"))


# ---- trap guards: None when the case's data contains the trap, else what is missing --------------------------

def trap_square_packed_zeros(case: Case) -> str | None:
    """Zero points stored packed with N/8 == G, and the packed tensor is not symmetric: its transpose has the
    same shape (nothing asserts) but different words, so transposing it, or failing to, gives wrong numbers."""
    if case.weight_type != "uint4":
        return f"weight_type={case.weight_type}: no zero points are used"
    z = _zero_tensor(checkpoint(case))
    if z is None:
        return "the checkpoint stores no zero points"
    if z.shape[0] != z.shape[1]:
        return f"packed zero points {tuple(z.shape)} are not square (N/8 != G): a wrong transpose fails on shape"
    if torch.equal(z, z.t()):
        return "the packed zero points equal their transpose: a wrong transpose changes nothing"
    return None


def _read_with(ckpt, version: str) -> torch.Tensor:
    from references.codecs import awq, gptq

    z = _zero_tensor(ckpt)
    return awq.unpack_qzeros(z) if ckpt.format == "awq" else gptq.unpack_qzeros(z, version)


def trap_v1_convention(case: Case) -> str | None:
    """The checkpoint carries qzeros, and reading them with the other GPTQ convention (v1 "+1" or not) gives
    zero points other than those the kernel must use (the stored zeros for uint4, the type's bias for uint4b8)."""
    if not case.format.startswith("gptq_"):
        return f"format={case.format}: no GPTQ convention"
    ckpt = checkpoint(case)
    if _zero_tensor(ckpt) is None:
        return "the checkpoint carries no qzeros"
    w = weight(case)
    truth = w.zeros if w.zeros is not None else torch.full((w.G, w.N), w.wtype.bias, dtype=torch.int32)
    other = "v2" if case.format == "gptq_v1" else "v1"
    if torch.equal(_read_with(ckpt, other).to(torch.int32), truth.to(torch.int32)):
        return f"reading the qzeros as {other} gives the right zero points: the convention cannot matter"
    return None


def trap_symmetric_qzeros(case: Case) -> str | None:
    """A symmetric (biased) weight type whose checkpoint still carries a qzeros tensor, with stored values whose
    use (with or without a v1 "+1") differs from the bias for at least one reading."""
    w = weight(case)
    if w.zeros is not None or not w.wtype.has_bias():
        return f"weight_type={case.weight_type} is not symmetric"
    ckpt = checkpoint(case)
    if _zero_tensor(ckpt) is None:
        return "the checkpoint carries no qzeros"
    return None


def trap_v1_borrow(case: Case) -> str | None:
    """GPTQ v1 with a zero point of 0 below the top nibble: the stored int32 word borrowed from its neighbour,
    so a nibble-by-nibble "+1" reading differs from the true zero points."""
    from references.codecs import gptq

    if case.format != "gptq_v1" or case.weight_type != "uint4":
        return f"format={case.format}, weight_type={case.weight_type}: not asymmetric gptq_v1"
    w = weight(case)
    at = torch.nonzero(w.zeros == 0)
    if not len(at):
        return "no zero point is 0"
    if not bool(((at[:, 1] % 8) < 7).any()):
        return "every z = 0 sits in the top nibble (no borrow from a neighbour)"
    naive = gptq.unpack_qzeros(checkpoint(case).tensors["qzeros"], "v2") + 1  # nibble by nibble
    if torch.equal(naive, w.zeros):
        return "the naive per-nibble reading gives the right zero points"
    return None


def trap_act_order(case: Case) -> str | None:
    """act-order with a g_idx that is not k // group_size: dropping it changes which group each row uses."""
    w = weight(case)
    if w.g_idx is None or torch.equal(w.g_idx.long(), torch.arange(case.K) // w.gs):
        return "g_idx is trivial (k // group_size): ignoring it changes nothing"
    return None


def trap_groups_straddled(case: Case) -> str | None:
    """K spans several groups of at most 64 rows (narrower than the usual BLOCK_K 64/128), and adjacent groups
    differ in a scale, so a K tile that straddles two groups and uses the first one's scale is wrong."""
    if case.group_size <= 0 or case.group_size > 64 or case.K < 2 * case.group_size:
        return f"group_size={case.group_size}, K={case.K}: no tile of 64/128 rows straddles two groups"
    w = weight(case)
    if torch.equal(w.scales[1:], w.scales[:-1]):
        return "every group has the same scales: a straddling tile would be right by accident"
    return None


def trap_scales_below_fp16(case: Case) -> str | None:
    """bf16 scales that fp16 cannot hold (below its smallest subnormal, 2^-24)."""
    if case.dtype != "bfloat16":
        return f"dtype={case.dtype}: not bf16"
    if float(weight(case).scales.float().abs().min()) >= 2.0 ** -24:
        return "every scale is representable in fp16"
    return None


def trap_asymmetric(case: Case) -> str | None:
    """An asymmetric uint4 layer whose zero points vary (not the bias 8 everywhere)."""
    w = weight(case)
    if w.zeros is None:
        return f"weight_type={case.weight_type}: symmetric"
    if bool((w.zeros == 8).all()):
        return "every zero point is 8: the symmetric kernel path would be right by accident"
    return None


def trap_split_k_column_tail(case: Case) -> str | None:
    """A bf16 call in the split-K range of M (5..63) whose N leaves a column tail against 32-wide tiles: where
    GemLite 0.6's autotuned split-K config wrote NaN into whole output columns."""
    if case.dtype != "bfloat16":
        return f"dtype={case.dtype}: not bf16"
    if not 5 <= case.M < 64:
        return f"M={case.M}: outside the split-K range 5..63"
    if case.N % 32 == 0:
        return f"N={case.N}: a multiple of 32, no column tail"
    return None


def trap_all_zero_group(case: Case) -> str | None:
    """An fp8 case whose x has a group that is all zero (amax 0): a scale amax / fp8_max with no eps floor is 0
    there, and x / s = 0 / 0 is NaN."""
    from conformance.families.fp8_inputs import fp8_activations

    x = fp8_activations(case.tokens, case.hidden, case.dtype, case.regime, case.seed, case.group_size,
                        case.fp8_dtype)
    if not bool((x.float().reshape(case.tokens, -1, case.group_size).abs().amax(-1) == 0).any()):
        return "no group of x is all zero"
    return None


def trap_tile_rules(case: Case) -> str | None:
    """A w4a16 case whose group (all of K when channelwise) is below 16 rows or not a power of two: a wrapper that
    clamps BLOCK_K to the group launches a K tile that breaks one of Triton's tile rules (`tl.dot` needs at least
    16, `tl.arange` a power of two)."""
    g = case.K if case.group_size == -1 else case.group_size
    if g >= 16 and g & (g - 1) == 0:
        return f"group of {g} rows: a power of two >= 16, so a K tile clamped to it obeys Triton's tile rules"
    return None


ENTRIES: tuple[Entry, ...] = (
    Entry("ct_zero_points_transposed",
          "compressed-tensors zero points [N/8, G] used without the transpose to [G, N/8]",
          ("vllm#33200", "vllm#48998"), "w4a16",
          ("M=5,N=32,K=128,g=32,wt=uint4,ao=0,dt=fp16,fmt=compressed_tensors,regime=exact,tier=exact,seed=11",
           "M=17,N=16,K=256,g=128,wt=uint4,ao=0,dt=fp16,fmt=compressed_tensors,regime=exact,tier=exact,seed=13",
           "M=5,N=24,K=96,g=32,wt=uint4,ao=0,dt=bf16,fmt=compressed_tensors,regime=exact,tier=exact,seed=14"),
          trap_square_packed_zeros),
    Entry("gptq_zero_points_not_transposed",
          "GPTQ/AWQ zero points (already [G, N/8]) transposed as if compressed-tensors",
          ("vllm#47159", "vllm#47770"), "w4a16",
          ("M=3,N=16,K=64,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=21",
           "M=7,N=24,K=96,g=32,wt=uint4,ao=0,dt=fp16,fmt=awq,regime=exact,tier=exact,seed=23",
           "M=5,N=32,K=256,g=64,wt=uint4,ao=0,dt=bf16,fmt=gptq_v1,regime=exact,tier=exact,seed=24"),
          trap_square_packed_zeros),
    Entry("symmetric_qzeros_ignored",
          "a symmetric (uint4b8) layer's qzeros fed to the kernel instead of the bias",
          ("vllm#21066", "vllm#20974", "vllm#20986", "vllm#47770", "vllm#52637"), "w4a16",
          ("M=6,N=48,K=192,g=64,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=61",
           "M=6,N=48,K=192,g=64,wt=uint4b8,ao=0,dt=bf16,fmt=awq,regime=exact,tier=exact,seed=62"),
          trap_symmetric_qzeros),
    Entry("v1_offset_follows_convention",
          'GPTQ v1 "+1" decided from "has zero points" instead of the checkpoint convention and weight type',
          ("AutoGPTQ#325", "AutoGPTQ#640"), "w4a16",
          ("M=5,N=32,K=256,g=64,wt=uint4,ao=0,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=31",
           "M=5,N=32,K=256,g=64,wt=uint4b8,ao=0,dt=bf16,fmt=gptq_v1,regime=exact,tier=exact,seed=32",
           "M=5,N=32,K=256,g=64,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=33"),
          trap_v1_convention),
    Entry("v2_not_read_as_v1",
          "a GPTQ v2 checkpoint read as v1 (every weight one scale step off)",
          ("vllm#26343", "vllm#26092", "vllm#38966"), "w4a16",
          ("M=9,N=40,K=256,g=128,wt=uint4,ao=0,dt=bf16,fmt=gptq_v2,regime=exact,tier=exact,seed=41",
           "M=9,N=40,K=256,g=128,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=42"),
          trap_v1_convention),
    Entry("v1_zero_point_zero_borrow",
          "GPTQ v1 with a zero point of 0: the int32 borrow read nibble by nibble",
          ("AutoGPTQ#640", "GPTQModel#2350", "TGI#2120"), "w4a16",
          ("M=3,N=64,K=256,g=64,wt=uint4,ao=0,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=51",
           "M=33,N=64,K=256,g=32,wt=uint4,ao=1,dt=bf16,fmt=gptq_v1,regime=exact,tier=exact,seed=52"),
          trap_v1_borrow),
    Entry("act_order_applied",
          "act-order (g_idx) accepted but ignored",
          (), "w4a16",
          ("M=5,N=32,K=256,g=32,wt=uint4,ao=1,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=101",
           "M=5,N=32,K=256,g=64,wt=uint4b8,ao=1,dt=bf16,fmt=compressed_tensors,regime=exact,tier=exact,seed=102",
           "M=5,N=32,K=256,g=32,wt=uint4b8,ao=1,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=103"),
          trap_act_order),
    Entry("block_k_within_group",
          "BLOCK_K larger than the group size: a K tile straddles two groups and uses one group's scale",
          ("vllm#39705",), "w4a16",
          ("M=3,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=91",
           "M=33,N=64,K=256,g=32,wt=uint4b8,ao=0,dt=bf16,fmt=gptq_v2,regime=exact,tier=exact,seed=92",
           "M=40,N=16,K=512,g=64,wt=uint4,ao=1,dt=fp16,fmt=compressed_tensors,regime=exact,tier=exact,seed=93"),
          trap_groups_straddled),
    Entry("bf16_dequantized_in_bf16",
          "bf16 layers dequantized through fp16 (scales outside fp16's range are lost; statistical tier: "
          "exact-tier scales fit both types)",
          (), "w4a16",
          ("M=5,N=64,K=256,g=64,wt=uint4b8,ao=0,dt=bf16,fmt=gptq_v2,regime=extreme_scales,tier=statistical,seed=0",),
          trap_scales_below_fp16),
    Entry("split_k_bf16_column_tail",
          "third-party, found by this suite: GemLite 0.6.0.post2 A16W4 (autotune 'fast') returns NaN in whole output "
          "columns at M=9, N=40, K=256, g=128, uint4, bf16 (benchmarks/results/h200/suite_and_gemlite.json)",
          ("gemlite 0.6.0.post2",), "w4a16",
          ("M=9,N=40,K=256,g=128,wt=uint4,ao=0,dt=bf16,fmt=gptq_v2,regime=exact,tier=exact,seed=41",),
          trap_split_k_column_tail),
    Entry("fp8_zero_group_no_eps",
          "third-party, found by this suite: torchao 0.18.0 fp8_blockwise_act_quant forms the group scale as "
          "amax / 448 with no eps, so an all-zero group gets scale 0 and q = 0 / 0 = NaN (docs/shipped-bugs.md)",
          ("torchao 0.18.0", "kernels-community#681"), "fp8_group_quant",
          ("T=1,H=128,g=128,dt=bf16,f8=e4m3fn,ue8m0=0,colmajor=0,regime=all_zero_groups,tier=statistical,seed=0",
           "T=1,H=128,g=128,dt=bf16,f8=e4m3fn,ue8m0=0,colmajor=1,regime=all_zero_groups,tier=statistical,seed=0",
           "T=3,H=256,g=128,dt=fp16,f8=e4m3fn,ue8m0=0,colmajor=0,regime=all_zero_groups,tier=exact,seed=1"),
          trap_all_zero_group),
    Entry("uint4_fallback_exact",
          "an asymmetric uint4 checkpoint on the kernel it falls back to (gfx1100 serves RDNA3 uint4b8 only)",
          ("vllm#46186",), "w4a16",
          ("M=7,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,fmt=awq,regime=exact,tier=exact,seed=81",),
          trap_asymmetric),
    Entry("block_k_tile_rules",
          "third-party, found by this suite: vLLM 0.33.0 TritonW4A16 clamps BLOCK_K to the group size without "
          "Triton's tile rules: K = 8 channelwise launches tl.dot with K 8 (sm90, does not compile) and g = K = 40 "
          "tl.arange(0, 40) (gfx1x); a compile error of a config the gate accepted (docs/shipped-bugs.md)",
          ("vllm 0.33.0",), "w4a16",
          ("M=1,N=64,K=8,g=ch,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=8180",
           "M=33,N=64,K=8,g=ch,wt=uint4,ao=0,dt=bf16,fmt=gptq_v2,regime=exact,tier=exact,seed=8181",
           "M=1,N=8,K=40,g=40,wt=uint4b8,ao=0,dt=fp16,fmt=compressed_tensors,regime=exact,tier=exact,seed=11"),
          trap_tile_rules),
)


# The smallest channelwise K a w4a16 kernel accepts (conformance/suite/test_regressions.py runs these on every kernel;
# the compile lane compiles what they launch): tl.dot needs K >= 16 on a GPU, so a wrapper that shrinks its K tile to
# 8 compiles in the interpreter and fails on the device. M values take each path of a tile table.
SMALL_K = (8, 16)
SMALL_K_MS = (1, 17, 33, 65, 257)
SMALL_K_TYPES = (("uint4b8", "float16"), ("uint4", "bfloat16"), ("uint4b8", "bfloat16"), ("uint4", "float16"))


def small_k_cases(kernel: str, K: int) -> list[Case]:
    """The channelwise K = `K` regression cases of `kernel` (exact tier, N = 64, one per SMALL_K_MS row)."""
    out = []
    for i, M in enumerate(SMALL_K_MS):
        wt, dt = SMALL_K_TYPES[i % len(SMALL_K_TYPES)]
        out.append(Case(family="w4a16", kernel=kernel, regime="exact", tier="exact", seed=8100 + 10 * K + i,
                        group_size=-1, dtype=dt, M=M, N=64, K=K, weight_type=wt, act_order=False, format="gptq_v2"))
    return out


def entry(key: str) -> Entry:
    for e in ENTRIES:
        if e.key == key:
            return e
    raise KeyError(f"no catalogue entry {key!r}; entries: {[e.key for e in ENTRIES]}")


def _kernel(kernel) -> registry.Kernel:
    return registry.get_kernel(kernel) if isinstance(kernel, str) else kernel


def catalogue_target(kernel, case: Case, target: Target | str | None = None) -> tuple[Target | None, str | None]:
    """(target, None): where `kernel` runs `case`: `target` (default this machine's) when its gate accepts the case
    there; else, when `target` is this machine's own (nothing simulated was asked for), the first simulation
    target (`strategies.SIMULATION_TARGETS`) whose gate accepts it. (None, refusal): the gate's reason on `target`
    (and on each simulation target tried) when none accepts."""
    from conformance.cases.strategies import SIMULATION_TARGETS

    k = _kernel(kernel)
    t = detect_target() if target is None else (parse_target(target) if isinstance(target, str) else target)
    config = case.config()
    why = k.can_implement(config, t)
    if why is None:
        return t, None
    reasons = [f"on {t}: {why}"]
    if t == detect_target():
        for name in SIMULATION_TARGETS:
            sim = parse_target(name)
            if sim == t:
                continue
            sim_why = k.can_implement(config, sim)
            if sim_why is None:
                return sim, None
            reasons.append(f"on {sim}: {sim_why}")
    return None, f"gate of {k.name} refuses {case.id}: " + "; ".join(reasons)


@dataclass
class EntryResult:
    """The verdicts of one entry's pinned cases on one kernel (`refused`: case id -> the gate's reason)."""

    entry: Entry
    kernel: str
    verdicts: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)

    @property
    def bad(self) -> list:
        return [v for v in self.verdicts if v.outcome in ("fail", "error")]

    @property
    def ran(self) -> list:
        return [v for v in self.verdicts if v.outcome != "skip"]


def run_entry(e: Entry, kernel, target=None, *, record: bool = True) -> EntryResult:
    """Run every pinned case of `e` on `kernel` (through the harness, on catalogue_target); gate-refused cases go
    to `refused` with the gate's reason. Verdicts are the harness's (pass, fail, error, skip)."""
    from conformance.checks.harness import run_case

    k = _kernel(kernel)
    res = EntryResult(e, k.name)
    if k.family != e.family:
        res.refused["*"] = f"kernel {k.name} is of family {k.family}, the entry of {e.family}"
        return res
    for case in e.all_cases(k.name):
        t, why = catalogue_target(k, case, target)
        if t is None:
            res.refused[case.id] = why
            continue
        res.verdicts.append(run_case(case, k, t, record=record))
    return res


__all__ = ["Entry", "ENTRIES", "entry", "catalogue_target", "run_entry", "EntryResult", "weight", "checkpoint"]
