"""Checks: the harness (exact and statistical tiers), tolerance model, contract and fusion checks."""
