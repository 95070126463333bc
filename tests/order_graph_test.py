"""order_graph: what it draws, and that Graphviz and Mermaid can read it."""

import contextlib
import functools
import importlib.util
import io
import itertools
import os
import pathlib
import random
import re
import shutil
import subprocess
import typing
import unittest
import xml.etree.ElementTree as ET

import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized

from entangle_jax import _hazard, _order_graph, demo, entangle, testing
from entangle_jax._hazard import Ordering
from tests import test_util  # sets up 8 CPU devices

WRITE = "entangle_jax_write_slot"
READ = "entangle_jax_read_slot"
# CI sets this so that a missing Graphviz fails instead of skipping.
REQUIRE_GRAPHVIZ = os.environ.get("ENTANGLE_JAX_REQUIRE_GRAPHVIZ") == "1"
SVG = "{http://www.w3.org/2000/svg}"
ROOT = pathlib.Path(__file__).resolve().parent.parent


def compile_hazard(ordering):
  return (
    jax.jit(_hazard.program(ordering)).lower(*_hazard.arguments()).compile()
  )


def drawn(compiled, among=None):
  """The analysis and the graph `order_graph` draws for `compiled`."""
  analysis = testing.OrderAnalysis(compiled)
  return analysis, _order_graph.build(analysis, among)


def named_edges(graph, pairs):
  return {(graph.nodes[a].name, graph.nodes[b].name) for a, b in pairs}


def unordered_names(pairs):
  return {frozenset(pair) for pair in pairs}


# Structural readers of the two formats ---------------------------------------

_MERMAID_NODE = re.compile(r'^(n\d+)\["([^"]*)"\]$')
_MERMAID_SUBGRAPH = re.compile(r'^subgraph (c\d+)\["([^"]*)"\]$')
_MERMAID_LINK = re.compile(r"^(n\d+) (-->|-\.-) (n\d+)$")
_MERMAID_STYLE = re.compile(r"^linkStyle ([\d,]+) stroke:red,")


def read_mermaid(test, text):
  """Checks a flowchart's structure; returns its parts.

  Returns:
    (labels by node id, node ids by cluster label, arrows, dashed links),
    with labels decoded from Mermaid entity codes.
  """
  lines = text.splitlines()
  test.assertEqual(lines[0], "flowchart TD")
  labels, clusters, arrows, dashed, links = {}, {}, [], [], []
  open_clusters, styled = [], None
  for line in lines[1:]:
    body = line.strip()
    if match := _MERMAID_NODE.match(body):
      test.assertNotIn(match.group(1), labels)
      labels[match.group(1)] = decode_mermaid(match.group(2))
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
  return labels, clusters, arrows, dashed


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


class DemoProgramTest(parameterized.TestCase):
  def test_entangle_draws_write_read_write(self):
    analysis, graph = drawn(compile_hazard(Ordering.ENTANGLE))
    (first,) = analysis.select("first_write")
    (read,) = analysis.select(READ)
    (second,) = analysis.select(WRITE)[1:]
    self.assertEqual([n.name for n in graph.nodes], [first, read, second])
    self.assertEqual(
      named_edges(graph, graph.edges), {(first, read), (read, second)}
    )
    self.assertEqual(graph.races, ())

  @parameterized.parameters(Ordering.NONE, Ordering.OPTIMIZATION_BARRIER)
  def test_unordered_draws_a_race(self, ordering):
    # The control: without entangle, the read and the second write race.
    analysis, graph = drawn(compile_hazard(ordering))
    (first,) = analysis.select("first_write")
    (read,) = analysis.select("read")
    (second,) = analysis.select("second_write")
    self.assertEqual(
      named_edges(graph, graph.edges), {(first, read), (first, second)}
    )
    self.assertEqual(
      unordered_names(named_edges(graph, graph.races)),
      {frozenset((read, second))},
    )

  @parameterized.product(
    ordering=list(Ordering), among=[None, [READ, WRITE], ["read", WRITE]]
  )
  def test_race_lines_are_what_races_returns(self, ordering, among):
    compiled = compile_hazard(ordering)
    _, graph = drawn(compiled, among)
    self.assertEqual(
      unordered_names(named_edges(graph, graph.races)),
      unordered_names(testing.races(compiled, among)),
    )

  @parameterized.parameters(Ordering.NONE, Ordering.ENTANGLE)
  def test_mermaid_text(self, ordering):
    compiled = compile_hazard(ordering)
    text = testing.order_graph(compiled, format="mermaid")
    labels, clusters, arrows, dashed = read_mermaid(self, text)
    self.assertEqual(clusters, {})
    ids = {
      scope: next(n for n, label in labels.items() if scope in label)
      for scope in ("first_write", "read", "second_write")
    }
    if ordering is Ordering.ENTANGLE:
      self.assertEqual(
        arrows,
        [(ids["first_write"], ids["read"]), (ids["read"], ids["second_write"])],
      )
      self.assertEqual(dashed, [])
    else:
      self.assertCountEqual(
        arrows,
        [
          (ids["first_write"], ids["read"]),
          (ids["first_write"], ids["second_write"]),
        ],
      )
      self.assertEqual(
        {frozenset(pair) for pair in dashed},
        {frozenset((ids["read"], ids["second_write"]))},
      )

  @parameterized.parameters(Ordering.NONE, Ordering.ENTANGLE)
  def test_dot_renders(self, ordering):
    compiled = compile_hazard(ordering)
    analysis = testing.OrderAnalysis(compiled)
    svg = render_svg(self, testing.order_graph(compiled))
    nodes = svg_groups(svg, "node")
    read = analysis.select(READ)[0]
    second = analysis.select("second_write")[0]
    self.assertIn(READ, nodes[read])
    self.assertIn(WRITE, nodes[second])
    edges = svg_groups(svg, "edge")
    if ordering is Ordering.ENTANGLE:
      self.assertIn(f"{read}->{second}", edges)
    else:
      self.assertNotIn(f"{read}->{second}", edges)
      # Graphviz titles an undirected-looking edge by its written direction.
      self.assertTrue({f"{read}->{second}", f"{second}->{read}"} & set(edges))

  def test_accepts_lowered_and_text(self):
    lowered = jax.jit(_hazard.program(Ordering.NONE)).lower(
      *_hazard.arguments()
    )
    compiled = lowered.compile()
    expected = testing.order_graph(compiled, format="mermaid")
    self.assertEqual(testing.order_graph(lowered, format="mermaid"), expected)
    text = testing.module_text(compiled)
    self.assertEqual(testing.order_graph(text, format="mermaid"), expected)

  def test_all_ops_draws_arithmetic_in_the_scope_too(self):
    compiled = compile_hazard(Ordering.ENTANGLE)
    _, effectful = drawn(compiled, ["read"])
    analysis = testing.OrderAnalysis(compiled, all_ops=True)
    everything = _order_graph.build(analysis, ["read"])
    self.assertLen(effectful.nodes, 1)
    self.assertGreater(len(everything.nodes), 1)
    text = testing.order_graph(compiled, ["read"], all_ops=True)
    self.assertEqual(text, _order_graph.to_dot(everything))

  def test_labels_name_target_scope_and_line(self):
    analysis, graph = drawn(compile_hazard(Ordering.ENTANGLE))
    (read,) = analysis.select_ops("read")
    (node,) = [n for n in graph.nodes if n.name == read.name]
    # The same target, scope and file:line that races/format_races report.
    self.assertEqual(node.label, (READ, read.scope, read.location))
    self.assertIn("/read/", node.label[1])
    self.assertRegex(node.label[2], r"\.py:\d+$")  # Which frame: see Op.


_CHAIN_HLO = """\
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


class ReductionTest(absltest.TestCase):
  """Hand-written HLO: a -> {b, e} -> c -> f, plus a -> c and a -> f direct.

  b and e are unordered, and so is d with every other call.
  """

  def test_only_the_reduction_is_drawn(self):
    analysis, graph = drawn(_CHAIN_HLO)
    # The module does order a before c and f directly...
    self.assertTrue(analysis.happens_before("lib_a", "lib_c"))
    self.assertTrue(analysis.happens_before("lib_a", "lib_f"))
    # ...but those arrows are implied by the others.
    self.assertEqual(
      named_edges(graph, graph.edges),
      {("a", "b"), ("a", "e"), ("b", "c"), ("e", "c"), ("c", "f")},
    )
    self.assertEqual(
      unordered_names(named_edges(graph, graph.races)),
      {frozenset((x, "d")) for x in "abcef"} | {frozenset("be")},
    )

  def test_reduction_of_random_orders(self):
    rng = random.Random(0)
    for _ in range(50):
      n = rng.randrange(1, 12)
      # A random strict order: an edge set closed transitively.
      before = [
        [a < b and rng.random() < 0.3 for b in range(n)] for a in range(n)
      ]
      for c, a, b in itertools.product(range(n), repeat=3):
        before[a][b] |= before[a][c] and before[c][b]
      expected = {
        (a, b)
        for a, b in itertools.product(range(n), repeat=2)
        if before[a][b]
        and not any(before[a][c] and before[c][b] for c in range(n))
      }
      self.assertEqual(set(_order_graph._reduction(before)), expected)

  def test_chain_of_three_among_selectors(self):
    _, graph = drawn(_CHAIN_HLO, ["lib_a", "lib_c", "lib_f"])
    self.assertEqual(named_edges(graph, graph.edges), {("a", "c"), ("c", "f")})
    text = testing.order_graph(_CHAIN_HLO, ["lib_a", "lib_c", "lib_f"])
    self.assertEqual(text.count(" -> "), 2)
    self.assertNotIn("dashed", text)

  def test_dot_and_mermaid_agree(self):
    _, graph = drawn(_CHAIN_HLO)
    labels, _, arrows, dashed = read_mermaid(
      self, testing.order_graph(_CHAIN_HLO, format="mermaid")
    )
    target = {n: label.split("\n")[0] for n, label in labels.items()}
    self.assertEqual(
      {(target[a], target[b]) for a, b in arrows},
      {(f"lib_{a}", f"lib_{b}") for a, b in named_edges(graph, graph.edges)},
    )
    self.assertLen(dashed, 6)
    svg = render_svg(self, testing.order_graph(_CHAIN_HLO))
    self.assertCountEqual(svg_groups(svg, "node"), "abcdef")
    self.assertLen(svg_groups(svg, "edge"), 5 + 6)


def hazard_step(token, ordering):
  with jax.named_scope("r1"):
    x = testing.read_slot(token)
  if ordering is Ordering.ENTANGLE:
    token = entangle(token, x)
  with jax.named_scope("w2"):
    token = testing.write_slot(token, 2.0)
  return token, x


class ClusterTest(parameterized.TestCase):
  @parameterized.parameters(Ordering.NONE, Ordering.ENTANGLE)
  def test_scan_body(self, ordering):
    def loop(slot):
      token = testing.write_slot(slot, 1.0)
      token, xs = jax.lax.scan(
        lambda t, _: hazard_step(t, ordering), token, None, length=3
      )
      return testing.read_slot(token), xs

    compiled = jax.jit(loop).lower(jnp.int32(0)).compile()
    analysis, graph = drawn(compiled)
    (r1,) = analysis.select("r1")
    (w2,) = analysis.select("w2")
    by_name = {node.name: node for node in graph.nodes}
    # Both calls of the body are in the same, single loop-body cluster.
    self.assertLen(by_name[r1].clusters, 1)
    self.assertEqual(by_name[r1].clusters, by_name[w2].clusters)
    self.assertStartsWith(by_name[r1].clusters[0].label, "loop body of ")
    outside = [n for n in graph.nodes if n.name not in (r1, w2)]
    self.assertLen(outside, 2)
    self.assertTrue(all(n.clusters == () for n in outside))
    ordered = (r1, w2) in named_edges(graph, graph.edges)
    self.assertEqual(ordered, ordering is Ordering.ENTANGLE)

    labels, clusters, _, _ = read_mermaid(
      self, testing.order_graph(compiled, format="mermaid")
    )
    ((label, members),) = clusters.items()
    self.assertStartsWith(label, "loop body of ")
    self.assertLen(members, 2)
    self.assertTrue(any(READ in labels[m] for m in members))
    self.assertTrue(any(WRITE in labels[m] for m in members))

    svg = render_svg(self, testing.order_graph(compiled))
    ((cluster_text),) = svg_groups(svg, "cluster").values()
    self.assertStartsWith(cluster_text[0], "loop body of ")

  @staticmethod
  def compile_branches(late_write):
    """A write, then a cond: one branch writes, the other reads; with
    `late_write`, one more write after the cond, unordered with it."""

    branches = functools.partial(
      test_util.write_then_branch, late_write=late_write
    )
    return jax.jit(branches).lower(jnp.int32(0), True).compile()

  def test_cond_branches(self):
    compiled = self.compile_branches(late_write=False)
    analysis, graph = drawn(compiled)
    by_name = {node.name: node for node in graph.nodes}
    (then_write,) = analysis.select("then_write")
    (else_read,) = analysis.select("else_read")
    (first,) = [n for n in analysis.select(WRITE) if n != then_write]
    then_clusters = by_name[then_write].clusters
    else_clusters = by_name[else_read].clusters
    self.assertLen(then_clusters, 1)
    self.assertLen(else_clusters, 1)
    self.assertNotEqual(then_clusters, else_clusters)
    self.assertRegex(then_clusters[0].label, r"^branch [01] of ")
    self.assertRegex(else_clusters[0].label, r"^branch [01] of ")
    self.assertEqual(
      named_edges(graph, graph.edges),
      {(first, then_write), (first, else_read)},
    )
    # The two branches never both run: no race line joins them.
    self.assertEqual(graph.races, ())

    _, clusters, _, dashed = read_mermaid(
      self, testing.order_graph(compiled, format="mermaid")
    )
    self.assertCountEqual(
      clusters, [then_clusters[0].label, else_clusters[0].label]
    )
    self.assertEqual(dashed, [])
    svg = render_svg(self, testing.order_graph(compiled))
    self.assertLen(svg_groups(svg, "cluster"), 2)

  def test_branch_and_a_call_after_the_cond_race(self):
    # The control: a write after the cond, unordered with it, races with
    # the call of each branch.
    compiled = self.compile_branches(late_write=True)
    analysis, graph = drawn(compiled)
    (then_write,) = analysis.select("then_write")
    (else_read,) = analysis.select("else_read")
    (late,) = analysis.select("late_write")
    self.assertEqual(
      unordered_names(named_edges(graph, graph.races)),
      {frozenset((then_write, late)), frozenset((else_read, late))},
    )
    self.assertEqual(
      unordered_names(named_edges(graph, graph.races)),
      unordered_names(testing.races(compiled)),
    )
    _, _, _, dashed = read_mermaid(
      self, testing.order_graph(compiled, format="mermaid")
    )
    self.assertLen(dashed, 2)


# Labels that need quoting in both formats.
AWKWARD = 'é "q" [b] <a> #x; & `t` \\n {c} ü→'


class EscapingTest(absltest.TestCase):
  def awkward_graph(self):
    cluster = _order_graph.Cluster(0, AWKWARD)
    nodes = (
      _order_graph.Node('odd "name"', (AWKWARD, "second line"), (cluster,)),
      _order_graph.Node("plain", ("x",), ()),
    )
    return _order_graph.Graph(nodes, edges=((0, 1),), races=())

  def test_dot_shows_labels_literally(self):
    svg = render_svg(self, _order_graph.to_dot(self.awkward_graph()))
    nodes = svg_groups(svg, "node")
    self.assertEqual(nodes['odd "name"'], [AWKWARD, "second line"])
    (cluster,) = svg_groups(svg, "cluster").values()
    self.assertEqual(cluster, [AWKWARD])

  def test_newline_in_a_label(self):
    graph = _order_graph.Graph(
      (_order_graph.Node("a", ("one\ntwo",), ()),), (), ()
    )
    svg = render_svg(self, _order_graph.to_dot(graph))
    self.assertEqual(svg_groups(svg, "node"), {"a": ["one", "two"]})
    text = _order_graph.to_mermaid(graph)
    self.assertEqual(text, 'flowchart TD\n  n0["one#10;two"]\n')

  def test_mermaid_escapes_labels(self):
    text = _order_graph.to_mermaid(self.awkward_graph())
    labels, clusters, arrows, _ = read_mermaid(self, text)
    self.assertEqual(labels, {"n0": f"{AWKWARD}\nsecond line", "n1": "x"})
    self.assertEqual(clusters, {AWKWARD: ["n0"]})
    self.assertEqual(arrows, [("n0", "n1")])
    # Nothing Mermaid reads as syntax or markup is left raw in a label.
    for quoted in re.findall(r'\["([^"]*)"\]', text):
      self.assertNotRegex(quoted.replace("<br/>", ""), r'[<>"`&]')


class BadInputTest(absltest.TestCase):
  def test_unknown_format(self):
    with self.assertRaisesRegex(ValueError, "'svg'"):
      testing.order_graph(_CHAIN_HLO, format=typing.cast(typing.Any, "svg"))

  def test_among_string(self):
    with self.assertRaisesRegex(TypeError, "'lib_a'"):
      testing.order_graph(_CHAIN_HLO, among="lib_a")

  def test_selector_that_matches_nothing(self):
    with self.assertRaisesRegex(ValueError, "nothing_here"):
      testing.order_graph(_CHAIN_HLO, among=["nothing_here"])

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


def load_doc_graphs_tool():
  """tools/doc_graphs.py, or None where the checkout is not at hand."""
  path = ROOT / "tools" / "doc_graphs.py"
  if not (path.exists() and (ROOT / "docs" / "seeing_order.md").exists()):
    return None
  spec = importlib.util.spec_from_file_location("doc_graphs", path)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


class DocGraphsTest(absltest.TestCase):
  """docs/seeing_order.md: its example and the demo graphs it records."""

  def setUp(self):
    super().setUp()
    self.tool = load_doc_graphs_tool()
    if self.tool is None:
      self.skipTest("docs/ and tools/ are not next to the tests here")
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
