"""The family objects: one config space with its exclusions, and gate summaries derived from can_implement."""
from __future__ import annotations

from conformance.core.kernel import Kernel
from conformance.families import all_families, get_family

W4A16 = get_family("w4a16")


class _AnyTarget(Kernel):
    """A gate-only w4a16 kernel: any target, uint4b8, group 128, no act-order; bf16 per `bf16`."""

    name = "summary_probe"
    family = "w4a16"
    bf16 = True

    def can_implement(self, config, target):
        if config.weight_type != "uint4b8" or config.group_size != 128 or config.act_order:
            return "uint4b8, group 128, no act-order only"
        if config.dtype == "bfloat16" and not self.bf16:
            return "no bfloat16"
        return None


class _NoBf16(_AnyTarget):
    bf16 = False


def test_gate_summary_follows_the_gate():
    """Changing the gate (refusing bfloat16) changes the derived summary, and nothing else in it."""
    with_bf16, without = W4A16.gate_summary(_AnyTarget()), W4A16.gate_summary(_NoBf16())
    assert "dtypes: float16, bfloat16" in with_bf16
    assert "dtypes: float16;" in without and "bfloat16" not in without
    assert with_bf16.replace(", bfloat16", "") == without
    assert "weight types: uint4b8;" in with_bf16 and "groups: 128;" in with_bf16 and "act-order: no;" in with_bf16
    assert with_bf16.startswith("targets: cpu, sm80, sm90, gfx942, gfx1100, gfx1151, gfx1201;")


def test_exclusions_are_stated_once_and_never_enumerated():
    """No act-order with channelwise or AWQ anywhere in the space: strategies, corpus, coverage, ledger."""
    for cls in W4A16.config_classes():
        assert not (cls.act_order and (cls.group_size == -1 or cls.format == "awq")), cls
    for cfg in W4A16.ledger_configs() + W4A16.coverage_configs([], _cpu())[0]:
        assert not (cfg.act_order and (cfg.group_size == -1 or cfg.format == "awq")), cfg
    labels = [label for label, _ in W4A16.corpus_classes()]
    assert not any(label.startswith(("uint4 ch ao", "uint4b8 ch ao")) for label in labels)


def test_every_family_implements_the_interface():
    for fam in all_families():
        assert fam.config_classes() and fam.ledger_configs() and fam.corpus_classes()
        cfg = fam.representative_config()
        assert isinstance(cfg, fam.config_type) and fam.class_label(cfg) and fam.ledger_label(cfg)
        assert fam.size_label and fam.prefill_m > 0 and fam.bench_prefill_m > 0


def _cpu():
    from conformance.core.targets import parse_target

    return parse_target("cpu")
