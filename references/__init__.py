"""The truth: scalar types, canonical quantized weight, quantizers, format codecs, fp64 references.

This package imports neither `conformance` nor `kernels`.
"""
