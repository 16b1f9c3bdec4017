"""Shape letters have one meaning each: every shape suffix (``x_BTD``) and every jaxtyping
dimension string (``Float[Array, "B T D"]``) in ``jaxlab/`` and ``pallas_kernels/`` uses only the
letters of the glossary in :mod:`jaxlab.nn`'s docstring, lowercase paper symbols only in the
modules the glossary gives them, and a parameter's suffix says what its annotation says.

Source only (``ast``), no JAX: cheap. ``python tests/test_shape_letters.py`` prints the inventory,
which letter is used in which files.
"""

from __future__ import annotations

import ast
import collections
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = ("jaxlab", "pallas_kernels")
GLOSSARY_MODULE = ROOT / "jaxlab" / "nn" / "__init__.py"
GLOSSARY_PAGE = ROOT / "docs" / "glossary.md"
# jaxtyping's array annotations (the dtype names, plus the generic ones).
JAXTYPING = {"Array", "Bool", "Complex", "Float", "Inexact", "Int", "Integer", "Key", "Num",
             "Real", "Shaped", "UInt", "UInt8", "Float32", "Float64", "Int32"}  # fmt: skip
# Names that end like a suffix and are not one: ``best_T`` is the best transport plan T.
NOT_SUFFIXES = {"best_T"}
BORDER = re.compile(r"=+( +=+)+")


def glossary_tables(doc: str) -> list[tuple[list[str], list[list[str]]]]:
    """The reStructuredText simple tables of ``doc``: (header cells, rows of cells)."""
    lines, tables, i = doc.splitlines(), [], 0
    while i < len(lines):
        if not BORDER.fullmatch(lines[i]):
            i += 1
            continue
        starts = [m.start() for m in re.finditer("=+", lines[i])]

        def cells(line, starts=starts):
            return [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]

        header, j = cells(lines[i + 1]), i + 3
        rows = []
        while not BORDER.fullmatch(lines[j]):
            rows.append(cells(lines[j]))
            j += 1
        tables.append((header, rows))
        i = j + 1
    return tables


def glossary() -> tuple[dict[str, str], dict[str, list[str]], set[str]]:
    """(letter -> meaning, lowercase symbol -> the modules it holds in, longer names)."""
    doc = ast.get_docstring(ast.parse(GLOSSARY_MODULE.read_text()))
    (_, letters), (_, symbols), (_, names) = glossary_tables(doc)
    scopes = collections.defaultdict(list)
    for symbol, _, where in symbols:
        scopes[symbol] += ["jaxlab." + w.strip() for w in where.split(",")]
    return {letter: meaning for letter, meaning in letters}, dict(scopes), {n for n, _ in names}


def module_name(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def source_files():
    for root in SOURCES:
        yield from sorted((ROOT / root).rglob("*.py"))


def suffix(name: str) -> str | None:
    """The shape suffix of a variable name, or None: the part after the last ``_`` when it holds an
    uppercase letter, after a stem with a lowercase letter (``x_BTD``, ``dPv_TS``) or a one- or
    two-letter matrix name (``C_ME``, ``AS_TS``); constants (``CHUNK_SIZE``) are not suffixed."""
    stem, sep, last = name.rpartition("_")
    if not sep or name in NOT_SUFFIXES or not re.fullmatch("[A-Za-z0-9]*[A-Z][A-Za-z0-9]*", last):
        return None
    return last if re.search("[a-z]", stem) or re.fullmatch("[A-Z]{1,2}", stem) else None


def dims(node: ast.AST) -> str | None:
    """The dimension string of a jaxtyping annotation ``Float[Array, "B T D"]``, else None."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple)):
        return None
    value = node.value
    head = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", "")
    elts = node.slice.elts
    if head not in JAXTYPING or len(elts) != 2 or not isinstance(elts[1], ast.Constant):
        return None
    return elts[1].value if isinstance(elts[1].value, str) else None


def dim_names(spec: str) -> list[str]:
    """The names in a dimension string: ``"*batch T+N 3"`` -> ``["batch", "T", "N"]``."""
    return [n for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", spec) if n != "_"]


def uses():
    """Every use: (path, line, kind, text, letters or names)."""
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = node.id if isinstance(node, ast.Name) else getattr(node, "arg", None)
            if isinstance(node, (ast.Name, ast.arg)) and name and (s := suffix(name)):
                yield path, node.lineno, "suffix", name, [c for c in s if not c.isdigit()]
            if (spec := dims(node)) is not None:
                yield path, node.lineno, "annotation", spec, dim_names(spec)


def problem(path, name: str, letters, scopes, names) -> str | None:
    if len(name) > 1:
        return None if name in names else f"{name!r} is not a longer name of the glossary"
    if name.isupper():
        return None if name in letters else f"{name!r} is not in the glossary"
    where = scopes.get(name, [])
    module = module_name(path)
    if any(module == w or module.startswith(w + ".") for w in where):
        return None
    return f"{name!r} is a paper symbol only in {', '.join(where) or 'no module'}"


def test_every_letter_is_in_the_glossary():
    letters, scopes, names = glossary()
    bad = []
    for path, line, kind, text, found in uses():
        for name in found:
            if kind == "suffix" and len(name) > 1:
                continue
            if why := problem(path, name, letters, scopes, names):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {kind} {text!r}: {why}")
    assert not bad, "shape letters outside the glossary of jaxlab/nn/__init__.py:\n" + "\n".join(
        bad
    )


def test_a_suffix_says_what_its_annotation_says():
    """``x_BTD: Float[Array, "B T D"]``: where both are spelled with single letters, the same ones
    (a ``ref_anchor_BD`` annotated ``"B E"`` named one axis twice)."""
    bad = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.arg):
                name, annotation = node.arg, node.annotation
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name, annotation = node.target.id, node.annotation
            else:
                continue
            s = suffix(name)
            specs = [d for n in ast.walk(annotation or ast.Pass()) if (d := dims(n)) is not None]
            for spec in specs if s else []:
                tokens = spec.split()
                if all(len(t) == 1 for t in tokens) and "".join(tokens) != s:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name} is {spec!r}")
    assert not bad, "suffixes that disagree with their annotations:\n" + "\n".join(bad)


def test_every_glossary_letter_is_used():
    letters, _, _ = glossary()
    used = {c for _, _, kind, _, found in uses() for c in found if len(c) == 1}
    assert not set(letters) - used, f"glossary letters no code uses: {set(letters) - used}"


def test_the_docs_page_has_the_same_tables():
    doc = ast.get_docstring(ast.parse(GLOSSARY_MODULE.read_text()))
    want = [rows for _, rows in glossary_tables(doc)]
    rows, got = [], []
    for line in [*GLOSSARY_PAGE.read_text().splitlines(), ""]:
        if line.startswith("|---"):
            continue
        if line.startswith("|"):
            rows.append([c.strip().replace("`", "") for c in line.strip("|").split("|")])
        elif rows:
            got.append(rows[1:])  # without the header
            rows = []
    plain = [[[c.replace("`", "") for c in row] for row in table] for table in want]
    assert got == plain


def inventory() -> dict[str, dict[str, set[str]]]:
    """Letter -> file -> the suffixes and annotations that use it."""
    table = collections.defaultdict(lambda: collections.defaultdict(set))
    for path, _, _, text, found in uses():
        for name in found:
            table[name][str(path.relative_to(ROOT))].add(text)
    return table


if __name__ == "__main__":
    for name, files in sorted(inventory().items()):
        print(f"{name}: {sum(len(t) for t in files.values())} names in {len(files)} files")
        for file, texts in sorted(files.items()):
            print(f"    {file}: {' '.join(sorted(texts))}")
