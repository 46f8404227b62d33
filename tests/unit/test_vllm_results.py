"""benchmarks/vllm_results.py: folding vLLM adapter reports into the results file."""
import json

from conformance_bench import vllm_results

SHA = "a" * 40


def _report(tmp_path, commit):
    recs = [{"kernel": "vllm_triton_w4a16", "check": "exact", "outcome": o, "case_id": f"w4a16/vllm_triton_w4a16/{i}",
             "target": "rocm:gfx1100", "run_mode": "device", "detail": "d", "replay": "r"}  # a simulated target
            for i, o in enumerate(("pass", "pass", "error"))] + [{"kernel": "triton_w4a16", "outcome": "pass"}]
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"target": "cuda:sm90", "profile": "ci", "seed": 1, "complete": True, "commit": commit,
                             "records": recs}))
    return p


def test_add_counts_vllm_kernels_and_takes_the_given_commit(tmp_path):
    out = tmp_path / "v.json"
    data = vllm_results.add(_report(tmp_path, "b" * 40), "cmd", "H200", out, commit=SHA)
    run = data["runs"][0]
    assert (run["commit"], run["report_commit"]) == (SHA, "b" * 40)
    assert run["kernels"] == {"vllm_triton_w4a16": {"cases": 3, "passed": 2, "failed": 0, "errors": 1, "skipped": 0,
                                                    "run_modes": {"device": 3}}}
    assert [f["case_id"] for f in data["failures"]] == ["w4a16/vllm_triton_w4a16/2"]
    again = vllm_results.add(_report(tmp_path, SHA), "cmd", "H200", out)  # the same machine and target: replaced
    assert len(again["runs"]) == 1 and again["runs"][0]["commit"] == SHA and "report_commit" not in again["runs"][0]
    assert again["runs"][0]["command"] == "cmd"  # it covers every kernel of the old run: a replacement
    assert len(again["failures"]) == 1 and again["failures"][0]["run_target"] == "cuda:sm90"  # not kept twice
    part = vllm_results.add(_report(tmp_path, SHA), "cmd2", "H200", out)
    assert part["runs"][0]["command"] == "cmd2"


def test_a_short_commit_is_refused(tmp_path, capsys):
    assert vllm_results.main(["add", str(_report(tmp_path, None)), "--command", "c", "--machine", "m",
                              "--out", str(tmp_path / "v.json"), "--commit", "72f5a21"]) == 2
    assert "--commit='72f5a21' is invalid" in capsys.readouterr().err
