"""Case ids: `family/kernel/key=value,...` in any key order, one shell-safe line that round-trips exactly; the old
positional ids still parse to the same Case; bad ids name the field, the value and what is allowed; Case keeps
its v1 construction and attribute API."""
import pickle
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.cases import ids
from conformance.cases.ids import EXAMPLE_FP8_ID, EXAMPLE_ID, TIERS, Case, parse_case_id
from conformance.cases.strategies import any_case_ids
from conformance.checks.harness import replay_command
from conformance.families import all_families
from references.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[2]


def _old_id(case) -> str:
    """The id as the positional grammar printed it before key=value ids (a copy of the old Case.id)."""
    short = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float8_e4m3fn": "e4m3fn",
             "float8_e4m3fnuz": "e4m3fnuz"}
    if case.family == "w4a16":
        g = "ch" if case.group_size == -1 else str(case.group_size)
        body = [f"M{case.M}", f"N{case.N}", f"K{case.K}", f"g{g}", case.weight_type,
                "ao" if case.act_order else "noao", short[case.dtype], case.format]
    else:
        body = [f"T{case.tokens}", f"H{case.hidden}", f"g{case.group_size}", short[case.dtype],
                short[case.fp8_dtype], "ue8m0" if case.ue8m0 else "f32scale",
                "colmajor" if case.column_major_scales else "rowmajor"]
    return f"{case.family}/{case.kernel}/" + "-".join(body + [case.regime, case.tier, f"s{case.seed}"])


@given(any_case_ids())
def test_case_id_round_trips_and_needs_no_shell_quoting(case):
    text = case.id
    assert parse_case_id(text) == case
    assert parse_case_id(text).id == text
    assert shlex.quote(text) == text
    assert text.count("/") == 2 and re.fullmatch(r"[A-Za-z0-9_.]+/[A-Za-z0-9_.]+/[A-Za-z0-9_.,=+-]+", text)
    cmd = replay_command(text)
    assert shlex.split(cmd) == ["python", "-m", "conformance", "repro", text]


@given(any_case_ids(), st.randoms())
def test_keys_parse_in_any_order(case, rnd):
    family, kernel, body = case.id.split("/")
    parts = body.split(",")
    rnd.shuffle(parts)
    assert parse_case_id(f"{family}/{kernel}/{','.join(parts)}") == case


@given(any_case_ids())
def test_old_positional_ids_replay_to_the_same_case(case):
    assert parse_case_id(_old_id(case)) == case


# ids printed by the positional grammar, as they stood in tests, docs and reports, and the key=value id each
# replays as: old bug reports and `git bisect run` scripts keep working
OLD_IDS = {
    "w4a16/triton_w4a16/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1234": EXAMPLE_ID,
    "fp8_group_quant/fp8_group_quant_native/T5-H512-g128-bf16-e4m3fn-f32scale-rowmajor-normal-statistical-s7":
        EXAMPLE_FP8_ID,
    "w4a16/torch_dequant_w4a16/M3-N64-K128-g32-uint4-noao-fp16-gptq_v2-exact-exact-s1":
        "w4a16/torch_dequant_w4a16/M=3,N=64,K=128,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=1",
    "w4a16/rdna3_w4a16/M8-N64-K1024-g128-uint4b8-noao-fp16-gptq_v1-normal-statistical-s1":
        "w4a16/rdna3_w4a16/M=8,N=64,K=1024,g=128,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v1,regime=normal,tier=statistical,"
        "seed=1",
    "w4a16/triton_w4a16_actorder/M40-N16-K512-g64-uint4-ao-fp16-compressed_tensors-exact-exact-s93":
        "w4a16/triton_w4a16_actorder/M=40,N=16,K=512,g=64,wt=uint4,ao=1,dt=fp16,fmt=compressed_tensors,regime=exact,"
        "tier=exact,seed=93",
    "w4a16/rdna_hybrid_w4a16/M6-N48-K192-g64-uint4b8-noao-bf16-awq-exact-exact-s62":
        "w4a16/rdna_hybrid_w4a16/M=6,N=48,K=192,g=64,wt=uint4b8,ao=0,dt=bf16,fmt=awq,regime=exact,tier=exact,seed=62",
    "w4a16/triton_w4a16/M5-N64-K256-g64-uint4b8-noao-bf16-gptq_v2-extreme_scales-statistical-s0":
        "w4a16/triton_w4a16/M=5,N=64,K=256,g=64,wt=uint4b8,ao=0,dt=bf16,fmt=gptq_v2,regime=extreme_scales,"
        "tier=statistical,seed=0",
    "w4a16/k/M1-N8-K64-gch-uint8b128-noao-bf16-awq-heavy_tailed-statistical-s0":
        "w4a16/k/M=1,N=8,K=64,g=ch,wt=uint8b128,ao=0,dt=bf16,fmt=awq,regime=heavy_tailed,tier=statistical,seed=0",
    "fp8_group_quant/fp8_group_quant_triton/T17-H512-g64-fp32-e4m3fnuz-ue8m0-colmajor-fp8_boundaries-exact-s2":
        "fp8_group_quant/fp8_group_quant_triton/T=17,H=512,g=64,dt=fp32,f8=e4m3fnuz,ue8m0=1,colmajor=1,"
        "regime=fp8_boundaries,tier=exact,seed=2",
}


@pytest.mark.parametrize("old", OLD_IDS)
def test_old_ids_from_reports_replay_as_their_new_ids(old):
    case = parse_case_id(old)
    assert case.id == OLD_IDS[old]
    assert parse_case_id(OLD_IDS[old]) == case


_OLD_ID_RE = re.compile(r"(?:w4a16|fp8_group_quant)/[A-Za-z0-9_.]+/[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+){9,10}"
                        r"(?![A-Za-z0-9_=.-])")
KNOWN_BAD_OLD_IDS = {"w4a16/torch_dequant_w4a16/M3-N15-K64-g32-uint4-noao-fp16-gptq_v2-exact-exact-s7"}  # exit 2 test


def test_every_old_id_stored_in_the_repository_still_parses():
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "tests", "docs",
                             "README.md", "conformance", "benchmarks"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    found = set()
    for rel in listed:
        path = ROOT / rel
        if path.suffix in (".py", ".md", ".json", ".txt") and rel != "tests/unit/test_cases.py" and path.is_file():
            found |= set(_OLD_ID_RE.findall(path.read_text(errors="replace")))
    # the scan must see the old ids the repository still stores (test_regressions' pinned examples, docs pages);
    # results regenerated since write key=value ids, so the count fell from 20+ to about 9
    assert len(found) > 5
    for text in sorted(found - KNOWN_BAD_OLD_IDS):
        case = parse_case_id(text)
        assert _old_id(case) == text and parse_case_id(case.id) == case


@pytest.mark.parametrize("text", [EXAMPLE_ID, EXAMPLE_FP8_ID])
def test_examples_parse_and_make_configs(text):
    case = parse_case_id(text)
    assert case.id == text == str(case)
    assert case.config().family == case.family
    assert "=" in text and "-" not in text.split("/")[2]


W4 = "w4a16/k/M=3,N=64,K=256,g=32,wt=uint4,ao=1,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=1"
F8 = "fp8_group_quant/k/T=5,H=512,g=128,dt=bf16,f8=e4m3fn,ue8m0=0,colmajor=0,regime=normal,tier=statistical,seed=7"


def _set(text: str, key: str, value: str | None) -> str:
    """`text` with key's value replaced (value None: the key dropped)."""
    head, body = text.rsplit("/", 1)
    parts = [p for p in body.split(",") if not p.startswith(key + "=")]
    return f"{head}/{','.join(parts + ([] if value is None else [f'{key}={value}']))}"


@pytest.mark.parametrize("text, field, allowed_part", [
    # a bad value names the key, the value and the allowed values
    (_set(W4, "N", "63"), "N", "multiple of 8"),
    (_set(W4, "K", "250"), "K", "multiple of group_size"),
    (_set(W4, "wt", "uint5"), "wt", "uint4b8"),
    (_set(W4, "fmt", "gguf"), "fmt", "gptq_v2"),
    (_set(W4, "fmt", "awq"), "act_order", "awq"),
    (_set(W4, "ao", "yes"), "ao", "1 or 0"),
    (_set(W4, "ao", "true"), "ao", "act_order"),
    (_set(W4, "dt", "fp32"), "dt", "bf16"),
    (_set(W4, "dt", "float16"), "dt", "fp16"),
    (_set(W4, "regime", "normal"), "regime", "tier='exact'"),
    (_set(W4, "regime", "saturation"), "regime", "heavy_tailed"),
    (_set(W4, "tier", "fuzzy"), "tier", "statistical"),
    (_set(W4, "seed", "x1"), "seed", "integer"),
    (_set(W4, "M", "0x"), "M", "integer"),
    (_set(W4, "M", "0"), "M", "positive"),
    (_set(W4, "M", "03"), "M", "written 3"),  # canonical values only: one id per case
    (_set(W4, "M", "+3"), "M", "written 3"),
    (_set(W4, "g", "X"), "g", "ch"),
    (_set(W4, "g", "-1"), "g", "written ch"),
    (_set(W4, "M", "3 4"), "M", "integer"),
    (_set(W4, "M", "$(id)"), "M", "integer"),
    # unknown, repeated and missing keys
    (W4 + ",bits=4", "bits", "one of ['M', 'N', 'K', 'g', 'wt', 'ao', 'dt', 'fmt', 'regime', 'tier', 'seed']"),
    (W4 + ",M=5", "M", "one value per key"),
    (_set(W4, "wt", None), "wt", "is required"),
    (_set(W4, "seed", None), "seed", "is required"),
    (W4 + ",", "case id field", "key=value"),
    (W4.replace("M=3", "M"), "case id field", "key=value"),
    # the frame
    ("w4a16/k/", "case id fields", "key=value pairs joined by ','"),
    ("w4a16/" + W4.split("/")[2], "case id", "FAMILY/KERNEL/FIELDS"),
    ("int8/" + W4.split("/", 1)[1], "family", "fp8_group_quant"),
    (W4.replace("/k/", "/k k/"), "kernel", "letters"),
    (W4.replace("/k/", "/k;rm/"), "kernel", "letters"),
    # fp8
    (_set(F8, "H", "500"), "hidden", "multiple"),
    (_set(F8, "f8", "e5m2"), "f8", "e4m3fnuz"),
    (_set(F8, "ue8m0", "pow2"), "ue8m0", "1 or 0"),
    (_set(F8, "colmajor", "diag"), "colmajor", "column_major_scales"),
    (_set(F8, "g", "ch"), "g", "integer"),
    (_set(F8, "M", "3"), "M", "a key of family fp8_group_quant"),
])
def test_bad_ids_name_field_value_and_allowed(text, field, allowed_part):
    with pytest.raises(InvalidInput) as e:
        parse_case_id(text)
    assert e.value.field == field
    assert allowed_part in e.value.allowed
    assert field in str(e.value)


@pytest.mark.parametrize("text, field, allowed_part", [
    ("w4a16/k/M3-N63-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1", "N", "multiple of 8"),
    ("w4a16/k/M3-N64-K256-g32-uint5-ao-fp16-gptq_v1-exact-exact-s1", "wt", "uint4b8"),
    ("w4a16/k/M3-N64-K256-g32-uint4-yes-fp16-gptq_v1-exact-exact-s1", "ao", "noao"),
    ("w4a16/k/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-x1", "seed", "s<seed>"),
    ("w4a16/k/M0x-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1", "M", "M<M>"),
    ("w4a16/k/M3-N64-K256-g032-uint4-ao-fp16-gptq_v1-exact-exact-s1", "g", "written 32"),
    ("w4a16/k/M3-N64", "case id fields", "11 fields"),
    ("fp8_group_quant/k/T5-H512-g128-bf16-e4m3fn-f32scale-diag-normal-statistical-s7", "colmajor", "rowmajor"),
    ("fp8_group_quant/k/T5-H512-g128-bf16-e4m3fn-pow2-rowmajor-normal-statistical-s7", "ue8m0", "f32scale"),
])
def test_bad_old_ids_name_field_value_and_allowed(text, field, allowed_part):
    with pytest.raises(InvalidInput) as e:
        parse_case_id(text)
    assert e.value.field == field
    assert allowed_part in e.value.allowed


def test_keys_with_a_default_may_be_left_out():
    case = parse_case_id(_set(_set(F8, "ue8m0", None), "colmajor", None))
    assert case == parse_case_id(F8) and not case.ue8m0 and not case.column_major_scales
    assert parse_case_id(_set(W4, "ao", None)).act_order is False
    assert "ao=0" in parse_case_id(_set(W4, "ao", None)).id  # printed ids always name every key


# ---- the Case API other modules rely on -----------------------------------------------------------------------

KW = dict(family="w4a16", kernel="triton_w4a16", regime="exact", tier="exact", seed=1234, group_size=32,
          dtype="float16", M=3, N=64, K=256, weight_type="uint4", act_order=True, format="gptq_v1")


def test_keyword_and_positional_construction():
    case = Case(**KW)
    assert case == parse_case_id(EXAMPLE_ID) and hash(case) == hash(parse_case_id(EXAMPLE_ID))
    # the v1 dataclass order: family, kernel, regime, tier, seed, group_size, dtype
    pos = Case("w4a16", "triton_w4a16", "exact", "exact", 1234, 32, "float16", M=3, N=64, K=256,
               weight_type="uint4", act_order=True, format="gptq_v1")
    assert pos == case
    with pytest.raises(TypeError):
        Case("w4a16", "triton_w4a16", "exact", "exact", 1234, 32, "float16", group_size=32, M=3)
    with pytest.raises(TypeError):
        Case(**KW, bogus=1)


def test_attribute_reads_own_and_other_family():
    w4, f8 = parse_case_id(EXAMPLE_ID), parse_case_id(EXAMPLE_FP8_ID)
    assert (w4.M, w4.N, w4.K, w4.group_size, w4.weight_type, w4.act_order, w4.dtype, w4.format) == (
        3, 64, 256, 32, "uint4", True, "float16", "gptq_v1")
    assert (f8.tokens, f8.hidden, f8.group_size, f8.dtype, f8.fp8_dtype, f8.ue8m0, f8.column_major_scales) == (
        5, 512, 128, "bfloat16", "float8_e4m3fn", False, False)
    assert (w4.family, w4.kernel, w4.regime, w4.tier, w4.seed) == ("w4a16", "triton_w4a16", "exact", "exact", 1234)
    # another family's fields read as absent, as the v1 dataclass's defaults did
    assert f8.M is None and f8.K is None and f8.weight_type is None and f8.format is None and f8.act_order is False
    assert w4.tokens is None and w4.hidden is None and w4.fp8_dtype is None
    assert w4.ue8m0 is False and w4.column_major_scales is False
    with pytest.raises(AttributeError):
        w4.no_such_field  # noqa: B018
    assert not hasattr(w4, "no_such_field")


def test_other_family_fields_only_at_their_absent_value():
    assert Case(**KW, tokens=None, ue8m0=False) == Case(**KW)
    with pytest.raises(InvalidInput) as e:
        Case(**KW, tokens=5)
    assert e.value.field == "tokens" and "None for family w4a16" in e.value.allowed
    with pytest.raises(InvalidInput) as e:
        Case(**KW, column_major_scales=True)
    assert e.value.field == "column_major_scales"


@pytest.mark.parametrize("change, field", [
    (dict(M=None), "M"), (dict(M=3.0), "M"), (dict(M=True), "M"), (dict(act_order="yes"), "act_order"),
    (dict(dtype="fp16"), "dtype"), (dict(seed=-1), "seed"), (dict(tier="fuzzy"), "tier"),
    (dict(kernel="a b"), "kernel"), (dict(family="int8"), "family"), (dict(regime="saturation"), "regime"),
])
def test_construction_validates(change, field):
    with pytest.raises(InvalidInput) as e:
        Case(**{**KW, **change})
    assert e.value.field == field


def test_missing_required_field():
    kw = dict(KW)
    del kw["K"]
    with pytest.raises(InvalidInput) as e:
        Case(**kw)
    assert e.value.field == "K" and "required" in e.value.allowed


def test_immutable_replace_with_kernel_to_dict_pickle():
    case = Case(**KW)
    with pytest.raises(AttributeError):
        case.M = 5
    with pytest.raises(AttributeError):
        case.kernel = "x"
    assert case.replace(M=5).M == 5 and case.M == 3
    assert case.replace(M=5) != case
    other = case.with_kernel("torch_dequant_w4a16")
    assert other.kernel == "torch_dequant_w4a16" and other.replace(kernel=case.kernel) == case
    assert case.to_dict() == KW | {}  # every field, nothing else
    assert list(case.to_dict())[:5] == ["family", "kernel", "regime", "tier", "seed"]
    assert Case(**case.to_dict()) == case
    assert pickle.loads(pickle.dumps(case)) == case
    assert eval(repr(case), {"Case": Case}) == case
    assert len({case, Case(**KW), other}) == 2
    with pytest.raises(InvalidInput):
        case.replace(N=63)


def test_config_comes_from_the_family():
    w4, f8 = parse_case_id(EXAMPLE_ID), parse_case_id(EXAMPLE_FP8_ID)
    assert w4.config().to_dict() == dict(weight_type="uint4", group_size=32, act_order=True, dtype="float16",
                                         format="gptq_v1", N=64, K=256)
    assert f8.config().to_dict() == dict(group_size=128, dtype="bfloat16", fp8_dtype="float8_e4m3fn", ue8m0=False,
                                         column_major_scales=False, hidden=512)


def test_v1_module_names():
    assert ids.W4A16_REGIMES == tuple(all_families()[0].regimes) and ids.W4A16_REGIMES[0] == "exact"
    # exact_wide is weight-only: its activations' signs pair with its weight's column signs
    assert set(ids.FP8_REGIMES) == set(ids.W4A16_REGIMES) - {"exact_wide"} | {"saturation", "fp8_boundaries"}
    assert ids.REGIMES == {f.name: tuple(f.regimes) for f in all_families()}
    assert TIERS == ("exact", "statistical")


def test_replay_line_carries_the_id_unquoted():
    case = parse_case_id(OLD_IDS["w4a16/rdna3_w4a16/M8-N64-K1024-g128-uint4b8-noao-fp16-gptq_v1-normal-statistical-s1"])
    assert replay_command(case.id) == f"python -m conformance repro {case.id}"
    assert shlex.split(replay_command(case.id))[-1] == case.id
