"""Kernel registry, plugin loading and selection. Nothing falls back silently: every refusal has a reason.

A kernel is a subclass of `conformance.core.kernel.Kernel` registered with `@register_kernel`. Built-in kernels
live in the repository's `kernels/` directory, imported as the package `conformance_kernels` (never as `kernels`,
a popular unrelated PyPI package). External kernels register from their own modules, loaded through
the entry point group `conformance.kernels`, the env var CONFORMANCE_PLUGINS (comma-separated module
names) or the pytest option `--conformance-plugin MODULE`.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conformance.core import exits
from conformance.core.targets import Target

if TYPE_CHECKING:
    from conformance.core.kernel import Kernel


def __getattr__(name: str):
    """Kernel and Numerics, re-exported for the v1 plugin path (`from conformance.registry import Kernel`), imported
    on first use: importing the registry imports no torch, so a pytest controller can start its xdist workers
    before it loads torch and the kernels (conformance.plugin.lifecycle)."""
    if name in ("Kernel", "Numerics"):
        from conformance.core import kernel

        return getattr(kernel, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

FAMILIES = ("w4a16", "fp8_group_quant")  # names only: the family objects live in conformance.families


_REGISTRY: dict[str, Kernel] = {}


class RegistryError(RuntimeError):
    pass


def register_kernel(cls_or_obj):
    """Class decorator (or call with an instance): registers one kernel under its unique `name`."""
    obj = cls_or_obj() if isinstance(cls_or_obj, type) else cls_or_obj
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not KERNEL_NAME_RE.fullmatch(name):
        raise RegistryError(f"kernel name={name!r} ({type(obj).__name__}) is invalid; allowed: {KERNEL_NAME_ALLOWED}")
    if getattr(obj, "family", None) not in FAMILIES:
        raise RegistryError(f"kernel {name!r}: family={getattr(obj, 'family', None)!r} is invalid; "
                            f"allowed: one of {list(FAMILIES)}")
    _contain(obj)
    old = _REGISTRY.get(obj.name)
    if old is not None and type(old) is not type(obj):
        raise RegistryError(f"kernel name {obj.name!r} registered twice ({type(old)} and {type(obj)})")
    _REGISTRY[obj.name] = obj
    _ORIGIN[obj.name] = _loading[-1] if _loading else type(obj).__module__
    return cls_or_obj


# ---- where each kernel came from (replay lines name the plugin module that registers a kernel) ----------------
_ORIGIN: dict[str, str] = {}  # kernel name -> the plugin module being loaded when it registered, else its class's
_loading: list[str] = []  # the plugin modules being imported by load_plugin / load_all, innermost last


def kernel_plugin(name: str) -> str | None:
    """The module to import (`--plugin MODULE`) so that kernel `name` registers, or None for a built-in kernel
    (`conformance_kernels`) or an unknown name."""
    mod = _ORIGIN.get(name)
    if mod is None or mod == BUILTIN_PACKAGE or mod.startswith(BUILTIN_PACKAGE + "."):
        return None
    return mod


# ---- containment: a misbehaving plugin's gate or availability is that kernel's refusal, never a crash ----------
KERNEL_NAME_RE = re.compile(r"[A-Za-z0-9_.]+")  # also the case-id grammar's kernel field (conformance.cases.ids)
KERNEL_NAME_ALLOWED = "a non-empty name of letters, digits, '_' and '.'"
_CONTAINED = ("can_implement", "availability")


_GATE_FAULTS: dict[str, str] = {}  # kernel name -> the first reason its gate or availability raised in this process
_GATE_HUNG: set[str] = set()  # kernels whose gate or availability ran past the time limit: refused at once from then
# a context-manager factory every contained gate / availability call runs under, and the exceptions it may raise
# that are that call's fault; conformance.checks.guard installs the per-call time limit here (core sits below it);
# and the factory of the scope a gate_batch() enters around many calls (the limits' shared alarm)
_gate_guard: list = [contextlib.nullcontext, ()]
_gate_batch: list = [contextlib.nullcontext]


def set_gate_guard(factory, catch: tuple = (), batch=contextlib.nullcontext) -> None:
    """Run every contained gate / availability call under `factory()`, and every gate_batch() under `batch()`;
    exceptions of the types `catch` (e.g. the time limit's) become that call's refusal like any Exception
    (conformance.checks.guard)."""
    _gate_guard[:] = [factory, tuple(catch)]
    _gate_batch[:] = [batch]


# gate answers remembered inside a gate_batch() scope: {(the contained method, its arguments): answer}; None: no scope
_memo: list = [None]


class gate_batch:  # noqa: N801 - a context manager, used as `with registry.gate_batch():`
    """A scope of many gate and availability calls (a plan being built: ~10^5 of them, microseconds each). Inside
    it, a call with the same arguments as an earlier one of the same kernel answers as that one did without running
    again (hashable arguments only): gates are pure by contract, and a plan is already built once per process and
    reused (conformance.cases.plan), while building one asks each gate about the same (config, target) about twice
    (plan_case's scans, the path probe's launches, the path shapes). And the calls' time limits share one alarm
    (the gate guard's batch scope: conformance.checks.timeout.gate_batch). Nested scopes share the outermost one,
    whose answers are dropped when it ends (a gate or machine monkeypatched later is asked anew)."""

    __slots__ = ("outer", "batch")

    def __enter__(self):
        self.outer = _memo[0] is not None
        if not self.outer:
            _memo[0] = {}
        self.batch = _gate_batch[0]()
        self.batch.__enter__()
        return self

    def __exit__(self, typ, value, tb):
        try:
            self.batch.__exit__(typ, value, tb)
        finally:
            if not self.outer:
                _memo[0] = None
        return False


def gate_faults() -> dict[str, str]:
    """{kernel: reason} for every kernel whose gate or availability raised (or hung, or exited) in this process."""
    return dict(_GATE_FAULTS)


def gate_hung(name: str) -> str | None:
    """The reason `name`'s gate or availability gives since it ran past the time limit in this process (it refuses
    every config from then on), or None."""
    return _GATE_FAULTS.get(name) if name in _GATE_HUNG else None


def raised(method: str, e: BaseException) -> str:
    """The refusal/unavailability reason for a kernel method that raised: `gate raised ValueError: ...`."""
    what = "gate" if method == "can_implement" else method
    return f"{what} raised {type(e).__name__}: {' '.join(str(e).split())[:300]}"


def _contain(obj) -> None:
    """Wrap the kernel's `can_implement` and `availability` (instance attributes shadowing the class's) so an
    exception becomes a reason string (`gate raised ValueError: ...`): every caller (select, list, coverage,
    the ledger, the harness, repro) then sees a refusal of that kernel only. A non-str, non-None return is a
    refusal too. load/apply/model exceptions are contained where they are called (the harness's error verdict)."""
    import functools

    for method in _CONTAINED:
        fn = getattr(obj, method, None)
        if fn is None or getattr(fn, "_conformance_contained", False):
            continue

        def guarded(*args, _fn=fn, _method=method, _name=obj.name, **kw):
            if _name in _GATE_HUNG:  # one time limit per kernel's gate per process, as for its calls
                return _GATE_FAULTS[_name]
            memo = _memo[0]
            if memo is not None and not kw:
                key = (_fn, args)  # _fn: this kernel's own method
                try:
                    return memo[key]
                except KeyError:
                    pass
                except TypeError:  # an unhashable argument: asked every time
                    memo = None
            out = _gate_call(_fn, _method, _name, args, kw)
            if memo is not None and _name not in _GATE_HUNG:
                memo[key] = out
            return out

        guarded = functools.wraps(fn)(guarded)
        guarded._conformance_contained = True
        try:
            setattr(obj, method, guarded)
        except (AttributeError, TypeError):  # __slots__ or a frozen object: left as it is
            pass
    _contain_launch(obj)


def _gate_call(fn, method: str, name: str, args: tuple, kw: dict) -> str | None:
    """One contained gate / availability call: under the gate guard, its raise or its hang a refusal (see _contain)."""
    factory, catch = _gate_guard
    try:
        with exits.intercepted(), factory():
            out = fn(*args, **kw)
    except (Exception, *catch) as e:  # noqa: BLE001 - a plugin's bug is its own refusal, reported with the kernel
        reason = raised(method, e)
        _GATE_FAULTS.setdefault(name, reason)
        if isinstance(e, catch):
            _GATE_HUNG.add(name)
            _GATE_FAULTS[name] = reason
        return reason
    if out is not None and not isinstance(out, str):
        return f"{'gate' if method == 'can_implement' else method} returned {out!r} (expected None or a str)"
    return out


def _contain_launch(obj) -> None:
    """Run a declared `launch` (the plan's path probe, compile_key, the compile lane ask it, also during collection)
    under the same time limit and exit interception as a gate (launch_probe). The default launch is left alone."""
    import functools

    fn = getattr(obj, "launch", None)
    from conformance.core.kernel import Kernel

    if fn is None or getattr(fn, "_conformance_contained", False) or type(obj).launch is Kernel.launch:
        return

    def launch(*args, _fn=fn, _name=obj.name, **kw):
        with launch_probe(_name):
            return _fn(*args, **kw)

    launch = functools.wraps(fn)(launch)
    launch._conformance_contained = True
    try:
        obj.launch = launch
    except (AttributeError, TypeError):  # __slots__ or a frozen object: left as it is
        pass


class launch_probe:  # noqa: N801 - a context manager, used as `with registry.launch_probe(kernel.name):`
    """The time limit and exit interception of a kernel's `launch`, around one call (every contained launch) or a
    batch of calls that together answer one question (the plan's path probe of one config: up to ~20 calls of a pure
    hook, microseconds each; arming the limit costs ~10 us, and a collection of every kernel's plan makes ~10^5
    launches). Nested inside another one it arms nothing (the outermost limit governs). A hang or an exit anywhere
    inside raises RuntimeError naming the kernel (a launch that raises is loud at its callers, unlike a gate)."""

    __slots__ = ("name", "inner", "exits", "catch")

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        factory, self.catch = _gate_guard
        self.inner = factory()
        self.exits = exits.intercepted().__enter__()
        try:
            self.inner.__enter__()
        except BaseException:
            self.exits.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, typ, value, tb):
        try:
            try:
                self.inner.__exit__(typ, value, tb)
            finally:
                self.exits.__exit__(typ, value, tb)  # a SystemExit leaving the body raises ExitCalled here
        except (exits.ExitCalled, *self.catch) as e:  # that, or the limit fired between the body's end and the disarm
            typ, value = type(e), e
        if typ is not None and issubclass(typ, (exits.ExitCalled, *self.catch)):
            raise RuntimeError(f"kernel {self.name!r}: launch raised {typ.__name__}: {value}") from None
        return False


def unregister_kernel(name: str) -> None:
    _REGISTRY.pop(name, None)


BUILTIN_PACKAGE = "conformance_kernels"
ENTRY_POINT_GROUP = "conformance.kernels"
PLUGIN_ENV = "CONFORMANCE_PLUGINS"
_loaded_builtin = False
_loaded_plugins: set[str] = set()


def _import_builtin_package():
    """The built-in kernels (`kernels/` as `conformance_kernels`; the checkout's own copy wins): every module of the
    package whose name does not start with '_', in name order (each registers its kernels)."""
    import pkgutil

    from conformance.core.tree import import_tree_package

    pkg = import_tree_package(BUILTIN_PACKAGE)
    for name in sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)):
        if not name.startswith("_"):
            importlib.import_module(f"{BUILTIN_PACKAGE}.{name}")
    return pkg


def load_plugin(module: str) -> None:
    """Import one plugin module (which registers kernels). Import failures are errors, never skipped."""
    if module in _loaded_plugins:
        return
    _loading.append(module)
    try:
        with exits.intercepted():  # a module that calls sys.exit / os._exit at import is named, not obeyed
            importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - re-raised with the module named
        raise RegistryError(f"conformance plugin {module!r} failed to import: {_why(e)}") from e
    finally:
        _loading.pop()
    _loaded_plugins.add(module)


def _why(e: BaseException) -> str:
    """`TYPE: message` on one line (an ExitCalled says which exit the module called)."""
    return f"{type(e).__name__}: {' '.join(str(e).splitlines())[:300]}"


def forget_plugin(module: str) -> None:
    """Unregister the kernels that plugin `module` registered and forget that it was loaded, so a later
    load_plugin imports it afresh (the release bisect re-imports a plugin against another release of its package;
    the caller drops the module from sys.modules)."""
    for name in [n for n, origin in _ORIGIN.items() if origin == module]:
        _REGISTRY.pop(name, None)
        _ORIGIN.pop(name, None)
    _loaded_plugins.discard(module)


NO_ENTRY_POINTS_ENV = "CONFORMANCE_NO_ENTRY_POINTS"  # "1": do not discover entry-point plugins


def installed_entry_points() -> list:
    """Entry points of the `conformance.kernels` group from installed distributions only: the current directory
    (which `python -m` puts on sys.path) is not an installation, so a stray *.dist-info there is never imported."""
    from importlib.metadata import distributions

    cwd = os.path.realpath(os.getcwd())
    paths = [p for p in sys.path if p and os.path.realpath(p) != cwd]
    eps = {}
    for dist in distributions(path=paths):
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP:
                eps.setdefault(ep.name, ep)  # the first on the path wins, as for imports
    return [eps[n] for n in sorted(eps)]


def load_all(extra_plugins=(), *, entry_points: bool | None = None) -> None:
    """Load built-in kernels, entry-point plugins (unless `entry_points` is False or CONFORMANCE_NO_ENTRY_POINTS=1),
    CONFORMANCE_PLUGINS modules and `extra_plugins`."""
    global _loaded_builtin
    if not _loaded_builtin:
        _import_builtin_package()
        _loaded_builtin = True
    if entry_points is None:
        entry_points = os.environ.get(NO_ENTRY_POINTS_ENV, "") in ("", "0")
    for ep in installed_entry_points() if entry_points else []:
        if ep.value not in _loaded_plugins:
            try:
                with exits.intercepted():
                    ep.load()
            except Exception as e:  # noqa: BLE001
                raise RegistryError(
                    f"conformance entry point {ep.name!r} ({ep.value}) failed to load: {_why(e)}"
                ) from e
            _loaded_plugins.add(ep.value)
    env = os.environ.get(PLUGIN_ENV, "")
    for mod in [m.strip() for m in env.split(",") if m.strip()] + list(extra_plugins):
        load_plugin(mod)


def all_kernels(family: str | None = None) -> list[Kernel]:
    """Registered kernels, highest priority first, ties by name (deterministic)."""
    ks = [k for k in _REGISTRY.values() if family is None or k.family == family]
    return sorted(ks, key=lambda k: (-k.priority, k.name))


def get_kernel(name: str) -> Kernel:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise RegistryError(f"kernel={name!r} is not registered; registered: {sorted(_REGISTRY)}") from None


def resolve_kernels(names) -> list[Kernel]:
    """Kernel objects for a list or comma-separated string of names; unknown names are errors."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    return sorted((get_kernel(n) for n in names), key=lambda k: (-k.priority, k.name))


@dataclass
class Selection:
    """The kernel chosen for a config on a target, and one reason per refused kernel."""

    config: Any
    target: Target
    selected: Kernel | None
    refused: dict[str, str] = field(default_factory=dict)
    accepted: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "selected": self.selected.name if self.selected else None,
            "refused": [{"kernel": k, "reason": r} for k, r in self.refused.items()],
        }


class NoKernelError(RuntimeError):
    def __init__(self, selection: Selection):
        self.selection = selection
        lines = "\n".join(f"  {k}: {r}" for k, r in selection.refused.items()) or "  (no kernels registered)"
        super().__init__(f"no kernel serves {selection.config} on {selection.target}; refusals:\n{lines}")


def select(config, target: Target, kernels=None, require_available: bool = False) -> Selection:
    """Walk kernels of the config's family by priority; first acceptance wins, all refusals recorded."""
    ks = all_kernels(config.family) if kernels is None else [k for k in kernels if k.family == config.family]
    sel = Selection(config, target, None)
    for k in ks:
        reason = k.can_implement(config, target)
        if reason is None and require_available:
            why = k.availability(target)
            reason = None if why is None else f"not available here: {why}"
        if reason is None:
            sel.accepted.append(k.name)
            if sel.selected is None:
                sel.selected = k
        else:
            sel.refused[k.name] = reason
    return sel


def choose(config, target: Target, kernels=None, require_available: bool = False) -> Selection:
    """Like `select`, but raise NoKernelError listing every refusal when nothing fits."""
    sel = select(config, target, kernels, require_available)
    if sel.selected is None:
        raise NoKernelError(sel)
    return sel
