"""The conformance test modules, shipped in the package.

Run from anywhere: `python -m pytest -p conformance.pytest_plugin --pyargs conformance.suite`."""
