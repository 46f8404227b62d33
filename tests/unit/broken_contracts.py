"""Test-only kernels that break ONE custom-op contract (a conformance plugin), and the contract bugs of the catalogue.

`broken_fake_wrong_dtype` is triton_w4a16 behind an op whose fake impl returns float32 while the real op returns
the act dtype: eager numbers are right, torch.compile plans every later op on the wrong dtype. The other contract
mutants live in tests/unit/broken_contract_kernels.py (tested by tests/unit/test_contract_mutants.py);
CONTRACT_BUGS names each contract mutant's one bug and the check (conformance/checks/contracts.py, fusion.py)
that must fail it, for tests/unit/broken_registry.py.
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.registry import register_kernel

registry.load_all()
from conformance_kernels import triton_w4a16 as tw  # noqa: E402 - the built-in package exists after load_all

PLUGIN = "tests.unit.broken_contracts"
CONTRACT_PLUGIN = "tests.unit.broken_contract_kernels"  # the older contract mutants
TritonW4A16 = type(registry.get_kernel("triton_w4a16"))


@torch.library.custom_op("conformance_mutants::w4a16_wrong_dtype", mutates_args=())
def _wrong_dtype(x: torch.Tensor, b_q: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor | None,
                 group_size: int, zp_bias: int) -> torch.Tensor:
    return tw.gemm_any_rank(x, lambda x2: tw.launch_w4a16_gemm(x2.contiguous(), b_q, scales, qzeros, group_size,
                                                               zp_bias))


@_wrong_dtype.register_fake
def _(x, b_q, scales, qzeros, group_size, zp_bias):
    return x.new_empty((*x.shape[:-1], b_q.shape[1] * 8), dtype=torch.float32)  # BUG: not x.dtype


@register_kernel
class FakeWrongDtype(TritonW4A16):
    """BUG: the op's fake impl says float32 where the real op returns the act dtype (fp16/bf16)."""

    name = "broken_fake_wrong_dtype"
    bug = "fake impl returns float32, the real op the act dtype"
    op = torch.ops.conformance_mutants.w4a16_wrong_dtype.default

    def apply(self, o, x):
        from conformance_kernels._w4a16_common import to_device

        o = to_device(o, x.device)
        return self.op(x, o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias)



# contract mutant -> (plugin module, its one bug, the contract check that must fail it)
CONTRACT_BUGS = {
    "broken_fake_wrong_dtype": (PLUGIN, FakeWrongDtype.bug, "fake_vs_real"),
    "mutant_fake_wrong_n": (CONTRACT_PLUGIN, "fake impl returns N/2 columns (4 nibbles per word)", "fake_vs_real"),
    "mutant_plain_python_op": (CONTRACT_PLUGIN, "op is a plain Python function, not a torch.library op",
                               "make_fx"),
    "mutant_frozen_tiles": (CONTRACT_PLUGIN, "tile config chosen in Python on the traced M: compile freezes the "
                            "prefill tiles for decode", "compile_boundary"),
    "mutant_wrapped_quant": (CONTRACT_PLUGIN, "quant op wrapped in another op: the RMSNorm fusion pass cannot match "
                             "it", "fusion"),
}
