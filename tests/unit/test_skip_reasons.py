"""Readable skips (conformance.plugin.skips): a skip reason is one line of at most 200 characters, whole clauses
first, then how many were left out; the full reason stays on the report for the JSON report. The end-to-end check
(pytest's skip summary and the JSON report's "skipped") is in test_plugin's merge test."""
from types import SimpleNamespace

from conformance.plugin.skips import FULL_ATTR, SKIP_LIMIT, full_reason, short_reason, shorten

REFUSAL = "fp8_group_quant_cuda refused: target=sm{} not supported (allowed: cuda; vLLM calls this op only on CUDA)"


def test_a_short_reason_is_kept_on_one_line():
    assert short_reason("gate refused:\n  target cpu") == "gate refused: target cpu"
    assert short_reason("x" * SKIP_LIMIT) == "x" * SKIP_LIMIT


def test_a_refusal_repeated_for_every_target_is_one_line_with_the_count_left_out():
    text = "; ".join(REFUSAL.format(t) for t in range(15))  # ~1,600 characters, like a catalogue skip
    out = short_reason(text)
    assert len(out) <= SKIP_LIMIT and "\n" not in out, out
    assert out.startswith(REFUSAL.format(0).split("; ")[0]), out
    shown = out.split(" (+")[0].count("; ") + 1
    assert out.endswith(f"(+{30 - shown} more; full text in the JSON report)"), out  # 2 clauses per refusal
    same = short_reason("; ".join(["target=cpu not supported (allowed: cuda)"] * 30))
    assert same == "target=cpu not supported (allowed: cuda) (+29 more; full text in the JSON report)"


def test_a_first_clause_too_long_alone_is_cut():
    out = short_reason("y" * 500 + "; second; third")
    assert len(out) == SKIP_LIMIT and out.endswith("... (+2 more; full text in the JSON report)"), out
    assert short_reason("z" * 500).endswith("... (full text in the JSON report)")


def test_the_report_keeps_the_full_reason():
    long = "; ".join(REFUSAL.format(t) for t in range(15))
    rep = SimpleNamespace(skipped=True, longrepr=("f.py", 3, long))
    shorten(rep)
    assert rep.longrepr[:2] == ("f.py", 3) and len(rep.longrepr[2]) <= SKIP_LIMIT
    assert getattr(rep, FULL_ATTR) == long and full_reason(rep) == long
    assert full_reason(SimpleNamespace(skipped=False, longrepr=None)) is None
