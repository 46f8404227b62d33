"""benchmarks/faults_gpu.py's judgement of a run (the GPU runs themselves need an H200): triton_w4a16's verdicts
compared with the clean run's, the plan rows read back from a JUnit file, and whether the fault fired."""
from __future__ import annotations

from conformance.core.tree import import_tree_package

import_tree_package("conformance_bench")
from conformance_bench import faults_gpu  # noqa: E402

K = "triton_w4a16"


def _doc(*recs):
    return {"records": [dict(zip(("kernel", "case_id", "check", "outcome", "detail"), r)) for r in recs]}


CLEAN = _doc((K, "a", "exact", "pass", ""), (K, "b", "statistical", "fail", "x"), (K, "c", "exact", "pass", ""))


def test_equal_only_when_every_verdict_matches():
    base = faults_gpu.verdicts(CLEAN, K)
    same = _doc((K, "b", "statistical", "fail", "x"), (K, "a", "exact", "pass", ""), (K, "c", "exact", "pass", ""),
                ("fault_k", "z", "exact", "error", "sticky"))
    assert faults_gpu.compare(faults_gpu.verdicts(same, K), base)["verdicts_equal"] is True
    changed = _doc((K, "a", "exact", "error", "AcceleratorError"), (K, "b", "statistical", "fail", "x"),
                   (K, "c", "exact", "pass", ""))
    got = faults_gpu.compare(faults_gpu.verdicts(changed, K), base)
    assert got["verdicts_equal"] is False
    assert got["only_in_this_run"] == [["a", "exact", "error"]] and got["only_in_clean_run"] == [["a", "exact", "pass"]]
    lost = _doc((K, "a", "exact", "pass", ""), (K, "b", "statistical", "fail", "x"))
    assert faults_gpu.compare(faults_gpu.verdicts(lost, K), base)["verdicts_equal"] is False


def test_restricted_to_plan_case_ids_each_needs_a_record():
    base = faults_gpu.verdicts(CLEAN, K)
    run = faults_gpu.verdicts(_doc((K, "a", "exact", "pass", "")), K)
    assert faults_gpu.compare(run, base, {"a"})["verdicts_equal"] is True
    got = faults_gpu.compare(run, base, {"a", "c"})
    assert got["verdicts_equal"] is False and got["case_ids_without_record"] == ["c"]
    # a plan case neither run recorded (its test never reported) is not a match either
    assert faults_gpu.compare(run, base, {"a", "d"})["verdicts_equal"] is False


def test_fault_fired_needs_the_sticky_record_with_the_cuda_text():
    sticky = ("f", "w4a16/f/M=1", "exact", "error", "StickyDeviceError: AcceleratorError: CUDA error: an illegal "
              "memory access was encountered (sticky device error: the device is unusable in this process)")
    later = ("f", "w4a16/f/M=3", "exact", "error", "earlier crash: w4a16/f/M=1 (f ended its worker 2 times ...)")
    got = faults_gpu.fault_fired(_doc(sticky, later), "f", "illegal memory access")
    assert got["fault_fired"] and got["sticky_records"] == 1 and got["earlier_crash_records"] == 1
    assert got["first_sticky"]["case_id"] == "w4a16/f/M=1"
    assert not faults_gpu.fault_fired(_doc(sticky), "f", "device-side assert")["fault_fired"]
    assert not faults_gpu.fault_fired(_doc(("f", "x", "exact", "pass", "bit-exact")), "f", "illegal")["fault_fired"]


def test_plan_rows_from_junit(tmp_path):
    junit = tmp_path / "j.xml"
    cls = 'classname="conformance.suite.test_plan"'
    junit.write_text(f"""<testsuites><testsuite>
<testcase {cls} name="test_plan[{K}-exact-0]@sm90_g1" time="1"/>
<testcase {cls} name="test_plan[{K}-statistical-12]" time="1"/>
<testcase {cls} name="test_plan[{K}-exact]" time="0"/>
<testcase {cls} name="test_plan[other-exact-0]" time="1"/>
<testcase classname="conformance.suite.test_w4a16_suite" name="test_w4a16_conformance[{K}-exact]" time="1"/>
</testsuite></testsuites>""")
    assert faults_gpu.plan_node_ids(junit, K) == [f"conformance/suite/test_plan.py::test_plan[{K}-exact-0]",
                                                  f"conformance/suite/test_plan.py::test_plan[{K}-statistical-12]"]


def test_matrix_cap_counts_every_hang_per_process():
    """The cpu_fault_matrix cap: the base plus one time limit per (hanging kernel, process), at most one per matrix
    item; a hanging gate pays in every process (its collection); replacements are processes too."""
    from fault_kernels import ALL, HANGING, WORKER_KILLING

    names = [c.name for c in ALL]
    base = faults_gpu.MATRIX_BASE_S
    assert faults_gpu.matrix_cap_s(4, 5, []) == base
    assert faults_gpu.matrix_cap_s(4, 5, ["fault_hang_gate"]) == base + 5 * 4  # 4 processes collect
    assert faults_gpu.matrix_cap_s(4, 5, ["fault_hang_load"]) == base + 5 * 1  # one matrix item: one limit
    # fault_hang_apply: 7 items (6 plan rows and the catalogue's run) over 4 workers + 4 replacements (2 + 2 rows of
    # the worker-ending kernels): every item can pay its limit
    assert faults_gpu.matrix_cap_s(4, 5, ["fault_hang_apply", *(c.name for c in WORKER_KILLING)]) == base + 5 * 7
    assert faults_gpu.matrix_cap_s(2, 5, ["fault_hang_apply"]) == base + 5 * 2  # 2 processes: 2 limits at most
    full = faults_gpu.matrix_cap_s(4, 5, names)
    assert full == base + 5 * (7 + 1 + 8) and {c.name for c in HANGING} <= set(names)
    assert faults_gpu.matrix_cap_s(4, 10, names) - base == 2 * (full - base)


def test_default_budget_leaves_the_matrix_its_cap():
    """--budget-s by default: the clean run at its whole cap (it compiles: its wall varies), the device-fault runs at
    their recorded H200 walls, then the matrix's whole cap at the default workers and time limit (each run is
    limited by what the budget has left, less 5 s)."""
    import json

    from fault_kernels import ALL

    rec = json.loads((faults_gpu.ROOT / "benchmarks" / "results" / "h200" / "faults.json").read_text())
    others = faults_gpu.RUN_CAP_S["clean"] + rec["illegal_address"]["wall_s"] + rec["device_assert"]["wall_s"]
    cap = faults_gpu.matrix_cap_s(faults_gpu.WORKERS, faults_gpu.MATRIX_TIMEOUT_S, [c.name for c in ALL])
    assert faults_gpu.BUDGET_S - others - 4 * 5 >= cap, (faults_gpu.BUDGET_S, others, cap)
    assert faults_gpu.BUDGET_S <= 600 - 40  # the GPU machine's 10-minute command, its start and the bytecode step
