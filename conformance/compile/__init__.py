"""The compile lane (`python -m conformance compile`, pytest `--conformance-compile-targets`): every Triton kernel's
specializations compiled by each GPU target's own compiler on this machine, no GPU needed, with resources judged
against the target's limits. Modules: `lane` (what to compile, records, replay ids), `triton_driver` (Triton's
backends), `resources` (limits and occupancy), `hip` (clang for HIP sources), `baseline` (what changes from a
baseline target). The limits live in conformance.core.target_limits (one table, cited). docs/validating-a-target.md.
"""
