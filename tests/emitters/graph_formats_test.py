"""order_graph's text: labels shown literally in DOT and Mermaid, and bad
inputs refused."""

import re
import typing

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import testing
from entangle_jax.testing._emitters import graph_formats
from tests.graph_reading import (
  CHAIN_HLO,
  mermaid_shapes,
  read_mermaid,
  render_svg,
  svg_groups,
)

AWKWARD = (
  'é "q" [b] <a> #x; & `t` \\n {c} ü→ %%{init: {"theme": "forest"}}%% '
  "\ufb02\u00b0\u00b037\u00b6\u00df 50% (a:b) \\"
)


class EscapingTest(absltest.TestCase):
  def awkward_graph(self):
    cluster = graph_formats.Cluster(0, AWKWARD)
    nodes = (
      graph_formats.Node('odd "name"', (AWKWARD, "second line"), (cluster,)),
      graph_formats.Node("plain", ("x",), ()),
    )
    return graph_formats.Graph(nodes, edges=((0, 1),), races=())

  def test_dot_shows_labels_literally(self):
    svg = render_svg(self, graph_formats.to_dot(self.awkward_graph()))
    nodes = svg_groups(svg, "node")
    self.assertEqual(nodes['odd "name"'], [AWKWARD, "second line"])
    (cluster,) = svg_groups(svg, "cluster").values()
    self.assertEqual(cluster, [AWKWARD])

  def test_newline_in_a_label(self):
    graph = graph_formats.Graph(
      (graph_formats.Node("a", ("one\ntwo",), ()),), (), ()
    )
    svg = render_svg(self, graph_formats.to_dot(graph))
    self.assertEqual(svg_groups(svg, "node"), {"a": ["one", "two"]})
    text = graph_formats.to_mermaid(graph)
    self.assertEqual(text, 'flowchart TD\n  n0["one<br/>two"]\n')

  def test_mermaid_escapes_labels(self):
    text = graph_formats.to_mermaid(self.awkward_graph())
    labels, clusters, arrows, _ = read_mermaid(self, text)
    self.assertEqual(labels, {"n0": f"{AWKWARD}\nsecond line", "n1": "x"})
    self.assertEqual(clusters, {AWKWARD: ["n0"]})
    self.assertEqual(arrows, [("n0", "n1")])
    # Nothing Mermaid reads as syntax, markup or a directive is left raw in
    # a label, nor any character outside printable ASCII.
    for quoted in re.findall(r'\["([^"]*)"\]', text):
      self.assertNotRegex(quoted.replace("<br/>", ""), r'[<>"`&%{}\[\]\\]')
      self.assertRegex(quoted, r"^[ -~]*$")

  def test_reads_and_writes_are_drawn_apart(self):
    nodes = (
      graph_formats.Node("r", ("read",), (), reads=True),
      graph_formats.Node("w", ("write",), ()),
    )
    graph = graph_formats.Graph(nodes, edges=((0, 1),), races=())
    read_mermaid(self, graph_formats.to_mermaid(graph))
    self.assertEqual(mermaid_shapes(), {"n0": "read", "n1": "write"})
    dot = graph_formats.to_dot(graph)
    self.assertIn('"r" [label="read", shape=ellipse];', dot)
    self.assertIn('"w" [label="write"];', dot)
    svg = render_svg(self, dot)
    self.assertEqual(svg_groups(svg, "node"), {"r": ["read"], "w": ["write"]})


class BadInputTest(absltest.TestCase):
  def test_unknown_format(self):
    with self.assertRaisesRegex(ValueError, "'svg'"):
      testing.order_graph(CHAIN_HLO, format=typing.cast(typing.Any, "svg"))

  def test_among_string(self):
    with self.assertRaisesRegex(TypeError, "'lib_a'"):
      testing.order_graph(CHAIN_HLO, among="lib_a")

  def test_selector_that_matches_nothing(self):
    with self.assertRaisesRegex(ValueError, "nothing_here"):
      testing.order_graph(CHAIN_HLO, among=["nothing_here"])

  def test_stablehlo_text_names_what_to_pass(self):
    lowered = jax.jit(jnp.sin).lower(1.0)
    with self.assertRaisesRegex(ValueError, "StableHLO"):
      testing.order_graph(lowered.as_text())
    # The control: the same program's compiled HLO text is accepted.
    testing.order_graph(testing.module_text(lowered.compile()))

  def test_call_named_like_its_opcode_is_labelled_once(self):
    text = """\
HloModule called, is_scheduled=true

%inner (x: s32[]) -> s32[] {
  %x = s32[] parameter(0)
  ROOT %b = s32[] custom-call(%x), custom_call_target="lib_b"
}

ENTRY %main (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %a = s32[] custom-call(%p), custom_call_target="lib_a"
  ROOT %NAME = s32[] call(%a), to_apply=%inner
}
"""
    graph = testing.order_graph(text.replace("NAME", "call"))
    self.assertIn('label="call"', graph)
    self.assertNotIn("call call", graph)
    # The control: a call site with a name of its own keeps the opcode.
    graph = testing.order_graph(text.replace("NAME", "site"))
    self.assertIn('label="call site"', graph)

  def test_no_native_calls_is_an_empty_graph(self):
    compiled = jax.jit(jnp.sin).lower(1.0).compile()
    self.assertEqual(
      read_mermaid(self, testing.order_graph(compiled, format="mermaid")),
      ({}, {}, [], []),
    )
    svg = render_svg(self, testing.order_graph(compiled))
    self.assertEqual(svg_groups(svg, "node"), {})


if __name__ == "__main__":
  absltest.main()
