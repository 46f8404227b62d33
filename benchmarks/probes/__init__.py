"""One-off probes, each run by hand to answer one question (a design choice, a register count, a bug's origin, a
tolerance margin): decode_probe (the planar decode path against dense and GemLite on a GPU), gemv_probe (what limits
the M=1 path), gemlite_nan_probe (GemLite's NaN outputs with and without NaN-filled allocations), host_overhead
(the host Python of an eager launch, launches stubbed), ptx_regs (ptxas register reports with no GPU),
fp16_partials_margin (how far the fp16-partials mutant sits from the tolerance). Scripts, run from the repository
root as `python benchmarks/probes/NAME.py ...` (each docstring says how); nothing of the suite or the bench imports
them. Their figures live in benchmarks/results/.
"""
