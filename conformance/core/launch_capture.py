"""A kernel's launch, read off a real call: run its `load` and `apply` on small CPU tensors with every Triton launch
recorded instead of run, and turn the recorded calls into `Program`s (conformance.core.launch).

For kernels whose tile choice lives in code the suite does not own (a plugin's wrapper: vLLM's, GemLite's), this is
how `launch` says what the wrapper launches on a target: the wrapper runs its own selection under the target (the
adapter makes the platform answer for it) and its `kernel[grid](...)` is recorded with the arguments it passes.
Nothing is computed: outputs are left as allocated. Also used by tests to check that a kernel's declared launch
equals the one its `apply` makes.
"""
from __future__ import annotations

import contextlib
import inspect
import threading

from conformance.core.launch import Program, Ptr, param_names, raw_function, triton_program

# keyword arguments of a launch that are compile options, not kernel parameters
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "waves_per_eu", "matrix_instr_nonkdim",
                  "kpack", "enable_fp_fusion")
_lock = threading.Lock()


class _Recorded(Exception):
    """Not raised to callers: marks a launch that was recorded, not run."""


@contextlib.contextmanager
def recording():
    """Inside, every `jit_fn[grid](...)` (interpreted or compiled) appends (fn, args, kwargs) to the yielded list
    and returns without running."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    calls: list = []

    def run(self, *args, grid=None, warmup=False, **kwargs):
        calls.append((self, args, kwargs))

    with _lock:
        saved = (InterpretedFunction.run, JITFunction.run)
        InterpretedFunction.run = run
        JITFunction.run = run
        try:
            yield calls
        finally:
            InterpretedFunction.run, JITFunction.run = saved


def _arg(v):
    import torch

    if isinstance(v, torch.Tensor):
        nbytes = v.untyped_storage().nbytes()
        return Ptr(str(v.dtype).removeprefix("torch."), aligned=v.data_ptr() % 16 == 0, small=nbytes <= 2**31 - 1)
    return v


def program_of_call(fn, args, kwargs) -> Program:
    """The Program one recorded launch compiles (defaults of the function filled in, options split off)."""
    names = param_names(fn)
    sig = inspect.signature(raw_function(fn))
    bound = dict(zip(names, args))
    opts = {}
    for k, v in kwargs.items():
        if k in names:
            bound[k] = v
        elif k in LAUNCH_OPTIONS:
            opts[k] = v
    for n, p in sig.parameters.items():
        if n not in bound and p.default is not inspect.Parameter.empty:
            bound[n] = p.default
    return triton_program(fn, {n: _arg(v) for n, v in bound.items()}, opts)


def capture_programs(call) -> list[Program]:
    """The programs `call()` launches (its Triton launches recorded, not run)."""
    with recording() as calls:
        call()
    return [program_of_call(fn, a, kw) for fn, a, kw in calls]


def checkpoint_for(config, seed: int = 0):
    """A small seeded checkpoint of a W4A16 config (its format, type, group, act-order, dtype, N, K), for a load
    whose launch is captured: the values do not matter, the layout does."""
    from conformance.core.dtypes import torch_dtype
    from references import codecs
    from references.generators import random_canonical

    w = random_canonical(config.K, config.N, config.group_size, config.weight_type, torch_dtype(config.dtype),
                         "normal", seed, config.act_order)
    # GPTQ v1 cannot store a zero point of 0 (it stores z - 1): the int32 borrow real v1 checkpoints carry, as the
    # W4A16 family's cases encode it (else a seed that draws z = 0 refuses the encode: a LAUNCH ERROR in the lane)
    policy = {"v1_zero_policy": "borrow"} if config.format == "gptq_v1" else {}
    return codecs.encode(w, config.format, **policy)
