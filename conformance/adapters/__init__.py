"""Shipped adapters: third-party kernels as conformance kernels, loaded as plugins.

    --conformance-plugin conformance.adapters.vllm      every MPLinearKernel of the installed vLLM, and its
                                                        per-token-group FP8 quant
    --conformance-plugin conformance.adapters.gemlite   GemLite's A16W4 GEMM (gemlite_a16w4)

Each module registers its kernels when imported; where the third-party package does not import it registers a
gate-only kernel whose gate gives the reason. Adapters import only conformance.api, references, torch and the
package they adapt. See docs/plugins.md.
"""
