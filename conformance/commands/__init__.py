"""CLI commands, one module each (see conformance/cli.py for the module contract)."""
