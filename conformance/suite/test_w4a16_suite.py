"""The W4A16 suite: every registered w4a16 kernel, exact and statistical tiers, on gate-accepted cases."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.suite._common import check_one


@pytest.mark.conformance_family("w4a16")
@given(data=st.data())
def test_w4a16_conformance(data, conformance_kernel, conformance_tier, conformance_target, conformance_profile,
                           conformance_case):
    check_one(data, conformance_kernel, conformance_target, conformance_tier, conformance_profile, conformance_case)
