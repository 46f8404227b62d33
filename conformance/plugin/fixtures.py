"""The suite's fixtures: the target, profile and replayed case of the run, and the kernel of a parametrization."""
from __future__ import annotations

import pytest

from conformance.plugin.options import _replay_case, _target


@pytest.fixture(scope="session")
def conformance_target(request):
    """The Target under test (--conformance-target, default auto: this machine)."""
    return _target(request.config)


@pytest.fixture(scope="session")
def conformance_profile(request):
    """The active profiles.Profile (hypothesis settings already loaded)."""
    from conformance.cases.profiles import get_profile

    return get_profile(request.config.getoption("--conformance-profile"))


@pytest.fixture(scope="session")
def conformance_case(request):
    """The Case given by --conformance-case, or None."""
    return _replay_case(request.config)


@pytest.fixture
def conformance_kernel(conformance_kernel_name, conformance_target):
    """The registry Kernel for this parametrization."""
    from conformance.core import registry

    return registry.get_kernel(conformance_kernel_name)

