"""The machinery: registry and selection, targets, cases, strategies, tolerance, harness, reports, CLI."""
