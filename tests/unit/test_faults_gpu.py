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
