"""Sphinx configuration of the entangle-jax documentation (docs/).

Build: ``uv run sphinx-build -W --keep-going -n -b html docs build/docs/html``
(the README's command). Warnings fail the build, cross-references are checked
(nitpicky), and docs/_ext/entangle_docs.py renders the order graphs, checks
that every public name has a docstring and that the generated graph text is
current.
"""

import pathlib
import sys

import entangle_jax
from entangle_jax.testing._hlo.module_text import CompiledModule

sys.path.insert(0, str(pathlib.Path(__file__).parent / "_ext"))

project = "entangle-jax"
author = "the entangle-jax developers"
copyright = "the entangle-jax developers"
release = version = entangle_jax.__version__

extensions = [
  "myst_parser",
  "sphinx.ext.autodoc",
  "sphinx.ext.napoleon",
  "sphinx.ext.graphviz",
  "entangle_docs",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext"]
root_doc = "index"

# Markdown headings become link targets, so pages can link to a section
# as [text](page.md#section-title).
myst_heading_anchors = 3

# Public names only: automodule follows each package's __all__.
autodoc_default_options = {"members": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# The analysis imports JAX only when handed a JAX object, so its alias for
# what it analyses names JAX's types as text; signatures show that text.
autodoc_type_aliases = {"CompiledModule": CompiledModule}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

graphviz_output_format = "svg"

nitpicky = True
# Types from other projects: their inventories would have to be downloaded
# (intersphinx), and the build works offline. Everything of ours must resolve.
nitpick_ignore_regex = [
  ("py:.*", r"(jax|jaxlib|numpy|np|jnp)(\..*)?"),
  ("py:.*", r"(collections\.abc|typing|os)\..*"),
  ("py:.*", r"(Array|ArrayLike|Compiled|Lowered|PyTree|Callable)"),
  # A type variable (entangle's result has its payload's type), a
  # private parser type in Op's fields, and the race check's private
  # per-module result (race_check.results): none has a page to link to.
  ("py:class", r"entangle_jax\._src\.entangle\.T"),
  ("py:class", r"entangle_jax\.testing\._hlo\.instruction\.Instruction"),
  # The access policy's answer, kept in Op's fields for the check's own
  # use: private, with no page.
  ("py:class", r"entangle_jax\._src\.access_policy\.Footprint"),
  # autodoc's stand-in for a type alias of `autodoc_type_aliases` inside a
  # subscript (races_across's Sequence[CompiledModule | ...]): the alias
  # itself is shown and resolves.
  ("py:class", r"TypeAliasForwardRef"),
  ("py:class", r"entangle_jax\.testing\._findings\.records\.ModuleResult"),
  # The sanitizer's private records of where a call ran (the loops and
  # branches around it) and of the pairs it could not compare: fields of
  # public classes name them, but they have no page.
  ("py:class", r"entangle_jax\.testing\._sanitize\.sites\.Frame"),
  ("py:class", r"entangle_jax\.testing\._sanitize\.checks\.Unpaired"),
  # What record_executions yields (the executions seen so far, for tests):
  # private, with no page.
  ("py:class", r"entangle_jax\.testing\._ways_in\.executions\.Recorder"),
  # The conflict rule's verdict (why two accesses conflict, or not), which
  # OrderAnalysis.verdicts and Race.verdicts hand out for the reports: a
  # private record of the one rule, described where those methods are.
  ("py:class", r"entangle_jax\._src\.conflict_rule\.Verdict"),
  # autodoc splits a dataclass field's `dict[int, CallSite]` type at its
  # comma (SanitizedModule.callbacks) and looks up the halves; so for
  # `dict[str, ...]` and `list[tuple[Frame, ...]]`.
  ("py:class", r"dict\[(int|str)"),
  ("py:class", r"list\[tuple\[.*"),
]

html_theme = "sphinx_book_theme"
html_title = f"entangle-jax {release}"
html_theme_options = {
  "show_toc_level": 2,
  "home_page_in_toc": True,
}
# Without a mode, the theme's script logs a console error ("invalid theme
# mode") on a browser's first visit.
html_context = {"default_mode": "light"}
html_static_path = ["_static"]
# Printed output (race reports) wraps instead of running off-screen.
html_css_files = ["wrap_output.css"]
# Without one the browser asks for /favicon.ico, which is not there (a 404
# in the console).
html_favicon = "_static/favicon.svg"
