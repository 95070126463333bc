"""order_graph: what it draws (nodes, reduced order, races, clusters)."""

import functools
import itertools
import random

import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized

from entangle_jax import entangle, testing
from entangle_jax.demo import _hazard
from entangle_jax.demo._hazard import Ordering
from entangle_jax.testing._emitters import graph_formats
from entangle_jax.testing._ways_in import order_graph as order_graph_module
from tests import test_util  # sets up 8 CPU devices
from tests.graph_reading import (
  CHAIN_HLO,
  drawn,
  named_edges,
  read_mermaid,
  render_svg,
  svg_groups,
  unordered_names,
)
from tests.test_util import READ, WRITE


class DemoProgramTest(parameterized.TestCase):
  def test_entangle_draws_write_read_write(self):
    analysis, graph = drawn(_hazard.compiled(Ordering.ENTANGLE))
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
    analysis, graph = drawn(_hazard.compiled(ordering))
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
    compiled = _hazard.compiled(ordering)
    _, graph = drawn(compiled, among)
    self.assertEqual(
      unordered_names(named_edges(graph, graph.races)),
      unordered_names(testing.races(compiled, among)),
    )

  def test_among_may_be_any_iterable(self):
    # A generator is read once; the graph reads `among` twice (nodes, races).
    compiled = _hazard.compiled(Ordering.NONE)
    as_list = testing.order_graph(compiled, ["read", WRITE])
    self.assertIn("style=dashed", as_list)  # The race is drawn.
    self.assertEqual(
      testing.order_graph(compiled, (s for s in ["read", WRITE])), as_list
    )

  @parameterized.parameters(Ordering.NONE, Ordering.ENTANGLE)
  def test_mermaid_text(self, ordering):
    compiled = _hazard.compiled(ordering)
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
    compiled = _hazard.compiled(ordering)
    analysis = testing.OrderAnalysis(compiled)
    dot = testing.order_graph(compiled)
    svg = render_svg(self, dot)
    nodes = svg_groups(svg, "node")
    read = analysis.select(READ)[0]
    second = analysis.select("second_write")[0]
    self.assertIn(READ, nodes[read])
    self.assertIn(WRITE, nodes[second])
    edges = svg_groups(svg, "edge")
    # Graphviz titles an edge by its written direction; a race line is
    # written in either, without arrowheads.
    (between,) = {f"{read}->{second}", f"{second}->{read}"} & set(edges)
    a, b = between.split("->")
    (line,) = [x for x in dot.splitlines() if f'"{a}" -> "{b}"' in x]
    if ordering is Ordering.ENTANGLE:
      self.assertEqual(between, f"{read}->{second}")
      self.assertNotIn("dashed", line)
    else:
      self.assertIn("dir=none, style=dashed", line)

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
    compiled = _hazard.compiled(Ordering.ENTANGLE)
    _, effectful = drawn(compiled, ["read"])
    analysis = testing.OrderAnalysis(compiled, all_ops=True)
    everything = order_graph_module.build(analysis, ["read"])
    self.assertLen(effectful.nodes, 1)
    self.assertGreater(len(everything.nodes), 1)
    text = testing.order_graph(compiled, ["read"], all_ops=True)
    self.assertEqual(text, graph_formats.to_dot(everything))

  def test_labels_name_target_access_scope_and_line(self):
    analysis, graph = drawn(_hazard.compiled(Ordering.ENTANGLE))
    (read,) = analysis.select_ops("read")
    (node,) = [n for n in graph.nodes if n.name == read.name]
    # The same target, scope and file:line that races/format_races report,
    # and what the op accesses.
    self.assertEqual(
      node.label, (READ, read.access_text, read.scope, read.location)
    )
    # The store declares its read: it reads the slot its operand names.
    self.assertRegex(read.access_text, r"^reads object \S+$")
    self.assertIn("/read/", node.label[2])
    self.assertRegex(node.label[3], r"\.py:\d+$")  # Which frame: see Op.
    self.assertTrue(node.reads)
    (write,) = [n for n in graph.nodes if n.name != read.name][:1]
    self.assertRegex(write.label[1], r"^writes object \S+$")
    self.assertFalse(write.reads)


def random_dataflow_hlo(operands):
  """An HLO module of custom calls %c0, %c1...; %c<b> takes %c<a> for each
  a in operands[b] (and the parameter)."""
  lines = [
    "HloModule random, is_scheduled=true",
    "",
    "ENTRY %main (p: s32[]) -> s32[] {",
  ]
  lines.append("  %p = s32[] parameter(0)")
  for b, sources in enumerate(operands):
    args = ", ".join(["%p", *(f"%c{a}" for a in sources)])
    lines.append(
      f'  %c{b} = s32[] custom-call({args}), custom_call_target="t{b}"'
    )
  names = ", ".join(f"%c{b}" for b in range(len(operands)))
  shape = ", ".join("s32[]" for _ in operands)
  lines.append(f"  ROOT %out = ({shape}) tuple({names})")
  lines.append("}")
  return "\n".join(lines) + "\n"


class ReductionTest(absltest.TestCase):
  """Hand-written HLO: a -> {b, e} -> c -> f, plus a -> c and a -> f direct.

  b and e are unordered, and so is d with every other call.
  """

  def test_only_the_reduction_is_drawn(self):
    analysis, graph = drawn(CHAIN_HLO)
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
    # Random dataflow graphs of custom calls, written as HLO: the arrows
    # drawn must be exactly the pairs with no call between them.
    rng = random.Random(0)
    for _ in range(40):
      n = rng.randrange(1, 12)
      operands = [[a for a in range(b) if rng.random() < 0.3] for b in range(n)]
      before = [[False] * n for _ in range(n)]
      for b in range(n):
        for a in operands[b]:
          before[a][b] = True
          for c in range(n):
            before[c][b] |= before[c][a]
      expected = {
        (f"c{a}", f"c{b}")
        for a, b in itertools.product(range(n), repeat=2)
        if before[a][b]
        and not any(before[a][c] and before[c][b] for c in range(n))
      }
      _, graph = drawn(random_dataflow_hlo(operands))
      self.assertEqual(named_edges(graph, graph.edges), expected)
      drawn_order = [int(node.name[1:]) for node in graph.nodes]
      for a, b in itertools.combinations(range(n), 2):
        if before[a][b]:
          self.assertLess(drawn_order.index(a), drawn_order.index(b))

  def test_chain_of_three_among_selectors(self):
    _, graph = drawn(CHAIN_HLO, ["lib_a", "lib_c", "lib_f"])
    self.assertEqual(named_edges(graph, graph.edges), {("a", "c"), ("c", "f")})
    text = testing.order_graph(CHAIN_HLO, ["lib_a", "lib_c", "lib_f"])
    self.assertEqual(text.count(" -> "), 2)
    self.assertNotIn("dashed", text)

  def test_dot_and_mermaid_agree(self):
    _, graph = drawn(CHAIN_HLO)
    labels, _, arrows, dashed = read_mermaid(
      self, testing.order_graph(CHAIN_HLO, format="mermaid")
    )
    target = {n: label.split("\n")[0] for n, label in labels.items()}
    self.assertEqual(
      {(target[a], target[b]) for a, b in arrows},
      {(f"lib_{a}", f"lib_{b}") for a, b in named_edges(graph, graph.edges)},
    )
    self.assertLen(dashed, 6)
    svg = render_svg(self, testing.order_graph(CHAIN_HLO))
    self.assertCountEqual(svg_groups(svg, "node"), "abcdef")
    self.assertLen(svg_groups(svg, "edge"), 5 + 6)


def read_then_write(token, ordering):
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
        lambda t, _: read_then_write(t, ordering), token, None, length=3
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

if __name__ == "__main__":
  absltest.main()
