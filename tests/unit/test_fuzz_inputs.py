"""Fuzz of case ids and CLI arguments: bad input is exit 2 with one line naming the field, never a traceback.

Draws: CONFORMANCE_FUZZ_DRAWS per test (default 300, the CI run; the nightly run sets 10000). Every draw that is not a
valid input must give InvalidInput / exit 2 with one `error:` line (argparse: its own `PROG: error:` line), and none
may raise anything else. CONFORMANCE_FUZZ_COUNT=PATH appends each test's draws and clean draws there
(benchmarks/reliability.py records them)."""
from __future__ import annotations

import contextlib
import io
import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import cli
from conformance.cases.check_ids import parse_id
from references.errors import InvalidInput

DRAWS = int(os.environ.get("CONFORMANCE_FUZZ_DRAWS", "300"))
ID = "w4a16/torch_dequant_w4a16/M=3,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=1"
PARTS = ID.split("/")[2].split(",")
SETTINGS = settings(max_examples=DRAWS, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
TOKENS = st.sampled_from(["0", "-1", "x", "", "1.5", "ch", "1e3", "2" * 25, "=", ",", "/", " ", "uint4", "fp16"])


def _count(name: str, draws: int, clean: int) -> None:
    path = os.environ.get("CONFORMANCE_FUZZ_COUNT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": name, "draws": draws, "clean": clean}) + "\n")


@st.composite
def case_ids(draw):
    """A valid id with one to three fields replaced, dropped or duplicated, or free text."""
    if draw(st.booleans()):
        return draw(st.text(alphabet="w4a16/fp8_group_quantMNKgwtdseed=,0123456789-x ", max_size=60))
    parts = list(PARTS)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(parts) - 1))
        op = draw(st.sampled_from(["value", "drop", "dup", "key"]))
        key = parts[i].split("=")[0]
        if op == "value":
            parts[i] = f"{key}={draw(TOKENS)}"
        elif op == "drop" and len(parts) > 1:
            parts.pop(i)
        elif op == "dup":
            parts.append(parts[i])
        else:
            parts[i] = f"{draw(TOKENS)}={parts[i].split('=', 1)[-1]}"
    return "w4a16/torch_dequant_w4a16/" + ",".join(parts)


def test_fuzz_case_ids():
    seen = {"draws": 0, "clean": 0}

    @SETTINGS
    @given(text=case_ids())
    def prop(text):
        seen["draws"] += 1
        try:
            parse_id(text)
        except InvalidInput as e:
            line = str(e)
            assert "\n" not in line and " is invalid; allowed: " in line, line
        seen["clean"] += 1  # parsed, or refused in one line naming field and value

    prop()
    _count("case_ids", **seen)
    assert seen["draws"] >= min(DRAWS, 100) and seen["clean"] == seen["draws"]


OPTIONS = ["--n", "--k", "--group-size", "--dtype", "--format", "--weight-type", "--target", "--family", "--kernels",
           "--hidden", "--fp8-dtype"]


def test_fuzz_select_arguments():
    seen = {"draws": 0, "clean": 0}

    @SETTINGS
    @given(args=st.lists(st.tuples(st.sampled_from(OPTIONS), TOKENS), min_size=1, max_size=4))
    def prop(args):
        seen["draws"] += 1
        argv = ["select", "--weight-type", "uint4", "--group-size", "128"] + [a for pair in args for a in pair]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
        text = err.getvalue()
        assert "Traceback" not in text + out.getvalue() and code in (0, 2), (argv, code, text)
        if code == 2:
            errors = [ln for ln in text.splitlines() if ln.startswith("error:") or ": error: " in ln]
            assert len(errors) == 1, (argv, text)
        seen["clean"] += 1

    prop()
    _count("select_arguments", **seen)
    assert seen["draws"] >= min(DRAWS, 100) and seen["clean"] == seen["draws"]
