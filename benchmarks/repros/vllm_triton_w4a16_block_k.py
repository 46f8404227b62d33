"""vLLM TritonW4A16: BLOCK_K clamped to the group size without Triton's tile rules.

Standalone: imports vllm and torch only. `_triton_w4a16_gemm_impl` clamps BLOCK_K to the group size
(`if group_size < BLOCK_K: BLOCK_K = group_size`, added by vllm#39705), and TritonW4A16LinearKernel.can_implement
accepts any group size dividing K (channelwise: group = K). Two Triton rules then break:

  --case k40   group = K = 40 on gfx11/gfx12 (BLOCK_K 64 -> 40): `tl.arange(0, 40)`, "must be a power of 2"
  --case k8    channelwise K = 8 on CUDA (BLOCK_K 32 -> 8): `tl.dot` with K = 8, refused when compiling for sm90
               ("Input shapes should have M >= 1, N >= 1 and K >= 16"); Triton's interpreter does not check this
               rule, so on CPU this case runs and only a GPU shows the error

    python vllm_triton_w4a16_block_k.py --case k40                      # on a gfx11/gfx12 GPU
    python vllm_triton_w4a16_block_k.py --case k8                       # on an sm80+ GPU
    python vllm_triton_w4a16_block_k.py --case k40 --simulate gfx1100   # CPU: Triton's interpreter

Expected: the output equals x @ W, W = (q - 8) * s (exact on this data), or a refusal from can_implement.
Got: an error from Triton at launch (vLLM 0.34.0; the clamp since vllm#39705).
"""
import argparse
import os
import sys
import types

p = argparse.ArgumentParser()
p.add_argument("--case", choices=("k40", "k8"), required=True)
p.add_argument("--simulate", default=None, metavar="gfxNNNN|sm90", help="run on CPU as if on this GPU")
args = p.parse_args()
if args.simulate:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # vLLM keeps real Triton on a GPU-less host only with this set empty

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.model_executor.kernels.linear.mixed_precision import triton_w4a16 as tw  # noqa: E402

device = "cpu" if args.simulate else "cuda"
if args.simulate:  # what vLLM's platform would answer on that GPU
    rocm = args.simulate.startswith("gfx")
    mod = types.ModuleType("vllm.platforms.rocm")
    mod.on_gfx1x = lambda: args.simulate.startswith(("gfx11", "gfx12"))
    sys.modules["vllm.platforms.rocm"] = mod
    tw.current_platform = types.SimpleNamespace(is_rocm=lambda: rocm, is_cuda=lambda: not rocm)

M, N, K = (1, 8, 40) if args.case == "k40" else (1, 64, 8)
G = K  # k40: group_size = K = 40; k8: channelwise (vLLM passes group_size = K)
gen = torch.Generator().manual_seed(0)
q = torch.randint(0, 16, (K, N), generator=gen, dtype=torch.int32)
s = (2.0 ** torch.randint(-6, -2, (K // G, N), generator=gen)).half()
x = torch.randint(-3, 4, (M, K), generator=gen).half()
expected = x.double() @ ((q - 8).double() * s.double().repeat_interleave(G, dim=0))
shifts = torch.arange(8, dtype=torch.int32) * 4
b_q = (q.view(K, N // 8, 8) << shifts).sum(2, dtype=torch.int32)  # [K, N/8], GPTQ sequential along N

print(f"vllm {vllm.__version__}, TritonW4A16 wrapper, M={M} N={N} K={K} group={G} uint4b8 (zp_bias 8), "
      f"{args.simulate or torch.cuda.get_device_name()}")
print(f"expected[0, :4] = {expected[0, :4].tolist()}")
try:
    got = tw._triton_w4a16_gemm_impl(x.to(device), b_q.to(device), s.to(device), None, G, 8).double().cpu()
except Exception as e:  # noqa: BLE001 - the finding is this error
    print(f"got: {type(e).__name__}: {' '.join(str(e).split())[:400]}")
    sys.exit(1)
diff = (got - expected).abs()
print(f"got     [0, :4] = {got[0, :4].tolist()}")
print(f"{int((diff > 0).sum())} of {diff.numel()} outputs differ")
sys.exit(1 if (diff > 0).any() else 0)
