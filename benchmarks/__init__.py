"""GPU benchmarking (installed as `conformance_bench`; the `bench` command loads it lazily)."""
