"""A Triton kernel given an x on a device it does not run on fails with one line naming both devices
(kernels/_device.py), not with Triton's pointer error from inside the launch. On a CPU machine the kernels' device
is simulated (their check is told the kernels run on cuda) and a meta tensor stands for a tensor elsewhere; on a
GPU machine a CPU x is the real case. Nothing is launched: the check comes first."""
from __future__ import annotations

import importlib

import pytest
import torch

from conformance.core import registry
from conformance.families.config import Fp8QuantConfig
from references import codecs
from references.errors import InvalidInput
from references.generators import random_activations, random_canonical
from tests.unit.devices import ON_GPU

registry.load_all()
dev_mod = importlib.import_module("conformance_kernels._device")
tw = importlib.import_module("conformance_kernels.triton_w4a16")
hy = importlib.import_module("conformance_kernels.rdna_hybrid_w4a16")
fq = importlib.import_module("conformance_kernels.fp8_group_quant_triton")


def _w4a16_apply(name: str):
    """kernel `name`'s apply on its operands of a small exact-tier weight."""
    k = registry.get_kernel(name)
    w = random_canonical(64, 16, 32, "uint4", torch.float16, "exact", 1, act_order=name.endswith("actorder"))
    o = k.load(codecs.encode(w, "gptq_v2"))
    return lambda x: k.apply(o, x)


def _calls():
    """(kernel, its apply, a CPU x): M = 6 takes the hybrid's Triton route (M <= 5 is its GEMV, a model here)."""
    x16 = random_activations(6, 64, torch.float16, "exact", 2)
    fp8 = registry.get_kernel("fp8_group_quant_triton")
    p = fp8.load(Fp8QuantConfig(64, "bfloat16", hidden=128))
    return [*((n, _w4a16_apply(n), x16) for n in ("triton_w4a16", "triton_w4a16_actorder", "rdna_hybrid_w4a16")),
            ("fp8_group_quant_triton", lambda x: fp8.apply(p, x), torch.zeros(3, 128, dtype=torch.bfloat16))]


@pytest.fixture
def kernels_on_a_gpu(monkeypatch):
    """The device the kernels run on here, and where a CPU x does not belong: simulated on a CPU machine."""
    if not ON_GPU:
        monkeypatch.setattr(dev_mod, "kernel_device", lambda: "cuda")
    return str(dev_mod.run_device())


@pytest.mark.parametrize("i", range(4), ids=["triton_w4a16", "triton_w4a16_actorder", "rdna_hybrid_w4a16",
                                             "fp8_group_quant_triton"])
def test_a_cpu_x_for_kernels_on_a_gpu_is_refused_in_one_line(kernels_on_a_gpu, i):
    name, call, x = _calls()[i]
    with pytest.raises(InvalidInput) as e:
        call(x)
    msg = str(e.value)
    assert msg.startswith(f"{name}: x is on cpu, this kernel runs on {kernels_on_a_gpu}") and "\n" not in msg, msg
    assert e.value.field == "x.device" and e.value.value == "cpu"


def test_a_meta_x_at_the_launch_names_both_devices():
    """A meta tensor is a tensor on no device the kernels run on: the launch functions (which the custom ops call on
    real tensors; traced calls go to the fake impls) refuse it before touching a pointer."""
    here = str(dev_mod.run_device())
    meta = torch.empty((2, 64), dtype=torch.float16, device="meta")
    b_q, s = torch.zeros((64, 2), dtype=torch.int32), torch.ones((2, 16), dtype=torch.float16)
    launches = [("triton_w4a16", lambda: tw.launch_w4a16_gemm(meta, b_q, s, None, 32, 8)),
                ("rdna_hybrid_w4a16", lambda: hy._skinny_impl(meta, b_q.t().contiguous(), s.t(), None, 32, 8)),
                ("fp8_group_quant_triton", lambda: fq.launch(meta, 32, torch.float8_e4m3fn, 448.0, 1e-10, False,
                                                             False))]
    for name, launch in launches:
        with pytest.raises(InvalidInput, match=f"^{name}: x is on meta, this kernel runs on {here} "):
            launch()


def test_x_on_the_kernels_device_passes_the_check():
    dev_mod.check_x_device("triton_w4a16", torch.empty(1, device=dev_mod.run_device()))
