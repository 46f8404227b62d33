"""Stand-in for the `vllm` package (tests only): see tests/unit/vllm_standin/README.md."""
__version__ = "0.0.0+standin"
