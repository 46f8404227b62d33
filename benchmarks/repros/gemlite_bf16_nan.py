"""GemLite A16W4: NaN outputs at bf16 column tails (M = 9, N = 40, K = 256, group 128, asymmetric 4-bit), in some
processes only.

Standalone: imports gemlite and torch only. Seen with GemLite 0.6.0.post2 on an H200 (torch 2.11, Triton 3.6): NaN in
columns 1 and 19 of every row in 3 of 4 fresh processes; fp16, or N = 64, clean. It depends on the launch config
GemLite's autotuner (the default "fast" mode) picks in that process, so this script replays the call in --runs fresh
processes and counts. GemLite imports only where torch sees a CUDA device: GPU only.

    python gemlite_bf16_nan.py [--runs 4]

Expected: finite outputs equal to x @ W, W = (q - z) * s, within bf16 rounding. Got: NaN in some runs.
"""
import argparse
import subprocess
import sys

import torch

p = argparse.ArgumentParser()
p.add_argument("--runs", type=int, default=4, help="fresh processes to replay in (default 4)")
p.add_argument("--once", action="store_true", help=argparse.SUPPRESS)  # one replay, in this process
args = p.parse_args()

if not args.once:
    bad = 0
    for i in range(args.runs):
        r = subprocess.run([sys.executable, __file__, "--once"], capture_output=True, text=True)
        print(f"run {i + 1}: {(r.stdout + r.stderr).strip().splitlines()[-1] if (r.stdout + r.stderr).strip() else ''}")
        bad += r.returncode != 0
    print(f"{bad} of {args.runs} runs wrong")
    sys.exit(1 if bad else 0)

import gemlite  # noqa: E402
from gemlite.helper import A16Wn  # noqa: E402

M, N, K, G, dt = 9, 40, 256, 128, torch.bfloat16
gen = torch.Generator().manual_seed(41)
q = torch.randint(0, 16, (N, K), generator=gen, dtype=torch.uint8)  # GemLite's layout: [out, in]
z = torch.randint(0, 16, (N, K // G), generator=gen).to(dt)
s = (2.0 ** torch.randint(-6, -2, (N, K // G), generator=gen)).to(dt)
x = torch.randint(-3, 4, (M, K), generator=gen).to(dt)
W = (q.double() - z.double().repeat_interleave(G, 1)) * s.double().repeat_interleave(G, 1)  # [N, K]
expected = x.double() @ W.t()
lin = A16Wn(device="cuda", dtype=dt).from_weights(W_q=q.cuda(), scales=s.cuda(), zeros=z.cuda(), W_nbits=4,
                                                  group_size=G)
got = lin(x.cuda()).double().cpu()
nan = ~torch.isfinite(got)
err = (got - expected).abs()[~nan]
cols = sorted(set(torch.nonzero(nan)[:, 1].tolist()))
print(f"gemlite {getattr(gemlite, '__version__', '?')}, {torch.cuda.get_device_name()}: {int(nan.sum())} of "
      f"{got.numel()} outputs not finite (columns {cols}); max |err| of the finite ones {float(err.max()):.3g} "
      f"(expected[0, :3] {expected[0, :3].tolist()}, got[0, :3] {got[0, :3].tolist()})")
sys.exit(1 if nan.any() else 0)
