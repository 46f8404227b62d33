"""The conformance test modules, shipped in the package: `pytest --pyargs conformance.suite`."""
