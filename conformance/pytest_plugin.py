"""The conformance pytest plugin: options, kernel loading, fixtures, summary and reports (grows with the suite)."""
from __future__ import annotations


def pytest_addoption(parser):
    g = parser.getgroup("conformance")
    g.addoption("--conformance-plugin", action="append", default=[], metavar="MODULE",
                help="import MODULE to register external kernels (repeatable)")


def pytest_configure(config):
    from . import registry

    registry.load_all(config.getoption("--conformance-plugin"))
