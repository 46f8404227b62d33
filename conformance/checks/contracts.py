"""Contract checks for kernels exposed as torch.library custom ops (why: docs/shipped-bugs.md).

Each check takes a kernel (its `op` handle) and samples (operands + activations built through the
kernel's own `load`), raises ContractFailure with a readable reason when the contract is broken, and
records one result per kernel through conformance.results. Checks: "fake_vs_real", "make_fx",
"opcheck", "compile_boundary" (the fusion check lives in conformance.fusion).

Every failure replays: an exception out of a check carries `case_id`, the check id of the sample it failed on
(conformance.cases.check_ids: `w4a16/KERNEL/check=opcheck,M=5,...,seed=1`), and `run_check` records it with its
replay line (`python -m conformance repro ID`, conformance.checks.check_replay) in the fields a case's record uses.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from conformance.cases.check_ids import CHECKS as CONTRACT_CHECKS
from conformance.cases.check_ids import CheckCase
from conformance.core import results
from conformance.core.bits import bits_equal
from conformance.core.kernel import RunContext, kernel_call
from conformance.core.registry import Kernel, all_kernels
from conformance.core.targets import Target, parse_target
from conformance.families import get_family

# CONTRACT_CHECKS (from the check-id grammar): every contract check a report shows, in its column order; the
# four here and the fusion check (conformance.checks.fusion)
CHECKS = tuple(c for c in CONTRACT_CHECKS if c != "fusion")
OPCHECK_UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic", "test_autograd_registration")
# targets tried, in order, to find one whose gate accepts a config: gates describe the hardware a
# config is served on, but every sample here runs on the CPU (Triton interpreter or plain torch)
GATE_TARGETS = ("cpu", "rocm:gfx1100", "rocm:gfx1201", "cuda:90")
DECODE_M = 1

# ops a wrapper may add around the kernel's op without computing anything (views and metadata)
METADATA_OPS = frozenset({
    "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.t.default",
    "aten.transpose.int", "aten.permute.default", "aten.expand.default", "aten.squeeze.dim",
    "aten.unsqueeze.default", "aten.alias.default", "aten.detach.default", "aten.as_strided.default",
    "aten.sym_size.int", "aten.sym_stride.int", "aten.sym_numel.default", "aten.slice.Tensor",
    "Size",  # torch.Size(...) of a dynamic shape in a dynamo graph (vLLM's apply_weights builds its out_shape)
})
# what a fake impl may do: allocate outputs and take views of them
ALLOCATION_OPS = METADATA_OPS | frozenset({
    "aten.empty.memory_format", "aten.new_empty.default", "aten.empty_strided.default",
    "aten.new_empty_strided.default", "aten.empty_like.default", "aten.empty_permuted.default",
})


class ContractFailure(AssertionError):
    """A kernel broke a custom-op contract; the message says which and how."""


# ------------------------------------------------------------------------------------------------
# Kernels, ops and samples
# ------------------------------------------------------------------------------------------------

def custom_op_kernels(family: str | None = None) -> list[Kernel]:
    """Registered kernels that declare an op handle (kernel.op is not None), deterministic order."""
    return [k for k in all_kernels(family) if k.op is not None]


def op_overload(kernel: Kernel) -> torch._ops.OpOverload:
    """The kernel's op as an OpOverload (a packet means its .default); anything else is a failure."""
    op = kernel.op
    if isinstance(op, torch._ops.OpOverloadPacket):
        op = op.default
    if not isinstance(op, torch._ops.OpOverload):
        raise ContractFailure(f"kernel={kernel.name}: op={op!r} is a {type(op).__name__}, not a torch.library "
                              "custom op (OpOverload): torch.compile would trace its Python body")
    return op


def _op_name(target) -> str:
    return str(target) if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) else \
        getattr(target, "__name__", repr(target))


def _same_op(target, op: torch._ops.OpOverload) -> bool:
    return target is op or target is op.overloadpacket


@dataclass
class Sample:
    """One call of a kernel: `kernel.apply(operands, x)`; `spec` says how it was drawn."""

    operands: Any
    x: torch.Tensor
    spec: dict

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.spec.items())


def check_id(check: str, kernel: Kernel, spec: dict) -> str | None:
    """The check id of `check` on `kernel` with the sample drawn from `spec`, or None when the kernel's family maps
    no spec keys to id fields (Family.contract_spec_fields is empty: such a failure has no id)."""
    if not get_family(kernel.family).contract_spec_fields:
        return None
    return CheckCase.from_spec(check, kernel.name, kernel.family, spec).id


def names_its_input(check: str):
    """Decorator for a check fn(kernel, sample, ...): an exception out of a call with the check's defaults (the
    suite's call, which replay repeats) carries `case_id`, the check id of `check` on that sample (kept when a nested
    check already set one). A call with other arguments (a prefill M, opcheck sub-tests) is not what the id replays:
    its failures carry none."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(kernel, sample, *args, **kwargs):
            try:
                return fn(kernel, sample, *args, **kwargs)
            except Exception as e:
                if getattr(e, "case_id", None) is None and not args and not kwargs:
                    e.case_id = check_id(check, kernel, sample.spec)
                raise
        return run
    return wrap


def failure_case_id(e: BaseException) -> str | None:
    """The check id an exception carries (for a group, e.g. hypothesis's several distinct failures: the first)."""
    cid = getattr(e, "case_id", None)
    for sub in getattr(e, "exceptions", ()) if cid is None else ():
        cid = failure_case_id(sub)
        if cid:
            break
    return cid


def gate_target(kernel: Kernel, config) -> Target | None:
    """The first of GATE_TARGETS whose gate accepts `config` for `kernel`, or None. On a GPU machine only the
    detected target counts: the real op runs there, and must not be handed configs its hardware lacks."""
    from conformance.core.runtime import kernel_device
    from conformance.core.targets import detect_target

    if kernel_device() != "cpu":
        here = detect_target()
        return here if kernel.can_implement(config, here) is None else None
    for t in GATE_TARGETS:
        target = parse_target(t)
        if kernel.can_implement(config, target) is None:
            return target
    return None


def op_run_mode(kernel: Kernel) -> str:
    """How the kernel's real op runs here (harness._execution for this machine): 'interpreter' for Triton on a CPU
    host, 'device' for plain torch or a GPU."""
    from conformance.checks.harness import _execution
    from conformance.core.runtime import interpreting
    from conformance.core.targets import detect_target

    return _execution(kernel, detect_target())[0] or ("interpreter" if interpreting() else "device")


def config_for(kernel: Kernel, spec: dict):
    """The layer config a spec describes, for the kernel's family (`Family.contract_config`)."""
    return get_family(kernel.family).contract_config(spec)


def accepts(kernel: Kernel, spec: dict) -> bool:
    """True if some gate target accepts the spec's config (invalid configs are not accepted)."""
    try:
        cfg = config_for(kernel, spec)
    except ValueError:
        return False
    return gate_target(kernel, cfg) is not None


def build_sample(kernel: Kernel, spec: dict) -> Sample:
    """Operands through the kernel's own load and seeded activations (`Family.contract_inputs`, one guarded call:
    conformance.checks.guard)."""
    from conformance.checks import guard

    with guard.guarded(kernel, "load"):
        operands, x = get_family(kernel.family).contract_inputs(kernel, spec)
    return _on_kernel_device(Sample(operands, x, dict(spec)))


def _on_kernel_device(sample: Sample) -> Sample:
    """The sample with operands and x on the device the kernels run on here (cuda on a GPU machine)."""
    from conformance.core.runtime import kernel_device

    dev = kernel_device()
    if dev == "cpu":
        return sample
    operands = replace_leaves(sample.operands, [t.to(dev) for t in tensor_leaves(sample.operands)])
    return Sample(operands, sample.x.to(dev), sample.spec)


def with_m(kernel: Kernel, sample: Sample, M: int, seed: int | None = None) -> Sample:
    """The same operands with fresh activations of M rows."""
    spec = dict(sample.spec, M=M, seed=sample.spec["seed"] if seed is None else seed)
    gen = torch.Generator().manual_seed(spec["seed"] + 7919 * M)
    x = torch.randn((M, sample.x.shape[-1]), generator=gen).to(sample.x.dtype).to(sample.x.device)
    return Sample(sample.operands, x, spec)


# operands are dataclasses / tuples / dicts holding tensors; contract tracing swaps those tensors
def tensor_leaves(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) for t in tensor_leaves(getattr(obj, f.name))]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensor_leaves(v)]
    if isinstance(obj, dict):
        return [t for k in sorted(obj, key=str) for t in tensor_leaves(obj[k])]
    return []


def replace_leaves(obj, new: list[torch.Tensor]):
    """`obj` with its tensor leaves replaced, in tensor_leaves order, by `new` (consumed from the front)."""
    if isinstance(obj, torch.Tensor):
        return new.pop(0)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: replace_leaves(getattr(obj, f.name), new)
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, tuple):
        vals = [replace_leaves(v, new) for v in obj]
        return type(obj)(*vals) if hasattr(obj, "_fields") else tuple(vals)
    if isinstance(obj, list):
        return [replace_leaves(v, new) for v in obj]
    if isinstance(obj, dict):
        return {k: replace_leaves(obj[k], new) for k in sorted(obj, key=str)}
    return obj


def apply_fn(kernel: Kernel, operands) -> Callable:
    """f(x, *operand_tensors) = kernel.apply(operands with those tensors, x): what the checks trace. An API v2
    call's RunContext is resolved here, once, outside the traced function: resolving it asks the machine's target
    (detect_target: torch.cuda.get_device_capability on a GPU), which a trace records as a graph node beside the
    op; on the H200 that failed the compile-boundary check of every API v2 kernel (the vLLM adapter's)."""
    ctx = None if kernel.api_version == 1 else RunContext.here(kernel)

    def f(x, *tensors):
        return kernel_call(kernel, replace_leaves(operands, list(tensors)), x, ctx)  # API v1 or v2 alike
    return f


# ------------------------------------------------------------------------------------------------
# Observers: op calls through the dispatcher, Triton launches
# ------------------------------------------------------------------------------------------------

@dataclass
class OpCall:
    args: tuple
    kwargs: dict
    out: Any


class _OpRecorder(TorchDispatchMode):
    def __init__(self, op):
        super().__init__()
        self.op, self.calls = op, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is self.op:
            self.calls.append(OpCall(tuple(args), dict(kwargs or {}), out))
        return out


def capture_op_call(kernel: Kernel, sample: Sample) -> tuple[Any, OpCall]:
    """Run kernel.apply for real; return its result and the one dispatcher call of kernel.op it made."""
    from conformance.checks import guard

    op = op_overload(kernel)
    with _OpRecorder(op) as rec, guard.guarded(kernel, "apply"):
        y = kernel_call(kernel, sample.operands, sample.x)  # API v1 or v2 alike
    if len(rec.calls) != 1:
        raise ContractFailure(f"kernel={kernel.name}: apply() called {op} {len(rec.calls)} times through the "
                              "dispatcher (expected exactly once)")
    return y, rec.calls[0]


@contextlib.contextmanager
def count_triton_launches():
    """Count Triton kernel launches (compiled or interpreted) inside the block: yields a one-item list."""
    count = [0]
    patched = []
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
        classes = (JITFunction, InterpretedFunction)
    except ImportError:  # no Triton: nothing can launch
        classes = ()
    for cls in classes:
        orig = cls.run

        def run(self, *a, __orig=orig, **kw):
            count[0] += 1
            return __orig(self, *a, **kw)
        cls.run = run
        patched.append((cls, orig))
    try:
        yield count
    finally:
        for cls, orig in patched:
            cls.run = orig


def _leaves(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _meta(t: torch.Tensor) -> dict:
    return {"shape": tuple(t.shape), "dtype": t.dtype, "device": t.device.type, "stride": tuple(t.stride())}


# ------------------------------------------------------------------------------------------------
# Check 1: fake vs real
# ------------------------------------------------------------------------------------------------

def _fake_impl(op: torch._ops.OpOverload):
    from torch._library.simple_registry import singleton

    entry = singleton.find(op._schema.name)
    kernel = entry.fake_impl.kernel
    return None if kernel is None else kernel.func


@names_its_input("fake_vs_real")
def check_fake_vs_real(kernel: Kernel, sample: Sample) -> dict:
    """The fake impl (FakeTensorMode) matches the real op on shape, dtype, device, stride of every output,
    launches nothing, and its own trace holds only allocations/views (it computes nothing)."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    op = op_overload(kernel)
    with count_triton_launches() as real_launches:
        _, call = capture_op_call(kernel, sample)
    real = _leaves(call.out)
    with FakeTensorMode() as mode, count_triton_launches() as fake_launches:
        # every tensor of the arguments becomes fake, nested ones too (a Tensor[] argument is a list of tensors)
        fargs, fkwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (tuple(call.args), dict(call.kwargs)))
        fake = _leaves(op(*fargs, **fkwargs))
    if fake_launches[0]:
        raise ContractFailure(f"kernel={kernel.name}: the fake impl launched {fake_launches[0]} Triton kernel(s)")
    if len(fake) != len(real):
        raise ContractFailure(f"kernel={kernel.name}: fake returned {len(fake)} outputs, real {len(real)}")
    for i, (f, r) in enumerate(zip(fake, real)):
        if not isinstance(f, FakeTensor):
            raise ContractFailure(f"kernel={kernel.name}: fake output {i} is {type(f).__name__}, not a FakeTensor")
        fm, rm = _meta(f), _meta(r)
        if fm != rm:
            diff = {k: (fm[k], rm[k]) for k in fm if fm[k] != rm[k]}
            raise ContractFailure(f"kernel={kernel.name} [{sample.label}]: fake vs real output {i} differ "
                                  f"(fake, real): {diff}")
    # no data dependency: trace the fake impl itself; only allocations and views may appear
    impl = _fake_impl(op)
    if impl is None:
        raise ContractFailure(f"kernel={kernel.name}: {op} has no registered fake impl")
    with FakeTensorMode(allow_non_fake_inputs=True):
        gm = make_fx(lambda *a: impl(*a, **call.kwargs), tracing_mode="fake")(*call.args)
    computed = sorted({_op_name(n.target) for n in gm.graph.nodes if n.op == "call_function"
                       and _op_name(n.target) not in ALLOCATION_OPS})
    if computed:
        raise ContractFailure(f"kernel={kernel.name}: the fake impl computes: {computed}")
    return {"outputs": [str(_meta(r)) for r in real], "real_triton_launches": real_launches[0]}


# ------------------------------------------------------------------------------------------------
# Check 2: make_fx shows one opaque node
# ------------------------------------------------------------------------------------------------

def graph_summary(gm, op) -> tuple[int, list[str], list[str]]:
    """(number of op nodes, other compute ops, metadata ops) among a graph's call_function nodes."""
    n_op, other, meta = 0, [], []
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if _same_op(n.target, op):
            n_op += 1
        elif n.target is operator.getitem:
            continue
        elif _op_name(n.target) in METADATA_OPS:
            meta.append(_op_name(n.target))
        else:
            other.append(_op_name(n.target))
    return n_op, other, meta


@names_its_input("make_fx")
def check_make_fx(kernel: Kernel, sample: Sample) -> dict:
    """make_fx (fake and symbolic) of kernel.apply shows exactly one node for the op and no other compute."""
    from torch.fx.experimental.proxy_tensor import make_fx

    op = op_overload(kernel)
    f = apply_fn(kernel, sample.operands)
    args = (sample.x, *tensor_leaves(sample.operands))
    detail = {}
    for mode in ("fake", "symbolic"):
        try:
            gm = make_fx(f, tracing_mode=mode)(*args)
        except Exception as e:  # noqa: BLE001 - a wrapper that cannot be traced breaks the contract
            raise ContractFailure(f"kernel={kernel.name}: make_fx({mode}) of apply() failed: "
                                  f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
        n_op, other, meta = graph_summary(gm, op)
        if n_op != 1 or other:
            raise ContractFailure(f"kernel={kernel.name}: make_fx({mode}) of apply() has {n_op} {op} node(s) and "
                                  f"other compute {other} (expected one op node and nothing else)")
        detail[mode] = {"op_nodes": n_op, "metadata_ops": meta}
    return detail


# ------------------------------------------------------------------------------------------------
# Check 3: opcheck
# ------------------------------------------------------------------------------------------------

@names_its_input("opcheck")
def check_opcheck(kernel: Kernel, sample: Sample, test_utils=OPCHECK_UTILS) -> dict:
    """torch.library.opcheck on the op's captured arguments; every sub-test must report SUCCESS.

    test_autograd_registration is included: these ops are inference-only and register no autograd
    formula; the sub-test checks that an op with floating inputs is not silently wrong under autograd."""
    op = op_overload(kernel)
    _, call = capture_op_call(kernel, sample)
    res = torch.library.opcheck(op, call.args, call.kwargs, test_utils=list(test_utils), raise_exception=False)
    bad = {k: str(v).splitlines()[0][:300] for k, v in res.items() if v != "SUCCESS"}
    if bad:
        raise ContractFailure(f"kernel={kernel.name} [{sample.label}]: opcheck failed: {bad}")
    return dict(res)


# ------------------------------------------------------------------------------------------------
# Check 4: the torch.compile boundary
# ------------------------------------------------------------------------------------------------

def inductor_dirs(root: str | os.PathLike | None = None) -> None:
    """Keep inductor's cache and temp files under `root` or the user cache dir (set before first compile)."""
    from conformance.core.tree import cache_dir

    base = Path(root) if root else cache_dir("inductor")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(base / "inductor"))
    tmp = base / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TMPDIR", str(tmp))
    # no compile-worker subprocess pool: on 2 cores its start-up costs more than it saves here
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


@dataclass
class CompiledCall:
    """One inductor compile of f(x, *tensors) with M dynamic, plus the graphs it saw."""

    dynamo_graph: Any = None
    post_grad_graph: str = ""
    compiled: Any = None
    example_inputs: list = field(default_factory=list)
    placeholders: list = field(default_factory=list)
    seconds: float = 0.0

    def call_without_guards(self, user_inputs: list, new_inputs: list):
        """Run the compiled graph on new inputs without dynamo's guards, as a server does once it has
        compiled for a dynamic M (vLLM dispatches to its compiled graph directly)."""
        def pos(t):
            return next(i for i, u in enumerate(user_inputs) if u is t)
        sym = {}
        for n, e in zip(self.placeholders, self.example_inputs):
            if isinstance(e, torch.Tensor):
                for d, s in enumerate(n.meta["example_value"].shape):
                    if isinstance(s, torch.SymInt):
                        sym.setdefault(str(s.node.expr), (pos(e), d))
        args = []
        for n, e in zip(self.placeholders, self.example_inputs):
            if isinstance(e, torch.Tensor):
                args.append(new_inputs[pos(e)])
            else:
                j, d = sym[str(n.meta["example_value"].node.expr)]
                args.append(new_inputs[j].shape[d])
        out = self.compiled(*args)
        return out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else tuple(out)


def compile_with_inductor(f: Callable, inputs: list) -> tuple[Any, CompiledCall]:
    """torch.compile(f, backend=inductor behind a capturing backend), leading dim of inputs[0] dynamic;
    run once on `inputs`. Returns the output and what the compile saw."""
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.custom_graph_pass import CustomGraphPass

    cc = CompiledCall()

    class _Capture(CustomGraphPass):
        def __call__(self, graph):
            cc.post_grad_graph = graph

        def uuid(self):
            return None

    def backend(gm, example_inputs):
        cc.dynamo_graph = gm
        cc.example_inputs = list(example_inputs)
        cc.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        with torch._inductor.config.patch(post_grad_custom_post_pass=_Capture(), fx_graph_cache=False):
            cc.compiled = compile_fx(gm, example_inputs)
        return cc.compiled

    torch._dynamo.reset()
    torch._dynamo.mark_dynamic(inputs[0], 0)
    t0 = time.perf_counter()
    out = torch.compile(f, backend=backend, fullgraph=True)(*inputs)
    cc.seconds = time.perf_counter() - t0
    return out, cc


def _bits_equal(a, b) -> bool:
    return bits_equal(_leaves(a), _leaves(b))


def _post_grad_nodes(graph, op):
    class _G:  # graph_summary wants an object with .graph
        pass
    g = _G()
    g.graph = graph
    return graph_summary(g, op)


def last_launch(kernel: Kernel) -> dict | None:
    return kernel.launch_config()


def _tiles(cfg: dict | None) -> dict | None:
    # the tile part of a launch record: drop the problem size (M, N, K) that naturally differs
    return None if cfg is None else {k: v for k, v in cfg.items() if k not in ("M", "N", "K")}


@names_its_input("compile_boundary")
def check_compile_boundary(kernel: Kernel, sample: Sample, prefill_m: int | None = None) -> dict:
    """Under torch.compile (inductor, M dynamic) the op is one opaque node in the dynamo and post-grad
    graphs; after compiling at prefill M, a decode (M=1) call of the compiled graph launches the tile
    config eager launches for M=1; compiled outputs equal eager outputs bit for bit."""
    op = op_overload(kernel)
    prefill_m = prefill_m or get_family(kernel.family).prefill_m
    pre = with_m(kernel, sample, prefill_m)
    dec = with_m(kernel, sample, DECODE_M)
    f = apply_fn(kernel, sample.operands)
    leaves = tensor_leaves(sample.operands)
    pre_in, dec_in = [pre.x, *leaves], [dec.x, *leaves]

    from conformance.checks import guard

    with guard.guarded(kernel, "apply"):  # timed: the check around it leaves the compile untimed
        y_pre_eager = f(*pre_in)
    cfg_pre_eager = last_launch(kernel)
    with guard.guarded(kernel, "apply"):
        y_dec_eager = f(*dec_in)
    cfg_dec_eager = last_launch(kernel)

    try:
        y_pre_comp, cc = compile_with_inductor(f, pre_in)
    except Exception as e:  # noqa: BLE001
        raise ContractFailure(f"kernel={kernel.name}: torch.compile of apply() failed: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from e
    cfg_pre_comp = last_launch(kernel)
    n_dyn, other_dyn, _ = graph_summary(cc.dynamo_graph, op)
    n_pg, other_pg, _ = _post_grad_nodes(cc.post_grad_graph, op)
    detail = {"prefill_m": prefill_m, "decode_m": DECODE_M, "compile_s": round(cc.seconds, 2),
              "dynamo_op_nodes": n_dyn, "post_grad_op_nodes": n_pg,
              "tiles_prefill": _tiles(cfg_pre_eager), "tiles_decode_eager": _tiles(cfg_dec_eager)}
    if n_dyn != 1 or other_dyn or n_pg != 1 or other_pg:
        raise ContractFailure(f"kernel={kernel.name}: under torch.compile the op is not one opaque node: dynamo "
                              f"graph {n_dyn} op node(s) + {other_dyn}; post-grad graph {n_pg} + {other_pg}")
    y_dec_comp = cc.call_without_guards(pre_in, dec_in)
    cfg_dec_comp = last_launch(kernel)
    detail["tiles_decode_compiled"] = _tiles(cfg_dec_comp)
    if cfg_dec_eager is not None:
        if _tiles(cfg_pre_comp) != _tiles(cfg_pre_eager):
            raise ContractFailure(f"kernel={kernel.name}: compiled prefill M={prefill_m} launched "
                                  f"{_tiles(cfg_pre_comp)}, eager {_tiles(cfg_pre_eager)}")
        if _tiles(cfg_dec_comp) != _tiles(cfg_dec_eager):
            raise ContractFailure(f"kernel={kernel.name}: after compiling at M={prefill_m}, decode M={DECODE_M} "
                                  f"launched {_tiles(cfg_dec_comp)} but eager launches {_tiles(cfg_dec_eager)}: "
                                  "the tile choice was traced and frozen by compile")
        detail["tiles_distinguish_prefill_decode"] = _tiles(cfg_pre_eager) != _tiles(cfg_dec_eager)
    else:
        detail["tiles"] = "kernel reports no launch_config(); tile check not applicable"
    deterministic = kernel.numerics(None).deterministic
    detail["compared"] = "bitwise" if deterministic else "within the declared statistical bound (nondeterministic)"
    for what, a, b, smp in (("prefill", y_pre_comp, y_pre_eager, pre), ("decode", y_dec_comp, y_dec_eager, dec)):
        if deterministic:
            if not _bits_equal(a, b):
                raise ContractFailure(f"kernel={kernel.name}: compiled {what} output differs from eager (bitwise)")
        else:
            why = _outside_statistical_bound(kernel, smp, a, b)
            if why:
                raise ContractFailure(f"kernel={kernel.name}: compiled {what} output differs from eager beyond the "
                                      f"kernel's declared statistical bound (it declares deterministic=False): {why}")
    return detail


def _outside_statistical_bound(kernel: Kernel, sample: Sample, a, b) -> str | None:
    """Why outputs `a` (compiled) and `b` (eager) of a nondeterministic kernel differ by more than two of the
    declared statistical bounds (each run is within one bound of the fp64 reference), or None. A GEMM sample (its
    spec names a quantized weight: w4a16): the bound of the kernel's declared numerics (tolerance.error_model_for) on
    the canonical weight the sample was loaded from; any other sample: bitwise, since no bound is declared for it."""
    from conformance.checks import tolerance

    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb) or any(x.shape != y.shape or x.dtype != y.dtype for x, y in zip(la, lb)):
        return f"outputs differ in number, shape or dtype: {[_meta(t) for t in la]} vs {[_meta(t) for t in lb]}"
    # the GEMM bound needs the canonical weight the sample was loaded from: a spec naming one (K, N, wtype, ...)
    if not {"K", "N", "group_size", "wtype", "act_order", "dtype", "seed"} <= set(sample.spec) or len(la) != 1:
        return None if _bits_equal(a, b) else "no statistical bound declared for this family: bits differ"
    from conformance.core.dtypes import torch_dtype
    from references.gemm import abs_bound, reference_gemm
    from references.generators import random_canonical

    spec = sample.spec
    w = random_canonical(spec["K"], spec["N"], spec["group_size"], spec["wtype"], torch_dtype(spec["dtype"]),
                         "normal", spec["seed"], act_order=spec["act_order"])
    x = sample.x.cpu()
    y_ref = reference_gemm(x, w)
    config = get_family(kernel.family).contract_config(spec)
    model = tolerance.error_model_for(kernel, config, x.dtype, x.shape[0])
    W64 = w.dequantize(torch.float64)
    tol = 2 * model.tolerance(y_ref, abs_bound(x, w), spec["K"], tolerance.l2_bound(x, W64))
    ya, yb = la[0].cpu().double(), lb[0].cpu().double()
    if not torch.equal(torch.isfinite(ya), torch.isfinite(yb)):
        return "non-finite values at different positions"
    err = (ya - yb).abs().nan_to_num(0.0)
    over = err > tol
    if bool(over.any()):
        i = int(over.flatten().nonzero()[0])
        return (f"{int(over.sum())} element(s) beyond 2x the bound, first flat index {i}: "
                f"|diff|={float(err.flatten()[i])}")
    return None


# ------------------------------------------------------------------------------------------------
# Recording
# ------------------------------------------------------------------------------------------------

def replay_line(case_id: str | None, kernel) -> str:
    """`python -m conformance [--plugin MODULE] repro ID` for a check id ("" without one)."""
    from conformance.checks.harness import replay_command

    return replay_command(case_id, None, kernel.name) if case_id else ""


def run_check(check: str, kernel: Kernel, fn: Callable[[], Any], run_mode: str | None = None,
              case_id: str | None = None) -> dict:
    """Run one check as one guarded call of the kernel (conformance.checks.guard: time limit, crash breaker, exits),
    record pass/fail/error with timing, and re-raise failures for pytest. A failure's record carries its check id
    (`case_id`, else the one the exception carries: names_its_input) and replay line, as a case's record does; a
    ContractFailure's message gains the replay line. A hang or a stopped kernel (timeout.CaseTimeout) is an `error`
    record too, then propagates."""
    from conformance.checks import guard, timeout

    t0 = time.perf_counter()
    try:
        # the compile-boundary check's own inductor compile is not the kernel's time: its kernel calls are timed
        with guard.guarded(kernel, check, case_id=case_id, replay=replay_line(case_id, kernel), check=check,
                           mode=run_mode, timed=check != "compile_boundary"):
            detail = fn()
    except timeout.CaseTimeout as e:
        results.record(kernel.name, check, "error", run_mode=run_mode, case_id=case_id, detail=str(e),
                       replay=replay_line(case_id, kernel), metrics={"seconds": round(time.perf_counter() - t0, 3)})
        raise
    except Exception as e:
        cid = case_id or failure_case_id(e)
        replay = replay_line(cid, kernel)
        failed = isinstance(e, ContractFailure)
        results.record(kernel.name, check, "fail" if failed else "error", run_mode=run_mode, case_id=cid,
                       detail=str(e) if failed else f"{type(e).__name__}: {e}", replay=replay,
                       metrics={"seconds": round(time.perf_counter() - t0, 3)})
        if failed and replay and e.args and isinstance(e.args[0], str) and "replay: " not in e.args[0]:
            e.args = (f"{e.args[0]} -- replay: {replay}", *e.args[1:])
        if isinstance(e, guard.StickyDeviceError):
            guard.retire({"kernel": kernel.name, "check": check, "case_id": cid, "detail": str(e), "replay": replay})
        raise
    results.record(kernel.name, check, "pass", run_mode=run_mode, case_id=case_id, detail=str(detail),
                   replay=replay_line(case_id, kernel), metrics={"seconds": round(time.perf_counter() - t0, 3)})
    return detail
