"""vLLM RDNAHybridW4A16: a symmetric (uint4b8) GPTQ layer's qzeros reach the kernels (silent when N/8 == G).

Standalone: imports vllm and torch only. vLLM's GPTQ method registers `qzeros` [G, N/8] for symmetric layers too
and names it as the kernel's zero-point parameter; RDNAHybridW4A16LinearKernel.apply_weights hands it to its kernels
as if it were [N/8, G] zero points instead of using the type's bias 8. With N/8 == G the shapes pass every check and
a GPTQ v1 checkpoint (which stores z - 1 = 7) is read one scale step off.

    python vllm_hybrid_symmetric_qzeros.py                  # on a gfx11/gfx12 GPU with vLLM installed
    python vllm_hybrid_symmetric_qzeros.py --simulate gfx1100  # CPU: Triton's interpreter, vLLM told it is on gfx1100

Expected: the output equals x @ W with W = (q - 8) * s (exact on this data). Got (vLLM 0.26.0 .. 0.34.0): every
output off. M = 6 takes the kernel's Triton path; M <= 5 (its HIP GEMV) reads the same wrong zeros.
"""
import argparse
import os
import sys
import types

p = argparse.ArgumentParser()
p.add_argument("--simulate", default=None, metavar="gfxNNNN", help="run on CPU as if on this RDNA GPU")
args = p.parse_args()
if args.simulate:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # vLLM keeps real Triton on a GPU-less host only with this set empty

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.model_executor.kernels.linear.mixed_precision import rdna_hybrid_w4a16 as hybrid  # noqa: E402
from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import MPLinearLayerConfig  # noqa: E402
from vllm.scalar_type import scalar_types  # noqa: E402

device = "cpu" if args.simulate else "cuda"
if args.simulate:  # what vLLM's ROCm platform would answer on that GPU
    arch = args.simulate
    rocm = types.ModuleType("vllm.platforms.rocm")
    for name, value in (("on_gfx1x", arch.startswith(("gfx11", "gfx12"))), ("on_gfx12x", arch.startswith("gfx12")),
                        ("on_gfx1151", arch == "gfx1151"), ("on_gfx115x", arch.startswith("gfx115"))):
        setattr(rocm, name, lambda v=value: v)
    sys.modules["vllm.platforms.rocm"] = rocm
    hybrid.current_platform = types.SimpleNamespace(is_rocm=lambda: True, is_cuda=lambda: False)
    import vllm.utils.platform_utils as pu
    pu.num_compute_units = lambda *a: 96

M, N, K, G = 6, 32, 256, 64  # N / 8 == K / G == 4
gen = torch.Generator().manual_seed(0)
q = torch.randint(0, 16, (K, N), generator=gen, dtype=torch.int32)
s = (2.0 ** torch.randint(-6, -2, (K // G, N), generator=gen)).half()  # powers of two: the result is exact
x = torch.randint(-3, 4, (M, K), generator=gen).half()
W = (q - 8).double() * s.double().repeat_interleave(G, dim=0)
expected = x.double() @ W

# GPTQ tensors as vLLM's GPTQ linear method registers them (v1 stores z - 1 = 7 for a symmetric layer)
shifts = torch.arange(8, dtype=torch.int32) * 4
qweight = (q.view(K // 8, 8, N) << shifts.view(1, 8, 1)).sum(1, dtype=torch.int32)  # [K/8, N]
qzeros = torch.full((K // G, N // 8), sum(7 << int(b) for b in shifts), dtype=torch.int64).to(torch.int32)


def param(t, **layout):
    p = torch.nn.Parameter(t.to(device), requires_grad=False)
    for k, v in layout.items():
        setattr(p, k, v)
    return p


layer = torch.nn.Module()
layer.qweight = param(qweight, input_dim=0, output_dim=1, packed_dim=0, packed_factor=8)
layer.scales = param(s, input_dim=0, output_dim=1)
layer.qzeros = param(qzeros, input_dim=0, output_dim=1, packed_dim=1, packed_factor=8)
fields = dict(full_weight_shape=(K, N), partition_weight_shape=(K, N), weight_type=scalar_types.uint4b8,
              act_type=torch.float16, group_size=G, zero_points=False)
if "has_g_idx" in MPLinearLayerConfig.__dataclass_fields__:  # releases before 0.33.0
    fields["has_g_idx"] = False
kernel = hybrid.RDNAHybridW4A16LinearKernel(MPLinearLayerConfig(**fields), "qweight", "scales", "qzeros")
with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device=device))):  # 0.34.0 reads kernel_config
    kernel.process_weights_after_loading(layer)
got = kernel.apply_weights(layer, x.to(device)).double().cpu()

diff = (got - expected).abs()
print(f"vllm {vllm.__version__}, RDNAHybridW4A16, M={M} N={N} K={K} group={G} uint4b8 GPTQ v1 (qzeros = 7)")
print(f"expected[0, :6] = {expected[0, :6].tolist()}")
print(f"got     [0, :6] = {got[0, :6].tolist()}")
print(f"{int((diff > 0).sum())} of {diff.numel()} outputs differ (max |diff| {float(diff.max()):.4g})")
sys.exit(1 if (diff > 0).any() else 0)
