"""The w4a16 strategy-class scan: the statistical tier reuses the exact tier's scan of the same kernel and target
(a class the exact scan accepted is accepted; another is probed only past its exact K cap), with the same table as
a scan of its own, fewer gate calls, and a scan of its own once the gate hung."""
import pytest

from conformance.core import registry
from conformance.core.targets import parse_target
from conformance.families import get_family, w4a16

FAM = get_family("w4a16")
N_MAX = 64


def _count_gate(monkeypatch, name: str) -> list:
    k = registry.get_kernel(name)
    calls, gate = [], k.can_implement

    def counted(config, target):
        calls.append(config)
        return gate(config, target)

    monkeypatch.setattr(k, "can_implement", counted)
    return calls


@pytest.mark.parametrize("name,target,k_max", [("rdna3_w4a16", "cpu", 264), ("rdna3_w4a16", "rocm:gfx1100", 264),
                                               ("triton_w4a16", "cpu", 272)])
def test_statistical_after_exact_is_the_same_table_with_fewer_gate_calls(monkeypatch, name, target, k_max):
    t = parse_target(target)  # k_max: a profile ceiling no other test uses, so these scans are this test's own
    scan = w4a16._w4a16_classes.__wrapped__  # uncached: each call scans
    calls = _count_gate(monkeypatch, name)
    scan(FAM, name, t, "exact", k_max, N_MAX)
    calls.clear()
    reused = scan(FAM, name, t, "statistical", k_max, N_MAX)
    n_reused = len(calls)
    del w4a16._EXACT_SCANS[(FAM, name, t, k_max, N_MAX)]
    calls.clear()
    fresh = scan(FAM, name, t, "statistical", k_max, N_MAX)
    assert reused == fresh
    assert n_reused < len(calls), (n_reused, len(calls))


def test_a_hung_gate_gets_a_scan_of_its_own(monkeypatch):
    t = parse_target("cpu")
    w4a16._w4a16_classes(FAM, "triton_w4a16", t, "exact", 280, N_MAX)
    assert w4a16._w4a16_classes.__wrapped__(FAM, "triton_w4a16", t, "statistical", 280, N_MAX)
    monkeypatch.setattr(registry, "gate_hung", lambda name: "gate ran past the time limit")
    calls = _count_gate(monkeypatch, "triton_w4a16")
    w4a16._w4a16_classes.__wrapped__(FAM, "triton_w4a16", t, "statistical", 280, N_MAX)
    assert calls  # no reuse: the gate is asked again (and a hung one refuses every config from then on)
