"""Check ids (conformance.cases.check_ids): every contract and fusion check input has one id in the case-id grammar,
it round-trips, bad ones are one-line errors naming the key, and `repro` answers them with git-bisect exit codes
(the pass/fail replays of real failures: tests/unit/test_contract_mutants.py)."""
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance import cli
from conformance.cases import check_ids
from conformance.cases.check_ids import CHECKS, EXAMPLE_CHECK_ID, CheckCase, parse_id
from conformance.cases.ids import Case, parse_case_id
from conformance.checks import contracts, fusion
from conformance.families import all_families
from conformance.families.config import Fp8QuantConfig
from references.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "case-ids.md"
BEGIN, END = "<!-- BEGIN generated: python -m conformance.cases.check_ids -->", "<!-- END generated check ids -->"
CHECKED = [f for f in all_families() if f.contract_spec_fields]


def test_docs_show_the_check_id_table():
    text = DOC.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{DOC} needs the {BEGIN} ... {END} block"
    block = text.split(BEGIN)[1].split(END)[0].strip("\n") + "\n"
    assert block == check_ids.render_check_fields(), (
        f"{DOC} is out of date with the check-id table: paste the output of `python -m conformance.cases.check_ids` "
        "between its markers")


@pytest.mark.parametrize("fam", CHECKED, ids=lambda f: f.name)
def test_each_contract_spec_key_is_one_id_field(fam):
    """Every case field of the family is written from exactly one spec key, and the specs the suite draws have
    exactly those keys (plus seed): nothing of a check's input is left out of its id."""
    keys = [k for k, _ in fam.contract_spec_fields]
    attrs = [a for _, a in fam.contract_spec_fields]
    assert sorted(attrs) == sorted(f.attr for f in fam.case_fields) and len(set(keys)) == len(keys)
    for spec in fam.contract_representatives():
        assert set(spec) == {*keys, "seed"}
    assert [f.key for f in check_ids.check_id_fields(fam)] == ["check", *(f.key for f in fam.case_fields), "seed"]


@pytest.mark.parametrize("fam", CHECKED, ids=lambda f: f.name)
def test_check_ids_round_trip_every_contract_spec(fam):
    @settings(max_examples=25, database=None, derandomize=True, deadline=None)
    @given(spec=fam.contract_specs(), check=st.sampled_from(CHECKS))
    def prop(spec, check):
        cc = CheckCase.from_spec(check, "some_kernel", fam.name, spec)
        assert parse_id(cc.id) == cc == check_ids.parse_check_id(cc.id) and cc.spec() == spec
        assert shlex.quote(cc.id) == cc.id and check_ids.is_check_id(cc.id)
        assert cc.id.startswith(f"{fam.name}/some_kernel/check={check},") and cc.id.endswith(f",seed={spec['seed']}")
        # keys in any order, as in a case id
        head, body = cc.id.rsplit("/", 1)
        assert parse_id(f"{head}/{','.join(reversed(body.split(',')))}") == cc
    prop()


def test_fusion_ids_name_the_layer_config_rows_and_seed():
    cfg = Fp8QuantConfig(group_size=128, dtype="float16", hidden=256, ue8m0=True, column_major_scales=True)
    cid = fusion.check_id("fp8_group_quant_triton", cfg, fusion.TOKENS, 3)
    assert cid == ("fp8_group_quant/fp8_group_quant_triton/"
                   "check=fusion,T=7,H=256,g=128,dt=fp16,f8=e4m3fn,ue8m0=1,colmajor=1,seed=3")
    cc = parse_id(cid)
    assert (cc.config(), cc.rows, cc.seed) == (cfg, 7, 3)


def test_case_ids_still_parse_as_cases():
    assert isinstance(parse_id("w4a16/triton_w4a16/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1234"), Case)
    assert not check_ids.is_check_id("w4a16/triton_w4a16/M=3,N=64,K=256,g=32,wt=uint4,ao=1,dt=fp16,fmt=gptq_v1,"
                                     "regime=exact,tier=exact,seed=1234")


@pytest.mark.parametrize("text, field, allowed_part", [
    (EXAMPLE_CHECK_ID.replace("fake_vs_real", "fake"), "check", "fake_vs_real"),
    (EXAMPLE_CHECK_ID + ",tier=exact", "tier", "a key of a check id of family w4a16"),
    (EXAMPLE_CHECK_ID.replace("M=5,", ""), "M", "required"),
    (EXAMPLE_CHECK_ID.replace("K=256", "K=250"), "K", "a multiple of group_size=128"),
    (EXAMPLE_CHECK_ID.replace("seed=1", "seed=01"), "seed", "written 1"),
    (EXAMPLE_CHECK_ID.replace("w4a16/", "w5a16/", 1), "family", "w4a16"),
])
def test_bad_check_ids_name_the_key(text, field, allowed_part):
    with pytest.raises(InvalidInput) as ei:
        parse_id(text)
    assert ei.value.field == field and allowed_part in ei.value.allowed, str(ei.value)


def test_the_case_parser_points_a_check_id_to_repro():
    with pytest.raises(InvalidInput, match="a check id.*python -m conformance repro"):
        parse_case_id(EXAMPLE_CHECK_ID)


@pytest.mark.parametrize("argv, code, says", [
    (["repro", EXAMPLE_CHECK_ID.replace("fake_vs_real", "fake")], 2, "error: check='fake' is invalid"),
    (["repro", "fp8_group_quant/fp8_group_quant_triton/route=triton,64,bfloat16"], 2, "error: "),  # old fusion label
    (["repro", EXAMPLE_CHECK_ID, "--target", "gfx1100"], 2, "error: --target='gfx1100' is invalid"),
    (["repro", EXAMPLE_CHECK_ID.replace("triton_w4a16", "no_such_kernel")], 125, "SKIP "),
    (["repro", EXAMPLE_CHECK_ID.replace("triton_w4a16", "torch_dequant_w4a16")], 125, "declares no op"),
    (["repro", EXAMPLE_CHECK_ID.replace("fake_vs_real", "fusion")], 2, "error: check='fusion' is invalid"),
])
def test_repro_answers_check_ids_it_cannot_judge(argv, code, says, capsys):
    assert cli.main(argv) == code
    out, err = capsys.readouterr()
    assert says in out + err and "Traceback" not in out + err, out + err


def test_a_failure_without_an_id_of_its_own_gets_its_samples_id():
    kernel = contracts.custom_op_kernels("w4a16")[0]
    spec = dict(contracts.get_family(kernel.family).contract_representatives()[0])

    @contracts.names_its_input("opcheck")
    def broken(k, sample):
        raise contracts.ContractFailure("broken on purpose")

    with pytest.raises(contracts.ContractFailure) as ei:
        broken(kernel, contracts.Sample(None, None, spec))
    assert ei.value.case_id == CheckCase.from_spec("opcheck", kernel.name, kernel.family, spec).id
    group = Exception("two failures")  # an exception group (hypothesis's distinct failures): its first id
    group.exceptions = (ValueError("no id"), ei.value)
    assert contracts.failure_case_id(group) == ei.value.case_id
