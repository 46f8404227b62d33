"""A corpus of malformed inputs, tried as a new user would: commands, options, case ids, files and plugins.

Each entry asserts the exit code (2 for the CLI, pytest's usage error 4 for pytest options), that the one-line
message names the field (and the value), and that no Python traceback reaches the user. CLI cases run in-process
(`conformance.cli.main`); the pytest options run in ONE subprocess that calls pytest.main once per case.
"""
import json
import os
import sys
from pathlib import Path

import pytest
from misbehaving_kernels import RaisingAvailabilityW4A16, RaisingGateW4A16

from conformance import cli
from conformance.core import registry
from tests import warm_python

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
W4 = ["select", "--target", "gfx1100", "--weight-type", "uint4", "--group-size", "128"]
FP8 = ["select", "--family", "fp8_group_quant", "--target", "sm90", "--group-size", "128", "--dtype", "bfloat16"]
ID = "w4a16/torch_dequant_w4a16/M=3,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=1"
FP8_ID = ("fp8_group_quant/fp8_group_quant_native/T=5,H=512,g=128,dt=bf16,f8=e4m3fn,regime=normal,"
          "tier=statistical,seed=1")
GOOD_CLASS = {"max_ratio": 0.1, "p99_ratio": 0.05, "failures": [], "worst_case": "x"}
PROFILES = {  # saved error profiles that parse as JSON but are not profiles
    "kernels_list.json": {"version": 1, "target": "cpu", "kernels": []},
    "no_target.json": {"version": 1, "kernels": {}},
    "no_max_ratio.json": {"version": 1, "target": "cpu", "kernels": {"k": {"c": {
        k: v for k, v in GOOD_CLASS.items() if k != "max_ratio"}}}},
    "ratio_string.json": {"version": 1, "target": "cpu", "kernels": {"k": {"c": {**GOOD_CLASS, "max_ratio": "0.1"}}}},
    "wrong_version.json": {"version": 7, "target": "cpu", "kernels": {}},
    "top_list.json": [1, 2],
    "failures_str.json": {"version": 1, "target": "cpu", "kernels": {"k": {"c": {**GOOD_CLASS, "failures": "x"}}}},
    "class_list.json": {"version": 1, "target": "cpu", "kernels": {"k": ["c"]}},
}

# (argv, exit code, text the message must contain: the field, often with its value)
CLI_CASES = [
    # select: layer dimensions (one shared validator) and the other flags
    (W4 + ["--n", "12"], 2, "--n=12"),
    (W4 + ["--n", "-8"], 2, "--n=-8"),
    (W4 + ["--n", "2000000"], 2, "--n=2000000"),
    (W4 + ["--k", "0"], 2, "--k=0"),
    (W4 + ["--k", "-4096"], 2, "--k=-4096"),
    (W4[:-1] + ["7"], 2, "--group-size=7"),
    (W4[:-1] + ["0"], 2, "--group-size=0"),
    (W4[:-1] + ["-2"], 2, "--group-size=-2"),
    (W4[:-1] + [str(10**23)], 2, f"--group-size={10**23}"),
    (W4[:-1] + ["8192"], 2, "--group-size=8192"),
    (W4[:-1] + ["abc"], 2, "--group-size"),
    (W4[:-2], 2, "--group-size=None"),
    (W4 + ["--dtype", "float64"], 2, "--dtype='float64'"),
    (W4 + ["--format", "gguf"], 2, "--format='gguf'"),
    (W4 + ["--family", "w8a8"], 2, "--family='w8a8'"),
    (W4 + ["--target", "gfx9"], 2, "--target='gfx9'"),
    (W4 + ["--target", "sm_999"], 2, "--target='sm_999'"),
    (W4 + ["--target", ""], 2, "--target=''"),
    (W4 + ["--kernels", "nosuch"], 2, "--kernels='nosuch'"),
    (W4 + ["--kernels", ","], 2, "--kernels=','"),
    (["select", "--target", "gfx1100", "--weight-type", "int4", "--group-size", "128"], 2, "--weight-type='int4'"),
    (FP8 + ["--hidden", "-128"], 2, "--hidden=-128"),
    (FP8 + ["--hidden", "100"], 2, "--hidden=100"),
    (FP8 + ["--hidden", "0"], 2, "--hidden=0"),
    (FP8[:-3] + ["0", "--dtype", "bfloat16"], 2, "--group-size=0"),
    (FP8 + ["--fp8-dtype", "float8_e5m2"], 2, "--fp8-dtype='float8_e5m2'"),
    (FP8 + ["--weight-type", "uint4"], 2, "--weight-type='uint4'"),
    # coverage
    (["coverage", "--k", "100"], 2, "--k=100"),
    (["coverage", "--k", "0"], 2, "--k=0"),
    (["coverage", "--hidden", "0"], 2, "--hidden=0"),
    (["coverage", "--hidden", "100"], 2, "--hidden=100"),
    (["coverage", "--n", "12"], 2, "--n=12"),
    (["coverage", "--n", "-8"], 2, "--n=-8"),
    (["coverage", "--format", "xml"], 2, "--format='xml'"),
    (["coverage", "--seed", "0xzz"], 2, "--seed='0xzz'"),
    (["coverage", "--out", "/proc/coverage.json"], 2, "--out='/proc/coverage.json'"),
    (["coverage", "--out", "{tmp}"], 2, "--out='{tmp}'"),
    (["coverage", "--out", "{tmp}/a_file/sub.json"], 2, "--out='{tmp}/a_file/sub.json'"),
    (["coverage", "--target", "nonsense"], 2, "--target='nonsense'"),
    (["coverage", "--kernels", ""], 2, "--kernels=''"),
    # list
    (["list", "--family", "nope"], 2, "--family='nope'"),
    (["list", "--target", "gfx9"], 2, "--target='gfx9'"),
    # profile
    (["profile"], 2, "--save/--compare"),
    (["profile", "--save", "a.json", "--compare", "b.json"], 2, "--save/--compare"),
    (["profile", "--save", "{tmp}"], 2, "--save='{tmp}'"),
    (["profile", "--save", "/proc/profile.json"], 2, "--save='/proc/profile.json'"),
    (["profile", "--save", "{tmp}/a_file/p.json"], 2, "--save='{tmp}/a_file/p.json'"),
    (["profile", "--compare", "{tmp}/missing.json"], 2, "--compare='{tmp}/missing.json'"),
    (["profile", "--compare", "{tmp}/a_file"], 2, "--compare='{tmp}/a_file'"),
    (["profile", "--compare", "{tmp}/kernels_list.json"], 2, "kernels='list'"),
    (["profile", "--compare", "{tmp}/no_target.json"], 2, "target=None"),
    (["profile", "--compare", "{tmp}/no_max_ratio.json"], 2, "kernels.k.c.max_ratio=None"),
    (["profile", "--compare", "{tmp}/ratio_string.json"], 2, "kernels.k.c.max_ratio='0.1'"),
    (["profile", "--compare", "{tmp}/nan_ratio.json"], 2, "kernels.k.c.max_ratio=nan"),
    (["profile", "--compare", "{tmp}/wrong_version.json"], 2, "version=7"),
    (["profile", "--compare", "{tmp}/top_list.json"], 2, "document='list'"),
    (["profile", "--compare", "{tmp}/failures_str.json"], 2, "kernels.k.c.failures='x'"),
    (["profile", "--compare", "{tmp}/class_list.json"], 2, "kernels.k='list'"),
    (["profile", "--compare", "x.json", "--growth", "1"], 2, "--growth=1.0"),
    (["profile", "--compare", "x.json", "--growth", "nan"], 2, "--growth=nan"),
    (["profile", "--save", "x.json", "--kernels", "nosuch"], 2, "--kernels='nosuch'"),
    (["profile", "--save", "x.json", "--target", "gfx9"], 2, "--target='gfx9'"),
    # validate: every argument and output path checked before the run
    (["validate", "--out", "{tmp}/a_file"], 2, "--out='{tmp}/a_file'"),
    (["validate", "--out", "/proc/report"], 2, "--out='/proc/report'"),
    (["validate", "--out", "{tmp}/r", "--junitxml", "{tmp}"], 2, "--junitxml='{tmp}'"),
    (["validate", "--out", "{tmp}/r", "--junitxml", "/proc/junit.xml"], 2, "--junitxml='/proc/junit.xml'"),
    (["validate", "--out", "{tmp}/r", "--profile", "weekly"], 2, "--profile='weekly'"),
    (["validate", "--out", "{tmp}/r", "-n", "two"], 2, "-n='two'"),
    (["validate", "--out", "{tmp}/r", "--timeout", "-1"], 2, "--timeout=-1.0"),
    (["validate", "--out", "{tmp}/r", "--target", "gfx9"], 2, "--target='gfx9'"),
    (["validate", "--out", "{tmp}/r", "--kernels", "nosuch"], 2, "--kernels='nosuch'"),
    (["validate", "--out", "{tmp}/r", "--seed", "abc"], 2, "--seed='abc'"),
    # repro: ids, sizes, target, timeout
    (["repro", "bad"], 2, "case id='bad'"),
    (["repro", ID.replace("M=3", "M=" + "1" + "0" * 40)], 2, "M=1" + "0" * 40),
    (["repro", ID.replace("N=64", "N=12")], 2, "N=12"),
    (["repro", ID.replace("g=32", "g=7")], 2, "K=256"),
    (["repro", ID.replace("w4a16/", "w8a8/", 1)], 2, "family='w8a8'"),
    (["repro", ID.replace("M=3,", "")], 2, "M=None"),
    (["repro", ID, "--target", "gfx9"], 2, "--target='gfx9'"),
    (["repro", ID, "--timeout", "-1"], 2, "--timeout=-1.0"),
    (["repro", ID, "--timeout", "nan"], 2, "--timeout=nan"),
    (["repro", FP8_ID.replace("T=5", "T=" + "9" * 30)], 2, "tokens=" + "9" * 30),
    (["repro", FP8_ID.replace("H=512", "H=500")], 2, "hidden=500"),
    # global
    (["--plugin", "no_such_plugin_module", "list"], 2, "'no_such_plugin_module'"),
    (["--plugin", "blank_name_plugin", "list"], 2, "name='   '"),
    (["--plugin", "exiting_plugin", "list"], 2, "'exiting_plugin' failed to import: ExitCalled: sys.exit(3)"),
    (["--plugin", "os_exit_plugin", "list"], 2, "'os_exit_plugin' failed to import: ExitCalled: os._exit(5)"),
    (["no-such-command"], 2, "no-such-command"),
]

# generated rows: every field of a case id given bad values, and bad values of every layer option of select and
# coverage (each row: exit 2, one `error:` line naming the field, no traceback)
BAD_ID_FIELDS = {"M": ["0", "-1", "x", "1.5", ""], "N": ["0", "7", "-8", "x", ""], "K": ["0", "-256", "x", "255"],
                 "g": ["0", "7", "-2", "x", "ch2"], "wt": ["int4", "", "uint3", "UINT4"], "ao": ["2", "x", "", "-1"],
                 "dt": ["fp64", "", "x", "float16x"], "fmt": ["gguf", "", "x"], "regime": ["nope", ""],
                 "tier": ["fast", ""], "seed": ["-1", "x", "", "1.5"]}


def _with_field(case_id: str, field: str, value: str) -> str:
    head, body = case_id.rsplit("/", 1)
    return head + "/" + ",".join(f"{field}={value}" if p.split("=")[0] == field else p for p in body.split(","))


CLI_CASES += [(["repro", _with_field(ID, f, v)], 2, f) for f, vals in BAD_ID_FIELDS.items() for v in vals]
CLI_CASES += [(["repro", bad], 2, text) for bad, text in (
    (ID.replace("w4a16/", "", 1), "case id"), (ID + ",extra=1", "extra='1'"), (ID.replace(",seed=1", ""), "seed=None"),
    (ID.replace("torch_dequant_w4a16", "bad name"), "kernel='bad name'"), ("w4a16//M=3", "kernel=''"),
    ("//", "family=''"), ("", "case id"), (" ", "case id"), (ID.replace(",", ";"), "M='3;N=64"))]
BAD_LAYER = {"--n": ["0", "-8", "12", "x", "1e3"], "--k": ["0", "-256", "x", "2.5"],
             "--group-size": ["0", "-3", "x", "3"], "--dtype": ["fp64", "x", ""],
             "--target": ["gfx", "sm", "cuda:", "rocm:", "tpu"]}


def _named(opt: str, value: str) -> str:
    """What the one line names: argparse's own `argument --n: invalid int value` for a non-integer, else `--n=`."""
    return f"argument {opt}" if opt in ("--n", "--k", "--group-size") and not value.lstrip("-").isdigit() else opt


CLI_CASES += [(W4 + [opt, v], 2, _named(opt, v)) for opt, vals in BAD_LAYER.items() for v in vals]
CLI_CASES += [(["coverage", opt, v], 2, _named(opt, v)) for opt, vals in BAD_LAYER.items()
              if opt not in ("--group-size", "--dtype") for v in vals]
# the field the user typed is the one named: a group size against the default --hidden (never typed), and a
# negative number in an old positional id (its '-' is also the field separator: not a wrong field count)
FP8_NO_HIDDEN = ["select", "--family", "fp8_group_quant", "--dtype", "bfloat16", "--group-size"]
LEGACY_ID = "w4a16/torch_dequant_w4a16/M3-N64-K256-g32-uint4-noao-fp16-gptq_v1-exact-exact-s1"
LEGACY_FP8_ID = "fp8_group_quant/fp8_group_quant_triton/T5-H512-g128-bf16-e4m3fn-f32scale-rowmajor-exact-exact-s1"
CLI_CASES += [(FP8_NO_HIDDEN + [g], 2, f"error: --group-size={g} is invalid; allowed: a positive divisor of "
               "--hidden=7168 (the default") for g in ("100", "96", "7000")]
CLI_CASES += [(FP8_NO_HIDDEN + ["128", "--hidden", "100"], 2, "error: --hidden=100 is invalid")]
CLI_CASES += [(["repro", legacy.replace(old, new)], 2, f"error: {text} is invalid") for legacy, old, new, text in (
    (LEGACY_ID, "-s1", "-s-1", "seed=-1"), (LEGACY_ID, "M3-", "M-3-", "M=-3"), (LEGACY_ID, "-g32-", "-g-32-",
                                                                                 "group_size=-32"),
    (LEGACY_ID, "-K256-", "-K-256-", "K=-256"), (LEGACY_FP8_ID, "-s1", "-s-7", "seed=-7"),
    (LEGACY_FP8_ID, "T5-", "T-5-", "tokens=-5"))]
CLI_CASES += [(["list", "--target", v], 2, "--target") for v in BAD_LAYER["--target"]]
CLI_CASES += [(["repro", ID, "--target", v], 2, "--target") for v in BAD_LAYER["--target"]]


@pytest.fixture
def bad_files(tmp_path):
    for name, doc in PROFILES.items():
        (tmp_path / name).write_text(json.dumps(doc))
    nan = {"version": 1, "target": "cpu", "kernels": {"k": {"c": {**GOOD_CLASS, "max_ratio": float("nan")}}}}
    (tmp_path / "nan_ratio.json").write_text(json.dumps(nan))  # NaN: valid JSON to Python's parser
    (tmp_path / "a_file").write_text("not json\n")
    return tmp_path


def _no_traceback(*texts):
    for t in texts:
        assert "Traceback" not in t and "INTERNALERROR" not in t, t


@pytest.mark.parametrize("argv,code,field", CLI_CASES, ids=[f"{i}-{' '.join(c[0])[:60]}" for i, c in
                                                             enumerate(CLI_CASES)])
def test_cli_bad_input(argv, code, field, bad_files, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))  # blank_name_plugin
    monkeypatch.chdir(bad_files)
    argv = [a.replace("{tmp}", str(bad_files)) for a in argv]
    got = cli.main(argv)
    out, err = capsys.readouterr()
    _no_traceback(out, err)
    assert got == code, (out, err)
    assert field.replace("{tmp}", str(bad_files)) in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    # argparse's own errors (an unknown command, a non-integer) are its usage line plus one `PROG: error:` line
    assert len(lines) == 1 or argv[0] in ("no-such-command",) or "--group-size" in field and "abc" in argv \
        or field.startswith("argument ") and len([ln for ln in err.splitlines() if ": error: " in ln]) == 1, err
    assert not (bad_files / "r" / "report.json").exists()


def corpus_size() -> int:
    """Rows of the malformed-input corpus: CLI and pytest-option rows, plus the contained-plugin and crash cases
    below (benchmarks/reliability.py records it)."""
    return len(CLI_CASES) + len(PYTEST_CASES) + 4


def test_corpus_size():
    assert corpus_size() >= 200


# ---- misbehaving plugin kernels are contained: their own refusal, never a crash of the command ----------------

@pytest.fixture
def raising_kernels():
    for cls in (RaisingGateW4A16, RaisingAvailabilityW4A16):
        registry.register_kernel(cls)
    yield
    for cls in (RaisingGateW4A16, RaisingAvailabilityW4A16):
        registry.unregister_kernel(cls.name)


def test_raising_gate_is_a_refusal_in_select_coverage_and_repro(raising_kernels, capsys):
    assert cli.main(["select", "--target", "cpu", "--weight-type", "uint4b8", "--group-size", "-1"]) == 0
    out, err = capsys.readouterr()
    assert "refused: raising_gate_w4a16: gate raised ValueError: plugin bug in the gate" in out
    _no_traceback(out, err)
    assert cli.main(["coverage", "--target", "cpu", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    reasons = [c["refused"].get("raising_gate_w4a16") for c in json.loads(out)["configs"]]
    assert "gate raised ValueError: plugin bug in the gate" in reasons
    case = ID.replace("torch_dequant_w4a16", "raising_gate_w4a16").replace("g=32", "g=ch").replace("wt=uint4",
                                                                                                   "wt=uint4b8")
    assert cli.main(["repro", case]) == 125  # the gate refuses (by raising): cannot judge here
    out, err = capsys.readouterr()
    assert "gate raised ValueError: plugin bug in the gate" in out
    _no_traceback(out, err)


def test_raising_availability_is_a_reason_in_list(raising_kernels, capsys):
    assert cli.main(["list", "--target", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert "not available here: availability raised RuntimeError: libfoo.so probe failed" in out
    _no_traceback(out, err)
    sel = registry.select(_w4_config(), _cpu(), require_available=True)
    assert "availability raised RuntimeError" in sel.refused["raising_availability_w4a16"]


def _w4_config():
    from conformance.families.config import W4A16Config

    return W4A16Config("uint4b8", 128, False, "float16", N=64, K=256)


def _cpu():
    from conformance.core.targets import CPU

    return CPU


def test_internal_error_is_one_line_unless_the_traceback_is_asked_for(monkeypatch, capsys):
    import conformance.cli.list as list_cmd

    def boom(args):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(list_cmd, "run", boom)
    assert cli.main(["list"]) == cli.EXIT_INTERNAL
    out, err = capsys.readouterr()
    assert "internal error: RuntimeError: a bug of ours" in err and "--traceback" in err
    _no_traceback(out, err)
    with pytest.raises(RuntimeError):
        cli.main(["--traceback", "list"])
    monkeypatch.setenv("CONFORMANCE_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        cli.main(["list"])


# ---- pytest options: usage error (exit 4), one line; all cases in one subprocess -----------------------------

PYTEST_CASES = [
    (["--conformance-kernels", "nosuch"], "--conformance-kernels='nosuch'"),
    (["--conformance-kernels", ","], "--conformance-kernels=','"),
    (["--conformance-tiers", ","], "--conformance-tiers=','"),
    (["--conformance-tiers", "exactt"], "--conformance-tiers='exactt'"),
    (["--conformance-target", "gfx9"], "--conformance-target='gfx9'"),
    (["--conformance-profile", "wrong"], "--conformance-profile='wrong'"),
    (["--conformance-plugin", "no_such_plugin_module"], "'no_such_plugin_module' failed to import"),
    (["--conformance-plugin", "blank_name_plugin"], "name='   '"),
    (["--conformance-plugin", "exiting_plugin"], "'exiting_plugin' failed to import: ExitCalled: sys.exit(3)"),
    (["--conformance-plugin", "os_exit_plugin"], "'os_exit_plugin' failed to import: ExitCalled: os._exit(5)"),
    (["--conformance-report", "{tmp}"], "--conformance-report='{tmp}'"),
    (["--conformance-report", "/proc/r.json"], "--conformance-report='/proc/r.json'"),
    (["--conformance-timeout", "-1"], "--conformance-timeout='-1'"),
    (["--conformance-timeout", "abc"], "--conformance-timeout='abc'"),
    (["--conformance-seed", "abc"], "--conformance-seed='abc'"),
    (["--conformance-seed", "-1"], "--conformance-seed='-1'"),
    (["--conformance-shard", "4/3"], "--conformance-shard='4/3'"),
    (["--conformance-prewarm", "sometimes"], "--conformance-prewarm='sometimes'"),
    (["--conformance-case", "bad"], "--conformance-case='bad'"),
    (["--conformance-case", ID.replace("M=3", "M=" + "1" + "0" * 40)], "M=1" + "0" * 40),
]

_RUNNER = r"""
import contextlib, io, json, sys
import pytest
out = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as o:
        code = pytest.main(["conformance/suite/test_fusion.py", "-p", "no:cacheprovider", "-q", *args])
    out.append({"code": int(code), "err": err.getvalue(), "out": o.getvalue()})
print(json.dumps(out))
"""


def test_pytest_option_bad_inputs_are_usage_errors(tmp_path):
    cases = [[a.replace("{tmp}", str(tmp_path)) for a in args] for args, _ in PYTEST_CASES]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]), CONFORMANCE_NO_ENTRY_POINTS="1")
    p = warm_python.run([sys.executable, "-c", _RUNNER, json.dumps(cases)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads(p.stdout.strip().splitlines()[-1])
    for (args, field), r in zip(PYTEST_CASES, results):
        text = r["err"] + r["out"]
        _no_traceback(text)
        assert r["code"] == 4, (args, text)
        errors = [ln for ln in text.splitlines() if ln.startswith("ERROR:")]
        assert len(errors) == 1 and field.replace("{tmp}", str(tmp_path)) in errors[0], (args, text)


def test_repro_of_a_kernel_that_ends_its_process_names_the_case(tmp_path):
    """The kernel os._exit()s: repro cannot print a verdict, but it said which case it was running."""
    case = ID.replace("torch_dequant_w4a16", "crashing_dequant_w4a16").replace("g=32", "g=128").replace(
        "wt=uint4", "wt=uint4b8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]),
               MISBEHAVING_KERNELS="crashing_dequant_w4a16")
    p = warm_python.run([sys.executable, "-m", "conformance", "--plugin", "misbehaving_plugin", "repro", case],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    from conformance.core.targets import detect_target

    assert p.returncode != 0 and f"repro: running {case} on {detect_target()}" in p.stderr, p.stderr
    _no_traceback(p.stdout, p.stderr)
