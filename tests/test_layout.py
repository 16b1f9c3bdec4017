"""The house plan's import rules (DESIGN.md, Layout), checked on the source with ``ast``.

Every ``import`` statement of every module under ``jaxlab/`` and ``pallas_kernels/`` counts,
wherever it stands (a late import inside a function closes a circle as surely as one at the top),
and each becomes an edge to the module it names (a submodule if one exists by that name, else
the package). The tests fail on: (a) any import cycle; (b) a module of ``jaxlab.methods.X``
importing ``jaxlab.methods.Y`` (a method never imports another: what two share moves down into
``nn``, ``ot`` or ``core``); (c) ``jaxlab.core`` importing ``nn``, ``ot``, ``methods`` or ``data``;
(d) ``pallas_kernels`` importing ``jaxlab``. No module is imported, so the checks cost no JAX.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("jaxlab", "pallas_kernels")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    files = (f for package in PACKAGES for f in sorted((ROOT / package).rglob("*.py")))
    return {_module_name(f): f for f in files}


def _imported(node: ast.AST, name: str, is_package: bool, modules) -> list[str]:
    """The project modules one import statement of module ``name`` names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: resolve against the importing module's package
        package = name if is_package else name.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    # ``from a.b import c`` names the module a.b.c when it exists, else a name in a.b
    return [
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
        for alias in node.names
    ]


def import_graph(modules: dict[str, pathlib.Path] | None = None) -> dict[str, set[str]]:
    """``{module: the project modules it imports}`` over jaxlab and pallas_kernels."""
    modules = _modules() if modules is None else modules
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(tree):
            for target in _imported(node, name, is_package, modules):
                while target and target not in modules:  # a name inside a module: its module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _method(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) >= 3 and parts[:2] == ["jaxlab", "methods"] else None


def layout_violations(graph: dict[str, set[str]]) -> list[str]:
    """One line per import that breaks rules (b), (c) or (d)."""
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            own, other = _method(module), _method(target)
            if own and other and own != other:
                bad.append(f"{module} -> {target}: a method imports another method")
            lower = ("jaxlab.nn", "jaxlab.ot", "jaxlab.methods", "jaxlab.data")
            if _under(module, "jaxlab.core") and any(_under(target, p) for p in lower):
                bad.append(f"{module} -> {target}: jaxlab.core imports a package above it")
            if _under(module, "pallas_kernels") and _under(target, "jaxlab"):
                bad.append(f"{module} -> {target}: pallas_kernels imports jaxlab")
    return bad


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_the_graph_sees_the_packages(graph):
    """Guards the walker itself: known edges are found, late imports included."""
    assert "jaxlab.nn.attention" in graph["jaxlab.nn.mlr_attention"]
    assert "pallas_kernels" in graph["jaxlab.nn.attention"]
    assert "jaxlab.core.errors" in graph["jaxlab.nn.pallas_switch"]
    assert len(graph) > 100


def test_there_are_no_import_cycles(graph):
    assert find_cycles(graph) == []


def test_methods_core_and_kernels_import_only_downwards(graph):
    assert layout_violations(graph) == []


def test_the_checks_catch_what_they_forbid(tmp_path):
    """The rules fail on a circle closed by a late import and on each forbidden direction."""
    sources = {
        "jaxlab/__init__.py": "",
        "jaxlab/core/__init__.py": "",
        "jaxlab/core/loop.py": "from jaxlab.nn import linear\n",
        "jaxlab/nn/__init__.py": "",
        "jaxlab/nn/linear.py": "import jaxlab.nn.spectral\n",
        "jaxlab/nn/spectral.py": "def f():\n    from jaxlab.nn.linear import LinearMap\n",
        "jaxlab/methods/__init__.py": "",
        "jaxlab/methods/a/__init__.py": "from .model import M\n",
        "jaxlab/methods/a/model.py": "from jaxlab.methods.b import thing\n",
        "jaxlab/methods/b/__init__.py": "thing = 1\n",
        "pallas_kernels/__init__.py": "from jaxlab.core import errors\n",
    }
    for path, text in sources.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    files = sorted(tmp_path.rglob("*.py"))
    modules = {
        ".".join(f.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): f
        for f in files
    }
    graph = import_graph(modules)
    assert graph["jaxlab.methods.a"] == {"jaxlab.methods.a.model"}  # relative import resolved
    assert find_cycles(graph) == [["jaxlab.nn.linear", "jaxlab.nn.spectral"]]
    assert layout_violations(graph) == [
        "jaxlab.core.loop -> jaxlab.nn.linear: jaxlab.core imports a package above it",
        "jaxlab.methods.a.model -> jaxlab.methods.b: a method imports another method",
        "pallas_kernels -> jaxlab.core: pallas_kernels imports jaxlab",
    ]
