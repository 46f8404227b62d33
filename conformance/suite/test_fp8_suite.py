"""The FP8 group-quant suite: every registered fp8_group_quant kernel, both tiers, on gate-accepted cases."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.suite._common import check_one


@pytest.mark.conformance_family("fp8_group_quant")
@given(data=st.data())
def test_fp8_conformance(data, conformance_kernel, conformance_tier, conformance_target, conformance_profile,
                         conformance_case):
    check_one(data, conformance_kernel, conformance_target, conformance_tier, conformance_profile, conformance_case)
