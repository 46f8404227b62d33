"""JIT compiles per kernel (conformance.plugin.jit) and the compile groups of the CI plan's cases
(conformance.plugin.collection). CPU CI has no Triton compiler: the hooks are driven here the way Triton calls
them (jit_cache_hook, then the compilation listener with cache_hit, then jit_post_compile_hook); the real counts
come from a GPU run. The end-to-end path (a test's compiles on its report, summed on the xdist controller, in the
JSON report and the summary) is in test_plugin's merge test."""
from types import SimpleNamespace

import pytest

from conformance.core import kernel as kernel_api
from conformance.plugin import jit
from conformance.plugin.collection import MAX_GROUP_ITEMS, PlanItem, compile_groups, dist_for, item_kernel


def _knobs(listener=True):
    rt = SimpleNamespace(jit_cache_hook=None, jit_post_compile_hook=None)
    return SimpleNamespace(runtime=rt, compilation=SimpleNamespace(listener=None) if listener else None)


def _compile(knobs, cache_hit: bool):
    """What Triton does for a specialization new to the process (runtime/jit.py _do_compile, compiler.compile)."""
    assert not knobs.runtime.jit_cache_hook(key="k", repr="fn[...]")  # falsy: the compile goes on
    if knobs.compilation is not None:
        knobs.compilation.listener(src=None, metadata={}, metadata_group={}, times=None, cache_hit=cache_hit)
    knobs.runtime.jit_post_compile_hook(key="k", repr="fn[...]")


@pytest.fixture
def clean_jit():
    jit.take()
    yield
    jit.take()
    jit.set_kernel(None)


def test_compiles_and_disk_cache_hits_are_counted_per_running_kernel(clean_jit):
    knobs = _knobs()
    assert jit.hook(knobs) == "triton"
    jit.set_kernel("triton_w4a16")
    _compile(knobs, cache_hit=False)
    _compile(knobs, cache_hit=False)
    _compile(knobs, cache_hit=True)
    jit.set_kernel("fp8_group_quant_triton")
    _compile(knobs, cache_hit=False)
    got = jit.take()
    assert {k: (v[0], v[2]) for k, v in got.items()} == {"triton_w4a16": (2, 1), "fp8_group_quant_triton": (1, 0)}
    assert all(v[1] >= 0 for v in got.values()) and jit.take() == {}  # taken once
    totals = {}
    jit.add(totals, got)
    jit.add(totals, {"triton_w4a16": [1, 0.5, 0]})
    doc = jit.doc("triton", totals)
    assert doc["per_kernel"]["triton_w4a16"]["jit_compiles"] == 3 and doc["jit_compiles"] == 4
    assert jit.line("triton", doc["per_kernel"]["triton_w4a16"]).startswith("JIT 3 compiles, ")
    assert jit.line("interpreter", None) == "JIT 0 compiles (interpreter)"


def test_hooks_installed_before_keep_running_and_can_still_skip_a_compile(clean_jit):
    calls = []
    knobs = _knobs()
    knobs.runtime.jit_cache_hook = lambda **kw: calls.append("cache") or True  # theirs skips the compile
    knobs.runtime.jit_post_compile_hook = lambda **kw: calls.append("post")
    knobs.compilation.listener = lambda **kw: calls.append("listener")
    jit.hook(knobs)
    assert knobs.runtime.jit_cache_hook(key="k") is True
    knobs.compilation.listener(cache_hit=False)
    knobs.runtime.jit_post_compile_hook(key="k")
    assert calls == ["cache", "listener", "post"]


def test_without_the_listener_every_new_specialization_counts(clean_jit):
    knobs = _knobs(listener=False)
    assert jit.hook(knobs) == "triton (disk-cache hits counted as compiles)"
    jit.set_kernel("k")
    _compile(knobs, cache_hit=True)
    assert jit.take()["k"][0] == 1
    assert jit.hook(SimpleNamespace()).startswith("unavailable")


def test_the_installed_triton_has_the_hooks_counted_with():
    knobs = pytest.importorskip("triton").knobs
    assert hasattr(knobs.runtime, "jit_cache_hook") and hasattr(knobs.runtime, "jit_post_compile_hook")
    assert hasattr(knobs.compilation, "listener")


def test_jit_log_names_each_compile_and_counts_repeats(clean_jit, tmp_path, monkeypatch):
    """$CONFORMANCE_JIT_LOG: one line per new specialization; a specialization compiled a second time in the run
    (another process, no disk-cache hit) is a duplicate; disk-cache hits are not compiles."""
    log = tmp_path / "jit.log"
    monkeypatch.setenv(jit.LOG_ENV, str(log))
    knobs = _knobs()
    jit.hook(knobs)

    def compile_(fn, key, hit, warmup=False):
        knobs.runtime.jit_cache_hook(key=key, repr=f"{fn}[num_warps=4](x: *fp16)", is_manual_warmup=warmup)
        knobs.compilation.listener(cache_hit=hit)
        knobs.runtime.jit_post_compile_hook(key=key, repr=f"{fn}[num_warps=4](x: *fp16)", is_manual_warmup=warmup)

    jit.set_kernel("k", "t::a")
    compile_("gemm", ("fp16", "D", 64), False)
    compile_("gemm", ("fp16", "D", 128), False)  # another constexpr: another specialization, the same repr
    compile_("gemm", ("fp16", "D", 64), False)  # again: as a second worker would
    compile_("reduce", ("fp32",), True)  # served from the disk cache
    compile_("reduce", ("fp16",), False, warmup=True)  # prewarm's own compile: not a case's
    got = jit.read_log(str(log))
    assert {k: got[k] for k in ("compiles", "cache_hits", "distinct", "duplicates")} == \
        {"compiles": 3, "cache_hits": 1, "distinct": 2, "duplicates": 1}
    assert jit.take()["k"][:1] == [3]
    assert got["top_duplicates"] == [["gemm", 1]]
    first = log.read_text().splitlines()[0]
    assert '"test": "t::a"' in first and '"kernel": "k"' in first


def test_merge_sums_jit_per_kernel():
    a = jit.doc("triton", {"k": [2, 1.0, 1]})
    b = jit.doc("triton", {"k": [3, 0.5, 0], "j": [1, 0.25, 0]})
    m = jit.merge_docs([a, b])
    assert m["per_kernel"]["k"] == {"jit_compiles": 5, "jit_seconds": 1.5, "jit_cache_hits": 1}
    assert (m["mode"], m["jit_compiles"], m["jit_seconds"]) == ("triton", 6, 1.75)


# ---- compile groups ------------------------------------------------------------------------------------------------

class _Keyed:
    def __init__(self, key):
        self.key = key

    def compile_key(self, case):
        return self.key(case)


def _rows(kernel, n):
    return [PlanItem(f"{kernel}-exact-{i}", kernel, "exact", "cpu", case=SimpleNamespace(M=i, id=f"c{i}"), index=i)
            for i in range(n)]


def test_cases_with_one_compile_key_share_a_group(monkeypatch):
    from conformance.core import registry

    kernels = {"jitk": _Keyed(lambda c: ("fp16", kernel_api.triton_int_key(c.M))),  # M: 1, divisible by 16, other
               "plain": _Keyed(lambda c: None)}  # no key (the default hook)
    monkeypatch.setattr(registry, "get_kernel", lambda name: kernels[name])
    rows = _rows("jitk", 40) + _rows("plain", 5) + [PlanItem("jitk-exact", "jitk", "exact", "cpu", skip="no rows")]
    groups = compile_groups(rows)
    assert not any(r.startswith("plain") for r in groups) and "jitk-exact" not in groups  # no key, no case: none
    by_group = {}
    for rid, g in groups.items():
        by_group.setdefault(g, []).append(int(rid.rsplit("-", 1)[1]))
    ms = sorted(sorted(v) for v in by_group.values())
    assert [1] in ms and [0, 16, 32] in ms  # M == 1 alone; 0, 16, 32 divisible by 16
    others = [m for m in range(40) if m != 1 and m % 16]
    assert sorted(sum((v for v in ms if v[0] in others), [])) == others  # the rest: one key, split at the cap
    assert max(len(v) for v in ms) == MAX_GROUP_ITEMS and all("@" not in g and "]" not in g for g in groups.values())
    again = compile_groups(rows[20:] + rows[:20])  # names are digests of the key, not positions
    assert again["jitk-exact-1"] == groups["jitk-exact-1"] and again["jitk-exact-16"] == groups["jitk-exact-16"]


def test_the_default_hook_gives_no_key():
    class Plain(kernel_api.Kernel):
        name, family = "plain_k", "w4a16"

        def can_implement(self, config, target):
            return None

    assert Plain().compile_key(object()) is None
    assert [kernel_api.triton_int_key(n) for n in (1, 16, 48, 17, 0)] == [1, 16, 16, "n", 16]


def test_item_kernel_reads_the_kernel_parameters():
    def item(**params):
        return SimpleNamespace(callspec=SimpleNamespace(params=params))

    assert item_kernel(item(conformance_plan_row=_rows("k1", 1)[0])) == "k1"
    assert item_kernel(item(conformance_kernel_name="k2", conformance_tier="exact")) == "k2"
    assert item_kernel(item(kernel=SimpleNamespace(name="k3"))) == "k3"
    assert item_kernel(item(kernel_name="k4")) == "k4"
    assert item_kernel(item(i=3)) is None and item_kernel(SimpleNamespace()) is None


@pytest.mark.parametrize("option, compiles, want", [
    (dict(numprocesses=16, dist="no"), True, "loadgroup"),
    (dict(numprocesses="auto", dist="no"), True, "loadgroup"),
    (dict(numprocesses=16, dist="no"), False, "worksteal"),  # the interpreter: nothing to share, balance first
    (dict(numprocesses=16, dist="load"), True, None),  # the user's --dist wins
    (dict(numprocesses=16, dist="no", distload=True), True, None),
    (dict(numprocesses=0, dist="no"), True, None),
    (dict(dist="no"), True, None),  # -p no:xdist: no such option
])
def test_loadgroup_by_default_only_where_kernels_compile(option, compiles, want):
    assert dist_for(SimpleNamespace(**option), compiles, worksteal=True) == want


def test_no_worksteal_in_this_xdist_leaves_its_choice():
    assert dist_for(SimpleNamespace(numprocesses=2, dist="no"), False, worksteal=False) is None
    assert dist_for(SimpleNamespace(numprocesses=2, dist="no"), True, worksteal=False) == "loadgroup"
