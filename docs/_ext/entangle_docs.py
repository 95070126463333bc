"""The docs' own Sphinx extension.

* ``bench-chart``: the benchmark's cost table on the performance page,
  drawn (bench_chart.py).
* ``order-graph``: a directive whose body is Python that sets ``compiled``.
  The build runs it, shows the code, and renders
  ``entangle_jax.testing.order_graph(compiled)`` as SVG through Graphviz
  (``sphinx.ext.graphviz``, offline). tools/doc_blocks.py runs the same body
  in the test suite.
* Every public name (each package's ``__all__``) and every public method of a
  public class must have a docstring; a missing one is a build warning, which
  the strict build (``-W``) turns into a failure. Public data re-exported from
  a private module get the docstring written under their assignment there.
* The generated Mermaid text on the ordering page must equal what
  ``python -m entangle_jax.demo --graph`` prints now (tools/doc_graphs.py),
  where the jax version and platform are the ones it was recorded with.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import pathlib
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from pygments.lexers.special import TextLexer
from sphinx.application import Sphinx
from sphinx.ext.graphviz import figure_wrapper, graphviz
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

# A sibling module: conf.py puts this folder on sys.path.
import bench_chart  # isort: skip

logger = logging.getLogger(__name__)
ROOT = pathlib.Path(__file__).resolve().parents[2]
PUBLIC_MODULES = ("entangle_jax", "entangle_jax.testing")


class OrderGraph(SphinxDirective):
  """Runs Python that sets ``compiled``; shows it and its order graph."""

  has_content = True
  option_spec = {"caption": directives.unchanged}  # noqa: RUF012 (docutils)

  def run(self) -> list[nodes.Node]:
    import entangle_jax.testing

    source = "\n".join(self.content) + "\n"
    page = os.path.relpath(self.env.doc2path(self.env.docname), ROOT)
    # The code's first line in the page, so that the source locations in the
    # graph's labels name the page's own lines (as tools/doc_blocks.py does).
    first = self.lineno + 1 + len(self.options)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile("\n" * (first - 1) + source, page, "exec"), namespace)
    if "compiled" not in namespace:
      raise self.error("an order-graph body must set `compiled`")
    dot = entangle_jax.testing.order_graph(namespace["compiled"], format="dot")
    code = nodes.literal_block(source, source, language="python")
    graph = graphviz()
    graph["code"] = dot
    graph["options"] = {"docname": self.env.docname}
    graph["alt"] = self.options.get("caption", "order graph")
    graph["classes"] = ["order-graph"]
    if "caption" in self.options:
      return [code, figure_wrapper(self, graph, self.options["caption"])]
    return [code, graph]


def _imported_from(module: Any) -> dict[str, str]:
  """Which module each name of `module` was imported from (its source)."""
  tree = ast.parse(inspect.getsource(module))
  package = module.__name__ if hasattr(module, "__path__") else ""
  return {
    alias.asname or alias.name: importlib.util.resolve_name(
      "." * node.level + (node.module or ""), package
    )
    for node in ast.walk(tree)
    if isinstance(node, ast.ImportFrom)
    for alias in node.names
  }


def data_doc(module_name: str, name: str) -> str:
  """The docstring written under `name`'s assignment, where it is defined."""
  module = importlib.import_module(module_name)
  source = _imported_from(module).get(name, module_name)
  docs = ModuleAnalyzer.for_module(source).find_attr_docs()
  return "\n".join(docs.get(("", name), [])).strip()


def _is_data(obj: Any) -> bool:
  return not (inspect.isclass(obj) or callable(obj) or inspect.ismodule(obj))


def _own_doc(obj: Any) -> str:
  """A docstring written for `obj` (not inherited, not a generated one)."""
  doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
  if not doc or (inspect.isclass(obj) and doc.startswith(obj.__name__ + "(")):
    return ""  # a namedtuple's generated "Name(field, ...)"
  return doc.strip()


def undocumented() -> list[str]:
  """Public names, and public members of public classes, without docs."""
  missing = []
  for module_name in PUBLIC_MODULES:
    module = importlib.import_module(module_name)
    for name in module.__all__:
      obj = getattr(module, name)
      full = f"{module_name}.{name}"
      if _is_data(obj):
        if not data_doc(module_name, name):
          missing.append(full)
        continue
      if not _own_doc(obj):
        missing.append(full)
      if inspect.isclass(obj):
        for member, value in vars(obj).items():
          if member.startswith("_") or not (
            callable(value) or isinstance(value, property)
          ):
            continue
          function = value.fget if isinstance(value, property) else value
          if not (getattr(function, "__doc__", None) or "").strip():
            missing.append(f"{full}.{member}")
  return missing


def check_docstrings(app: Sphinx) -> None:
  for name in undocumented():
    logger.warning("public name without a docstring: %s", name)


def keep_public(app, what, name, obj, skip, options) -> bool | None:
  """Documents every name in __all__, data and __version__ included.

  Sphinx gives a module member's short name only; public modules' names do
  not collide, and automodule offers each module only its own members.
  """
  public = {
    member
    for module in PUBLIC_MODULES
    for member in importlib.import_module(module).__all__
  }
  if what == "module" and name in public:
    return False
  return None


def data_docstring(app, what, name, obj, options, lines) -> None:
  """Public data get the docstring under their assignment in their source."""
  module_name, _, short = name.rpartition(".")
  if what == "data" and module_name in PUBLIC_MODULES and not lines:
    lines.extend(data_doc(module_name, short).splitlines())


def _load_doc_graphs():
  path = ROOT / "tools" / "doc_graphs.py"
  spec = importlib.util.spec_from_file_location("doc_graphs", path)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def check_generated(app: Sphinx) -> None:
  import jax

  tool = _load_doc_graphs()
  page = tool.PAGE.read_text(encoding="utf-8")
  version, platform = tool.recorded_with(page)
  here = (jax.__version__, jax.devices()[0].platform)
  if here != (version, platform):
    logger.info(
      "not comparing the generated graphs: recorded with jax %s on %s, "
      "this is jax %s on %s",
      version,
      platform,
      *here,
    )
    return
  if tool.recorded(page) != tool.generated():
    logger.warning(
      "%s: the generated graphs are out of date: run %s",
      tool.PAGE.relative_to(ROOT),
      tool.COMMAND,
    )


def setup(app: Sphinx) -> dict[str, Any]:
  app.setup_extension("sphinx.ext.graphviz")
  app.add_directive("order-graph", OrderGraph)
  app.add_directive("bench-chart", bench_chart.BenchChart)
  # The Mermaid text is shown as text here (drawing it would need mermaid.js,
  # which the offline build does not fetch); GitHub draws it.
  app.add_lexer("mermaid", TextLexer)
  app.connect("builder-inited", check_docstrings)
  app.connect("builder-inited", check_generated)
  app.connect("autodoc-skip-member", keep_public)
  app.connect("autodoc-process-docstring", data_docstring)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
