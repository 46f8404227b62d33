"""conformance.plugin.timeline: per-worker first test, busy seconds and last test from report timestamps."""
from types import SimpleNamespace

from conformance.plugin import timeline


def _rep(when, start, stop):
    return SimpleNamespace(when=when, start=start, stop=stop)


def test_doc_from_report_timestamps():
    t = timeline.Timeline(session_start=100.0, controller_startup_s=3.5)
    for w, (a, b) in {"gw0": (105.0, 110.0), "gw1": (107.0, 120.0)}.items():
        t.note(w, _rep("setup", a, a + 1))
        t.note(w, _rep("call", a + 1, b - 1))
        t.note(w, _rep("teardown", b - 1, b))
    t.note("gw1", _rep("call", 0, 0))  # no timestamps (an old pytest, a crash record): ignored
    d = t.doc()
    assert d["count"] == 2 and d["controller_startup_s"] == 3.5
    assert d["per_worker"]["gw0"] == {"first_test_s": 5.0, "last_test_end_s": 10.0, "busy_s": 5.0, "tests": 1}
    assert d["per_worker"]["gw1"] == {"first_test_s": 7.0, "last_test_end_s": 20.0, "busy_s": 13.0, "tests": 1}
    assert d["first_test_s"] == {"min": 5.0, "median": 6.0, "max": 7.0}
    assert d["last_test_end_s"] == 20.0 and d["busy_s"] == 18.0 and d["busy_share"] == 0.45
    assert timeline.line(d) == ("workers: 2, first test at 5.0-7.0 s (median 6.0) after session start, tests busy "
                                "18.0 worker-s (45% of 2 x 20.0 s), last test done at 20.0 s; controller startup 3.5 s")


def test_startup_phases_from_the_first_report_of_each_worker():
    t = timeline.Timeline(session_start=100.0)
    phases = {"gw0": {"process": 100.5, "configure": 101.0, "configured": 103.0, "collected": 104.0},
              "gw1": {"process": 100.7, "configure": 101.4, "configured": 104.0, "collected": 105.0,
                      "prewarmed": 107.0, "bogus": 1.0}}
    for w, marks in phases.items():
        first = _rep("setup", 108.0, 109.0)
        setattr(first, timeline.REPORT_ATTR, marks)
        t.note(w, first)
        later = _rep("call", 109.0, 110.0)
        setattr(later, timeline.REPORT_ATTR, {"process": 0.0})  # only a worker's first marks count
        t.note(w, later)
    d = t.doc()
    assert d["per_worker"]["gw0"]["startup"] == {"process": 0.5, "configure": 1.0, "configured": 3.0,
                                                 "collected": 4.0}
    assert list(d["startup"]) == ["process", "configure", "configured", "collected", "prewarmed"]
    assert d["startup"]["configured"] == {"min": 3.0, "median": 3.5, "max": 4.0}
    assert d["startup"]["prewarmed"] == {"min": 7.0, "median": 7.0, "max": 7.0}  # only the workers that passed it
    assert timeline.startup_line(d) == ("worker startup (median s after session start): process 0.6, configure 1.2, "
                                        "configured 3.5, collected 4.5, prewarmed 7.0")
    assert timeline.startup_line({"startup": {}}) is None


def test_marks_once_per_session_and_only_known_phases(monkeypatch):
    import pytest

    monkeypatch.setattr(timeline, "_marks", {})  # this test process's own marks stay as they are
    monkeypatch.setattr(timeline, "_taken", [False])
    timeline.mark("configure")
    timeline.mark("collected")
    first = timeline.take_marks()
    assert {"configure", "collected"} <= set(first) and first["configure"] <= first["collected"]
    assert timeline.take_marks() is None  # the first report carried them
    with pytest.raises(ValueError, match="'imported' is not one of process, configure"):
        timeline.mark("imported")
    timeline.mark("configure")  # a new session in the same process starts its marks anew
    assert timeline.take_marks() is not None


def test_no_reports_no_doc():
    assert timeline.Timeline(1.0).doc() is None and timeline.line(None) is None


def test_process_age_is_this_process():
    import os
    import time

    age = timeline.process_age_s()
    if not os.path.exists("/proc/self/stat"):
        assert age is None
        return
    assert age is not None and 0 <= age < 3600 * 24
    time.sleep(0.2)
    assert timeline.process_age_s() >= age + 0.1  # it is this process's age, and it grows
