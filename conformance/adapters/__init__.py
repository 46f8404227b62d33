"""Shipped adapters: third-party kernels as conformance kernels, loaded as plugins.

    --conformance-plugin conformance.adapters.vllm      every MPLinearKernel of the installed vLLM, and its
                                                        per-token-group FP8 quant
    --conformance-plugin conformance.adapters.gemlite   GemLite's A16W4 GEMM (gemlite_a16w4)
    --conformance-plugin conformance.adapters.torch_int4  torch's int4pack GEMMs: CPU (torch_int4_cpu) and CUDA
                                                        tinygemm (torch_int4_tinygemm)
    --conformance-plugin conformance.adapters.torchao   torchao's FP8 1x128 act quant Triton kernels
                                                        (torchao_fp8_act_quant, torchao_fp8_act_quant_lhs)

Each module registers its kernels when imported; where the third-party package does not import it registers a
gate-only kernel whose gate gives the reason. Adapters import only conformance.api, references, torch and the
package they adapt (the torchao adapter also calls conformance.core.runtime.configure_triton first, as the built-in
Triton kernels do). See docs/plugins.md.
"""
