"""The package's import architecture, read from the source with `ast` (nothing is imported).

Nodes are our modules: conformance/, references/, kernels/ (as `conformance_kernels`) and benchmarks/
(as `conformance_bench`). Edges are every import statement anywhere in a module (top level, inside
functions and classes, under `if TYPE_CHECKING`), plus `importlib.import_module("literal")` and
`import_tree_package("literal")` calls; imports whose module name is computed at run time (plugins, the
command modules of conformance.cli, the kernel package the registry loads by name) are not edges.
The v1 alias modules (`conformance.registry`, `.targets`, `.runtime`, `.config`: each replaces itself in
sys.modules with its target) are read as their targets.

Asserted: no import cycle among our modules, and the one-way layer order
references <- conformance.core <- conformance.families <- cases/checks <- reports/cli (+ pytest_plugin),
kernels -> core + references, and only conformance/cli/bench.py reaches conformance_bench.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = {"conformance": "conformance", "references": "references", "conformance_kernels": "kernels",
         "conformance_bench": "benchmarks"}  # package name -> directory in the checkout
SKIP_DIRS = {"__pycache__", "results", "templates"}


def discover(root: Path = ROOT) -> dict[str, Path]:
    """Every module of ours: dotted name -> file."""
    mods = {}
    for pkg, d in TREES.items():
        base = root / d
        for f in sorted(base.rglob("*.py")):
            rel = f.relative_to(base)
            if SKIP_DIRS & set(rel.parts[:-1]):
                continue
            parts = [pkg, *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = f
    return mods


def _literal_call_target(node: ast.Call) -> str | None:
    """`importlib.import_module("x.y")` / `import_module("x.y")` / `import_tree_package("x")` -> "x.y"."""
    fn = node.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
    if name not in ("import_module", "import_tree_package", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
        return arg.value
    return None


def _resolve(name: str, mods) -> str | None:
    """The longest prefix of dotted `name` that is one of our modules."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in mods:
            return cand
    return None


def module_imports(mod: str, path: Path, mods) -> dict[str, int]:
    """Our modules that `mod` imports -> line of the first such import."""
    is_pkg = path.name == "__init__.py"
    found: dict[str, int] = {}

    def add(target: str | None, line: int):
        if target and target != mod:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(_resolve(a.name, mods), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([node.module] if node.module else []))
            else:
                base = node.module
            for a in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{base}.{a.name}"
                add(sub if sub in mods else _resolve(base, mods), node.lineno)
        elif isinstance(node, ast.Call):
            target = _literal_call_target(node)
            if target:
                add(_resolve(target, mods), node.lineno)
    return found


def alias_target(path: Path, mods) -> str | None:
    """For a module that does `from P import N as _impl; sys.modules[__name__] = _impl`: "P.N"."""
    tree = ast.parse(path.read_text())
    bound = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                bound[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    bound[a.asname] = a.name
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in bound
                and any(isinstance(t, ast.Subscript) and ast.unparse(t) == "sys.modules[__name__]"
                        for t in node.targets)):
            return _resolve(bound[node.value.id], mods)
    return None


def build_graph(root: Path = ROOT) -> tuple[dict[str, dict[str, int]], dict[str, Path], dict[str, str]]:
    """(edges: module -> {imported module: line}, module files, alias -> target), aliases folded in."""
    mods = discover(root)
    aliases = {m: t for m, p in mods.items() if (t := alias_target(p, mods))}
    graph = {}
    for m, p in mods.items():
        if m in aliases:
            continue
        edges = {}
        for t, line in module_imports(m, p, mods).items():
            t = aliases.get(t, t)
            if t != m:
                edges.setdefault(t, line)
        graph[m] = edges
    return graph, mods, aliases


def find_cycles(graph: dict[str, dict], nodes) -> list[list[str]]:
    """The strongly connected components (more than one module, or a self-import) among `nodes`."""
    nodes = set(nodes)
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):  # Tarjan, iterative over each node's successor list
        work = [(v, iter(sorted(w for w in graph.get(v, {}) if w in nodes)))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            u, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(x for x in graph.get(w, {}) if x in nodes))))
                    break
                if w in on:
                    low[u] = min(low[u], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[u])
                if low[u] == index[u]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == u:
                            break
                    if len(comp) > 1 or u in graph.get(u, {}):
                        comps.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return comps


def _in(mod: str, *prefixes: str) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def layer_violations(graph) -> list[str]:
    """Every edge against the layer order, as "importer -> imported (line N): rule"."""
    rules = []
    for m, edges in sorted(graph.items()):
        for t, line in sorted(edges.items()):
            why = None
            if _in(m, "references"):
                if not _in(t, "references"):
                    why = "references imports nothing of ours"
            elif _in(m, "conformance.core"):
                if not _in(t, "references", "conformance.core"):
                    why = "conformance.core imports only references and conformance.core"
            elif _in(m, "conformance.families"):
                if not _in(t, "references", "conformance.core", "conformance.families"):
                    why = "conformance.families imports only references, core and families"
            elif _in(m, "conformance.cases", "conformance.checks"):
                if _in(t, "conformance.reports", "conformance.cli", "conformance.pytest_plugin", "conformance.suite",
                       "conformance_bench", "conformance_kernels"):
                    why = "cases and checks sit below reports, cli, pytest_plugin, the suite and the kernels"
            elif _in(m, "conformance_kernels"):  # conformance.config (families.config) is public plugin API
                if not _in(t, "references", "conformance.core", "conformance.families.config", "conformance_kernels"):
                    why = "kernels import only conformance.core, conformance.config and references"
            if why is None and _in(m, "conformance") and _in(t, "conformance_bench") and m != "conformance.cli.bench":
                why = "only the bench command (conformance/cli/bench.py) reaches conformance_bench"
            if why:
                rules.append(f"{m} -> {t} (line {line}): {why}")
    return rules


def _edge_lines(graph, comp) -> list[str]:
    members = set(comp)
    return [f"  {m} -> {t} (line {line})" for m in comp for t, line in sorted(graph[m].items()) if t in members]


@pytest.fixture(scope="module")
def graph():
    return build_graph()[0]


def test_the_graph_sees_the_packages_and_lazy_imports(graph):
    """Sanity: the walk found all four trees, the alias modules, and imports inside function bodies."""
    _, mods, aliases = build_graph()
    for pkg in TREES:  # kernels/ is a namespace portion (no __init__.py): its modules stand for it
        assert pkg in mods or any(m.startswith(pkg + ".") for m in mods), pkg
    assert aliases.get("conformance.registry") == "conformance.core.registry", aliases
    assert aliases.get("conformance.config") == "conformance.families.config", aliases
    # conformance/cli/bench.py loads conformance_bench inside its functions only
    assert "conformance_bench" in graph["conformance.cli.bench"]
    # conformance/core/tree.py imports conformance.core.runtime inside a function, behind an `if`
    assert "conformance.core.runtime" in graph["conformance.core.tree"]


def test_no_import_cycles(graph):
    ours = [m for m in graph if _in(m, "conformance", "references", "conformance_kernels")]
    cycles = find_cycles(graph, ours)
    assert not cycles, "import cycles (lazy imports count):\n" + "\n".join(
        f"cycle {i + 1}: {' <-> '.join(c)}\n" + "\n".join(_edge_lines(graph, c)) for i, c in enumerate(cycles))


def test_layer_order(graph):
    bad = layer_violations(graph)
    assert not bad, "imports against the layer order:\n  " + "\n  ".join(bad)


def test_the_checks_can_fail(tmp_path):
    """A scratch tree with a core <-> core cycle (lazy), a core -> families edge and a cases -> conformance_bench
    edge: every one is reported."""
    files = {
        "conformance/__init__.py": "",
        "conformance/core/__init__.py": "",
        "conformance/core/a.py": "def f():\n    from conformance.core import b\n",
        "conformance/core/b.py": "from . import a\nfrom conformance.families.x import Y\n",
        "conformance/families/__init__.py": "",
        "conformance/families/x.py": "import references.r\n",
        "conformance/cases/__init__.py": "",
        "conformance/cases/c.py": "import importlib\nimportlib.import_module('conformance_bench.bench')\n",
        "conformance/registry.py": ("import sys\nfrom conformance.core import a as _impl\n"
                                    "sys.modules[__name__] = _impl\n"),
        "references/__init__.py": "",
        "references/r.py": "",
        "kernels/__init__.py": "from conformance.registry import f\n",
        "benchmarks/__init__.py": "",
        "benchmarks/bench.py": "",
    }
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    g, _, aliases = build_graph(tmp_path)
    assert aliases == {"conformance.registry": "conformance.core.a"}
    assert g["conformance_kernels"] == {"conformance.core.a": 1}
    assert find_cycles(g, g) == [["conformance.core.a", "conformance.core.b"]]
    bad = layer_violations(g)
    assert any(v.startswith("conformance.core.b -> conformance.families.x") for v in bad), bad
    assert any(v.startswith("conformance.cases.c -> conformance_bench.bench") for v in bad), bad
    assert len(bad) == 2, bad
