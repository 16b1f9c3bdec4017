"""Sphinx configuration of jaxlab's documentation: the API reference and the READMEs as pages.

Build (warnings are errors, as in ``.ci/run``)::

    pip install -e ".[docs]"
    python -m sphinx -W --keep-going -b html docs docs/_build/html

The API pages in ``api/`` are written by ``docs/gen_api.py`` from each public module's ``__all__``
(``tests/test_docs.py`` fails when they are stale); the READMEs are included by the small pages in
``readme.md`` and ``methods/``. Nothing is executed at build time but the imports autodoc needs:
no notebook, no MyST code cell. There are no intersphinx links: CI builds without network access
to the documentation sites of JAX, Flax, optax and ott-jax.
"""

import pathlib
import re
import sys

import sphinx.ext.autosummary as autosummary_module

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))  # readme_links, the extension beside this file

import jaxlab  # noqa: E402  (after the path, so the checkout is documented, not an install)

project = "jaxlab"
author = "jaxlab authors"
copyright = "2026, jaxlab authors"  # noqa: A001  (Sphinx's name)
release = version = jaxlab.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "myst_parser",
    "readme_links",  # the READMEs' repository-relative links, rewritten for their pages
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
root_doc = "index"

# autodoc: each name is documented once, at the module that owns it (docs/gen_api.py); the pages
# say which members to show, so there are no default options here.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True  # show `dtype=jnp.float32`, not the object's repr
autosummary_generate = False  # the tables link to the entries on the pages; no stub pages
nitpicky = False  # annotations name jax/flax/optax types that have no target without intersphinx

# napoleon: the docstrings are Google style; ivar fields keep a class's "Attributes:" from
# declaring the same attribute a second time beside autodoc's member entries.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True

# MyST: the READMEs are plain CommonMark with tables (no extension needed); `#` to `###` headings
# get anchors, so the READMEs' links to each other's sections resolve.
myst_heading_anchors = 3

html_theme = "sphinx_book_theme"
html_title = f"jaxlab {version}"
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "collapse_navbar": True,
}


class _SentencesOutsideLiterals:
    """Splits a docstring's first paragraph at ". " but never inside a ````literal````.

    autosummary's table shows each name's first sentence, found by splitting at every ". " and
    keeping the shortest prefix that parses; but it re-parses the whole paragraph instead of the
    prefix (sphinx/ext/autosummary ``extract_summary``, 8.x and 9.0), so a first sentence ending
    inside a literal (``i - window .. i``, ``x_t . LN(...)``) is cut there, and the cut is reported
    as a broken inline literal. Splitting only outside literals keeps such sentences whole.
    """

    _token = re.compile(r"``|\.\s+")

    def split(self, text: str) -> list[str]:
        parts, start, in_literal = [], 0, False
        for match in self._token.finditer(text):
            if match.group() == "``":
                in_literal = not in_literal
            elif not in_literal:
                parts.append(text[start : match.start()])
                start = match.end()
        return [*parts, text[start:]]


autosummary_module.periods_re = _SentencesOutsideLiterals()


def _short_array_names(text: str) -> str:
    """jaxtyping annotations name the array class by its home, ``jaxtyping.Float[jaxlib._jax.Array,
    'B T']``; they read better as users write them, ``Float[Array, 'B T']``."""
    return re.sub(r"\bjaxtyping\.(?=\w+\[)", "", text.replace("jaxlib._jax.Array", "Array"))


def _process_docstring(app, what, name, obj, options, lines):
    # A constant without a ``#:`` comment has no docstring of its own; autodoc would show its
    # type's (``dict``'s, ``tuple``'s), which is not about jaxlab and is not valid reST.
    if what in ("data", "attribute") and getattr(obj, "__doc__", None) is not None:
        if obj.__doc__ == type(obj).__doc__:
            lines.clear()
    lines[:] = [_short_array_names(line) for line in lines]  # napoleon's field types


def _process_signature(app, what, name, obj, options, signature, return_annotation):
    texts = (signature, return_annotation)
    return tuple(None if text is None else _short_array_names(text) for text in texts)


def _skip_member(app, what, name, obj, skip, options):
    # A NamedTuple's fields are described by its docstring's "Attributes:"; autodoc would add an
    # entry per field whose only text is "Alias for field number N".
    if what == "class" and (getattr(obj, "__doc__", None) or "").startswith("Alias for field"):
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _process_docstring)
    app.connect("autodoc-process-signature", _process_signature)
    app.connect("autodoc-skip-member", _skip_member)
