"""Reading what order_graph draws back: its Mermaid text, the SVG that
Graphviz renders from its DOT, and the graph before either (test helpers)."""

import os
import re
import shutil
import subprocess
import unittest
import xml.etree.ElementTree as ET

from entangle_jax import testing
from entangle_jax.testing._ways_in import order_graph as order_graph_module

# CI sets this so that a missing Graphviz fails instead of skipping.
REQUIRE_GRAPHVIZ = os.environ.get("ENTANGLE_JAX_REQUIRE_GRAPHVIZ") == "1"
SVG = "{http://www.w3.org/2000/svg}"


def drawn(compiled, among=None):
  """The analysis and the graph `order_graph` draws for `compiled`."""
  analysis = testing.OrderAnalysis(compiled)
  return analysis, order_graph_module.build(analysis, among)


def named_edges(graph, pairs):
  return {(graph.nodes[a].name, graph.nodes[b].name) for a, b in pairs}


def unordered_names(pairs):
  return {frozenset(pair) for pair in pairs}


# Structural readers of the two formats ---------------------------------------

# A box (an op that may write) or a stadium (an op that only reads).
_MERMAID_NODE = re.compile(r'^(n\d+)(\[|\(\[)"([^"]*)"(\]|\]\))$')
_MERMAID_SUBGRAPH = re.compile(r'^subgraph (c\d+)\["([^"]*)"\]$')
_MERMAID_LINK = re.compile(r"^(n\d+) (-->|-\.-) (n\d+)$")
_MERMAID_STYLE = re.compile(r"^linkStyle ([\d,]+) stroke:red,")


def read_mermaid(test, text):
  """Checks a flowchart's structure; returns its parts.

  Returns:
    (labels by node id, node ids by cluster label, arrows, dashed links),
    with labels decoded from Mermaid entity codes. `mermaid_shapes` gives
    the shapes.
  """
  lines = text.splitlines()
  test.assertEqual(lines[0], "flowchart TD")
  labels, clusters, arrows, dashed, links = {}, {}, [], [], []
  shapes = {}
  open_clusters, styled = [], None
  for line in lines[1:]:
    body = line.strip()
    if match := _MERMAID_NODE.match(body):
      test.assertNotIn(match.group(1), labels)
      test.assertEqual(len(match.group(2)), len(match.group(4)), body)
      labels[match.group(1)] = decode_mermaid(match.group(3))
      shapes[match.group(1)] = "read" if match.group(2) == "([" else "write"
      for cluster in open_clusters:
        clusters[cluster].append(match.group(1))
    elif match := _MERMAID_SUBGRAPH.match(body):
      label = decode_mermaid(match.group(2))
      test.assertNotIn(label, clusters)
      clusters[label] = []
      open_clusters.append(label)
    elif body == "end":
      test.assertTrue(open_clusters, "'end' without a subgraph")
      open_clusters.pop()
    elif match := _MERMAID_LINK.match(body):
      test.assertIn(match.group(1), labels, "link before its node")
      test.assertIn(match.group(3), labels, "link before its node")
      pair = (match.group(1), match.group(3))
      (arrows if match.group(2) == "-->" else dashed).append(pair)
      links.append(match.group(2))
    elif match := _MERMAID_STYLE.match(body):
      styled = [int(n) for n in match.group(1).split(",")]
    else:
      test.fail(f"unexpected Mermaid line: {line!r}")
  test.assertEqual(open_clusters, [], "unclosed subgraph")
  # The red style covers exactly the dashed links.
  expected = [n for n, link in enumerate(links) if link == "-.-"] or None
  test.assertEqual(styled, expected)
  # Mermaid reads %% anywhere as a comment or a directive (%%{init: ...}%%).
  test.assertNotIn("%%", text)
  _SHAPES.clear()
  _SHAPES.update(shapes)
  return labels, clusters, arrows, dashed


_SHAPES: dict[str, str] = {}


def mermaid_shapes():
  """{node id: "read" or "write"} of the flowchart `read_mermaid` read last:
  a stadium is an op that only reads, a box one that may write."""
  return dict(_SHAPES)


def decode_mermaid(label):
  return re.sub(r"#(\d+);", lambda m: chr(int(m.group(1))), label).replace(
    "<br/>", "\n"
  )


def render_svg(test, dot_text):
  """Renders DOT with Graphviz; returns the SVG tree."""
  result = subprocess.run(
    [graphviz_dot(test), "-Tsvg"],
    input=dot_text.encode("utf-8"),
    capture_output=True,
    check=False,
  )
  test.assertEqual(result.returncode, 0, result.stderr.decode())
  test.assertEqual(result.stderr.decode(), "", "Graphviz warned")
  return ET.fromstring(result.stdout)


def graphviz_dot(test) -> str:
  """The path of Graphviz's `dot`; skips (or fails, in CI) without it."""
  dot = shutil.which("dot")
  if dot is not None:
    return dot
  reason = "Graphviz's `dot` is not installed (apt-get install graphviz)"
  if REQUIRE_GRAPHVIZ:
    test.fail(reason)
  print(f"skipping: {reason}")
  raise unittest.SkipTest(reason)


def svg_groups(svg, kind):
  """{title: [text lines]} of the SVG's node, edge or cluster groups."""
  groups = {}
  for group in svg.iter(f"{SVG}g"):
    if group.get("class") == kind:
      title = group.find(f"{SVG}title").text
      groups[title] = [t.text for t in group.iter(f"{SVG}text")]
  return groups


# Tests -----------------------------------------------------------------------


CHAIN_HLO = """\
HloModule chain, is_scheduled=true

ENTRY %main (p: s32[]) -> (s32[], s32[]) {
  %p = s32[] parameter(0)
  %a = s32[] custom-call(%p), custom_call_target="lib_a"
  %b = s32[] custom-call(%a), custom_call_target="lib_b"
  %e = s32[] custom-call(%a), custom_call_target="lib_e"
  %c = s32[] custom-call(%a, %b, %e), custom_call_target="lib_c"
  %f = s32[] custom-call(%c, %a), custom_call_target="lib_f"
  %d = s32[] custom-call(%p), custom_call_target="lib_d"
  ROOT %t = (s32[], s32[]) tuple(%f, %d)
}
"""
