"""The shipped-bug catalogue (conformance/checks/catalogue.py) against every registered kernel, plugins included.

`test_shipped_bug[key-kernel]` runs every pinned case of one catalogue entry on one kernel of the entry's family
through the harness, on the run target when the kernel's gate accepts the case there, else on a simulated target
it accepts (catalogue.catalogue_target: how ROCm-only kernels are judged on any machine); an entry whose every case
the gate refuses skips with the gate's own reasons. A bug is caught only as a wrong answer or a kernel error of a
case the gate accepted: every such verdict fails the test with its replay line.

`test_trap_holds` checks each pinned case's trap guard on its data, with no kernel involved. The last two tests
are shipped-bug checks that need data no case id can name (a tampered checkpoint) or a gate refusal; they too run
for every registered w4a16 kernel.
"""
from __future__ import annotations

import pytest
import torch

from conformance.checks import catalogue, guard
from conformance.checks.execution import Execution
from conformance.checks.harness import _execution, replay_command, run_case
from conformance.core import results
from conformance.core.kernel import Kernel


def _keys(family: str) -> list[str]:
    return [e.key for e in catalogue.ENTRIES if e.family == family]


W4A16_KEYS = _keys("w4a16")
FP8_KEYS = _keys("fp8_group_quant")
PINNED = [(e.key, i) for e in catalogue.ENTRIES for i in range(len(e.cases))]


@pytest.mark.conformance_family("w4a16")
@pytest.mark.parametrize("key", W4A16_KEYS)
def test_shipped_bug(key, conformance_kernel, conformance_target, conformance_case):
    _shipped_bug(key, conformance_kernel, conformance_target, conformance_case)


@pytest.mark.conformance_family("fp8_group_quant")
@pytest.mark.parametrize("key", FP8_KEYS)
def test_shipped_fp8_bug(key, conformance_kernel, conformance_target, conformance_case):
    _shipped_bug(key, conformance_kernel, conformance_target, conformance_case)


def _shipped_bug(key, conformance_kernel, conformance_target, conformance_case):
    """Every pinned case of entry `key` on one kernel of its family (with --conformance-case: that case only)."""
    e = catalogue.entry(key)
    if conformance_case is not None:  # --conformance-case: only the entry that pins that case, only that case
        if conformance_case not in e.all_cases(conformance_case.kernel):
            pytest.skip(f"--conformance-case {conformance_case.id} is not a pinned case of {key}")
        v = run_case(conformance_case, conformance_kernel, conformance_target)
        if v.outcome == "skip":
            pytest.skip(v.detail)
        assert v.passed, v.line()
        return
    res = catalogue.run_entry(e, conformance_kernel, conformance_target)
    assert not res.bad, f"{key} ({e.bug}; {', '.join(e.upstream) or 'no upstream issue'}):\n" + "\n".join(
        v.line() for v in res.bad)
    if not res.ran:
        pytest.skip("; ".join([*res.refused.values(), *(v.detail for v in res.verdicts)]))


@pytest.mark.parametrize("key,i", PINNED, ids=[f"{k}-{i}" for k, i in PINNED])
def test_trap_holds(key, i):
    """The pinned case's data contains the trap its entry names (the guard returns None)."""
    e = catalogue.entry(key)
    case = e.case(i, "any_kernel")
    why = e.trap(case)
    assert why is None, f"{key}: pinned case {e.cases[i]} lacks the trap: {why}"


def _run_kernel(kernel, target, ckpt, x, case):
    """The kernel's output on CPU for x, run as the harness runs a case (apply here, or its model), through the guarded
    call path (conformance.checks.guard): a hang, a crash or an exception is an `error` record with the case's id
    and replay line (check `catalogue`), and the test fails at once."""
    mode, why = _execution(kernel, target, x.shape[0], x.shape[1])
    if mode is None:
        pytest.skip(f"{kernel.name}: {why}")
    ex = Execution(kernel, mode, check_determinism=False, target=target)
    replay = replay_command(case.id, target, kernel.name)
    try:
        with guard.guarded(kernel, "catalogue", case_id=case.id, replay=replay, check="catalogue", mode=mode,
                           family=case.family, target=str(target)):
            return Execution.to_cpu(ex.call(ex.load(ckpt), x.to(ex.device)))
    except BaseException as e:
        if isinstance(e, (Exception, guard.timeout.CaseTimeout)):
            detail = str(e) if isinstance(e, guard.timeout.CaseTimeout) else f"{type(e).__name__}: {e}"
            results.record(kernel.name, "catalogue", "error", run_mode=mode, case_id=case.id, replay=replay,
                           detail=" ".join(detail.split())[:500], family=case.family, target=str(target))
        raise


@pytest.mark.conformance_family("w4a16")
@pytest.mark.parametrize("fmt", ["gptq_v1", "gptq_v2", "awq"])
def test_symmetric_garbage_qzeros_ignored(fmt, conformance_kernel, conformance_target):
    """vllm#21066 / vllm#47770 / vllm#52637: a uint4b8 checkpoint whose qzeros hold random words (not the bias)
    gives bit-identical, exact output: a symmetric kernel must never read them."""
    from references import codecs
    from references.gemm import reference_gemm
    from references.generators import random_activations, random_canonical

    k = conformance_kernel
    case = catalogue.Entry("garbage", "", (), "w4a16", (
        f"M=17,N=32,K=128,g=32,wt=uint4b8,ao=0,dt=fp16,fmt={fmt},regime=exact,tier=exact,seed=71",),
        lambda c: None).case(0, k.name)
    t, why = catalogue.catalogue_target(k, case, conformance_target)
    if t is None:
        pytest.skip(why)
    w = random_canonical(128, 32, 32, "uint4b8", torch.float16, "exact", 71)
    x = random_activations(17, 128, torch.float16, "exact", 71)
    ckpt = codecs.encode(w, fmt)
    assert "qzeros" in ckpt.tensors  # GPTQ and AWQ writers emit qzeros for symmetric layers too
    garbage = torch.randint(-2 ** 31, 2 ** 31 - 1, ckpt.tensors["qzeros"].shape, dtype=torch.int64,
                            generator=torch.Generator().manual_seed(5)).to(torch.int32)
    tampered = codecs.encode(w, fmt)
    tampered.tensors["qzeros"] = garbage
    y_clean = _run_kernel(k, t, ckpt, x, case)
    y_garbage = _run_kernel(k, t, tampered, x, case)
    assert torch.equal(y_clean.view(torch.int16), y_garbage.view(torch.int16)), f"{k.name}: qzeros were read"
    torch.testing.assert_close(y_garbage, reference_gemm(x, w).to(torch.float16), rtol=0, atol=0)


@pytest.mark.conformance_family("w4a16")
def test_act_order_refused_not_ignored(conformance_kernel, conformance_target):
    """A kernel whose gate refuses act-order (accepting the same layer without it) must also refuse a non-trivial
    g_idx in `load`: an error naming g_idx / act-order, never a silently dropped permutation."""
    from references import codecs

    k = conformance_kernel
    ao = catalogue.entry("act_order_applied").case(0, k.name)
    plain = ao.replace(act_order=False)
    t, why = catalogue.catalogue_target(k, plain, conformance_target)
    if t is None:
        pytest.skip(why)
    if k.can_implement(ao.config(), t) is None:
        pytest.skip(f"{k.name} accepts act-order on {t}: the catalogue's act_order_applied entry judges it")
    if type(k).load is Kernel.load:
        pytest.skip(f"{k.name} implements no load (a gate-only kernel)")
    ckpt = codecs.encode(catalogue.weight(ao), ao.format, v1_zero_policy="borrow")
    with pytest.raises(Exception, match=r"(?i)g_idx|act.order"):
        guard.call(k, "load", ckpt)
