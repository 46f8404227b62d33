"""Case ids: one shell-safe line that round-trips exactly; bad ids name the field, the value, what is allowed."""
import pytest
from hypothesis import given

from conformance.cases.ids import EXAMPLE_FP8_ID, EXAMPLE_ID, parse_case_id
from conformance.cases.strategies import any_case_ids
from references.errors import InvalidInput


@given(any_case_ids())
def test_case_id_round_trips(case):
    text = case.id
    assert "\n" not in text and " " not in text
    assert parse_case_id(text) == case
    assert parse_case_id(text).id == text


@pytest.mark.parametrize("text", [EXAMPLE_ID, EXAMPLE_FP8_ID])
def test_examples_parse_and_make_configs(text):
    case = parse_case_id(text)
    assert case.id == text
    assert case.config().family == case.family


@pytest.mark.parametrize("text, field, allowed_part", [
    ("w4a16/k/M3-N63-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1", "N", "multiple of 8"),
    ("w4a16/k/M3-N64-K250-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1", "K", "multiple of group_size"),
    ("w4a16/k/M3-N64-K256-g32-uint5-ao-fp16-gptq_v1-exact-exact-s1", "weight_type", "uint4b8"),
    ("w4a16/k/M3-N64-K256-g32-uint4-ao-fp16-gguf-exact-exact-s1", "format", "gptq_v2"),
    ("w4a16/k/M3-N64-K256-g32-uint4-ao-fp16-awq-exact-exact-s1", "act_order", "awq"),
    ("w4a16/k/M3-N64-K256-g32-uint4-yes-fp16-gptq_v1-exact-exact-s1", "act_order", "noao"),
    ("w4a16/k/M3-N64-K256-g32-uint4-ao-fp32-gptq_v1-exact-exact-s1", "dtype", "bf16"),
    ("w4a16/k/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-normal-exact-s1", "regime", "tier='exact'"),
    ("w4a16/k/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-fuzzy-s1", "tier", "statistical"),
    ("w4a16/k/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-x1", "seed", "s<non-negative int>"),
    ("w4a16/k/M0x-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1", "M", "M<positive int>"),
    ("w4a16/k/M3-N64-K256-gX-uint4-ao-fp16-gptq_v1-exact-exact-s1", "group_size", "gch"),
    ("w4a16/k/M3-N64", "case id fields", "11 fields"),
    ("w4a16/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1", "case id", "FAMILY/KERNEL/FIELDS"),
    ("int8/k/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1", "family", "fp8_group_quant"),
    ("w4a16/k k/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1", "kernel", "letters"),
    ("fp8_group_quant/k/T5-H500-g128-bf16-e4m3fn-f32scale-rowmajor-normal-statistical-s7", "hidden", "multiple"),
    ("fp8_group_quant/k/T5-H512-g128-bf16-e5m2-f32scale-rowmajor-normal-statistical-s7", "fp8_dtype", "e4m3fnuz"),
    ("fp8_group_quant/k/T5-H512-g128-bf16-e4m3fn-pow2-rowmajor-normal-statistical-s7", "ue8m0", "f32scale"),
    ("fp8_group_quant/k/T5-H512-g128-bf16-e4m3fn-f32scale-diag-normal-statistical-s7", "column_major_scales",
     "colmajor"),
])
def test_bad_ids_name_field_value_and_allowed(text, field, allowed_part):
    with pytest.raises(InvalidInput) as e:
        parse_case_id(text)
    assert e.value.field == field
    assert allowed_part in e.value.allowed
    assert field in str(e.value)
