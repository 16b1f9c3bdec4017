"""The house plan's import rules (DESIGN.md, Layout), checked on the source with ``ast``.

Every ``import`` statement of every module under ``jaxlab/`` and ``pallas_kernels/`` counts,
wherever it stands (a late import inside a function closes a circle as surely as one at the top),
and each becomes an edge to the module it names (a submodule if one exists by that name, else the
package). The tests fail on: (a) any import cycle; (b) a module of ``jaxlab.methods.X`` importing
``jaxlab.methods.Y`` (a method never imports another: what two share moves down into ``nn``, ``lm``,
``ot`` or ``core``); (c) a room importing a room it may not (:data:`MAY_IMPORT`): the floors
``core`` ← ``data``, ``nn``, ``ot`` ← ``lm`` ← ``methods``, with ``nn`` holding layers only (no data
pipeline, no training machinery), ``pallas_kernels`` importing no jaxlab and only ``nn`` and
``methods`` importing it, and ``jaxlab.testing`` imported by no library room; (d) a module importing
another module's private name (``from m import _name`` or ``m._name``): what two modules share is
public in the module that owns it. No module is imported, so the checks cost no JAX."""

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


# The rooms each room may import (besides itself). A room is a package directly under jaxlab, or
# pallas_kernels; jaxlab.testing (helpers for tests and benchmarks) may import any room, and no room
# of the library may import it.
MAY_IMPORT = {
    "jaxlab.core": set(),
    "jaxlab.data": {"jaxlab.core"},
    "jaxlab.nn": {"jaxlab.core", "pallas_kernels"},
    "jaxlab.ot": {"jaxlab.core"},
    "jaxlab.lm": {"jaxlab.core", "jaxlab.data", "jaxlab.nn"},
    "jaxlab.methods": {
        "jaxlab.core",
        "jaxlab.data",
        "jaxlab.nn",
        "jaxlab.ot",
        "jaxlab.lm",
        "pallas_kernels",
    },
    "pallas_kernels": set(),
}


def _room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "jaxlab" and len(parts) > 1 else parts[0]


def layout_violations(graph: dict[str, set[str]]) -> list[str]:
    """One line per import that breaks rule (b) or (c)."""
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            own, other = _method(module), _method(target)
            if own and other and own != other:
                bad.append(f"{module} -> {target}: a method imports another method")
            here, there = _room(module), _room(target)
            if here == there or here not in MAY_IMPORT or there == "jaxlab":
                continue
            if there not in MAY_IMPORT[here]:
                bad.append(f"{module} -> {target}: {here} may not import {there}")
    return bad


def test_every_room_has_rules(graph):
    """A new package under jaxlab must be placed on a floor here before it can import anything."""
    rooms = {_room(m) for m in graph} - {"jaxlab", "jaxlab.testing"}
    assert rooms <= MAY_IMPORT.keys(), f"rooms without import rules: {rooms - MAY_IMPORT.keys()}"


def test_nn_holds_layers_only(graph):
    """Issue 43: no module of nn imports the data pipeline or the training machinery."""
    training = {"jaxlab.core.loop", "jaxlab.core.aot", "jaxlab.core.optim", "jaxlab.core.mesh",
                "jaxlab.core.checkpoint", "jaxlab.core.task", "jaxlab.core.step"}  # fmt: skip
    for module, targets in graph.items():
        if _room(module) == "jaxlab.nn":
            assert not {t for t in targets if _room(t) in ("jaxlab.data", "jaxlab.lm")}, module
            assert not targets & training, f"{module} imports {targets & training}"


# The public methods of a NamedTuple class, whose names start with an underscore.
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_field_defaults", "_make"}


def private_imports(modules: dict[str, pathlib.Path] | None = None) -> list[str]:
    """One line per use of another project module's private name (rule (d)): ``from m import
    _name`` and ``m._name`` on a name bound by ``import m`` / ``from p import m``."""
    modules = _modules() if modules is None else modules
    project = tuple(f"{p}" for p in PACKAGES)
    bad = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        bound = set()  # local names of imported project modules
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names
                          if a.name.startswith(project)}  # fmt: skip
            elif isinstance(node, ast.ImportFrom):
                if not node.level and not (node.module or "").startswith(project):
                    continue
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private:
                        bad.append(f"{name} imports {alias.name} from {node.module}")
                    bound.add(alias.asname or alias.name)
        bad += [
            f"{name} uses {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in NAMEDTUPLE_API
        ]
    return sorted(bad)


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


def test_no_module_uses_another_modules_private_names():
    assert private_imports() == []


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
        "jaxlab/nn/model.py": "from jaxlab.lm import task\nfrom jaxlab.data import text\n",
        "jaxlab/lm/__init__.py": "",
        "jaxlab/lm/task.py": "import jaxlab.testing.toy\n",
        "jaxlab/data/__init__.py": "",
        "jaxlab/data/text.py": "",
        "jaxlab/testing/__init__.py": "",
        "jaxlab/testing/toy.py": "from jaxlab.methods.a import M\n",
    }
    for path, text in sources.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    files = sorted(tmp_path.rglob("*.py"))
    modules = {
        ".".join(f.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): f
        for f in files
    }
    (tmp_path / "jaxlab/lm/generate.py").write_text(
        "from jaxlab.lm.task import _loss\nfrom jaxlab.lm import task\n"
        "x = task._cache\ny = task.z\n"
    )
    files = sorted(tmp_path.rglob("*.py"))
    modules = {
        ".".join(f.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): f
        for f in files
    }
    assert private_imports(modules) == [
        "jaxlab.lm.generate imports _loss from jaxlab.lm.task",
        "jaxlab.lm.generate uses task._cache",
    ]
    graph = import_graph(modules)
    assert graph["jaxlab.methods.a"] == {"jaxlab.methods.a.model"}  # relative import resolved
    assert find_cycles(graph) == [["jaxlab.nn.linear", "jaxlab.nn.spectral"]]
    assert layout_violations(graph) == [
        "jaxlab.core.loop -> jaxlab.nn.linear: jaxlab.core may not import jaxlab.nn",
        "jaxlab.lm.task -> jaxlab.testing.toy: jaxlab.lm may not import jaxlab.testing",
        "jaxlab.methods.a.model -> jaxlab.methods.b: a method imports another method",
        "jaxlab.nn.model -> jaxlab.data.text: jaxlab.nn may not import jaxlab.data",
        "jaxlab.nn.model -> jaxlab.lm.task: jaxlab.nn may not import jaxlab.lm",
        "pallas_kernels -> jaxlab.core: pallas_kernels may not import jaxlab.core",
    ]
