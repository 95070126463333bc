"""The demo's graphs, and docs/seeing_order.md's graphs are what order_graph
draws today."""

import contextlib
import io
import re

import jax
from absl.testing import absltest

from entangle_jax import demo
from entangle_jax.demo._hazard import Ordering
from tests.graph_reading import (
  read_mermaid,
)
from tests.test_util import READ, WRITE

try:
  from tools import doc_graphs
except ModuleNotFoundError as missing:
  if missing.name != "tools":
    raise
  doc_graphs = None


class DemoGraphTest(absltest.TestCase):
  def test_demo_prints_three_mermaid_graphs(self):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      self.assertEqual(demo.main(["--graph"]), 0)
    text = out.getvalue()
    block = r"^([^\n]+):\n\n```mermaid\n(.*?)```$"
    blocks = re.findall(block, text, re.S | re.M)
    self.assertEqual([name for name, _ in blocks], [o.value for o in Ordering])
    for name, block in blocks:
      _, _, arrows, dashed = read_mermaid(self, block)
      self.assertLen(arrows, 2)
      self.assertLen(dashed, 0 if name == "entangle" else 1)


class DocGraphsTest(absltest.TestCase):
  """docs/seeing_order.md: its example and the demo graphs it records."""

  def setUp(self):
    super().setUp()
    if doc_graphs is None or not doc_graphs.PAGE.exists():
      # CI also runs a copy of tests/ against the installed package, away
      # from the checkout, its docs and its development tools.
      self.skipTest(
        "no tools/ package or docs/: tests/ runs from a copy outside the "
        "checkout"
      )
    self.tool = doc_graphs
    self.page = self.tool.PAGE.read_text(encoding="utf-8")

  def test_recorded_blocks_are_valid_mermaid(self):
    blocks = re.findall(
      r"```mermaid\n(.*?)```", self.tool.recorded(self.page), re.S
    )
    self.assertLen(blocks, 3)
    for block in blocks:
      read_mermaid(self, block)

  def test_page_example_draws_the_race(self):
    example = re.findall(r"```python\n(.*?)```", self.page, re.S)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      exec(example, {})
    labels, _, arrows, dashed = read_mermaid(self, out.getvalue().rstrip("\n"))
    self.assertLen(labels, 3)
    self.assertLen(arrows, 2)
    ((a, b),) = dashed
    self.assertCountEqual(
      [labels[a].split("\n")[0], labels[b].split("\n")[0]], [READ, WRITE]
    )

  def test_page_shows_what_the_demo_prints(self):
    version, platform = self.tool.recorded_with(self.page)
    here = (jax.__version__, jax.devices()[0].platform)
    if here != (version, platform):
      self.skipTest(
        f"the page's graphs come from jax {version} on {platform}; "
        f"this is jax {here[0]} on {here[1]}"
      )
    self.assertEqual(
      self.tool.recorded(self.page),
      self.tool.generated(),
      "docs/seeing_order.md's demo graphs are out of date: run "
      + self.tool.COMMAND,
    )


if __name__ == "__main__":
  absltest.main()
