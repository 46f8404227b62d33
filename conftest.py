"""Root conftest: loads the conformance pytest plugin (options, fixtures, summary, reports)."""
pytest_plugins = ["conformance.pytest_plugin"]
