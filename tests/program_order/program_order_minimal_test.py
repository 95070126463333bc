"""`in_program_order` adds an entangle only where no chain of native-call
results and entangles already orders two calls (issue 51, item 4). Ten
handles written, read, written again:

* elements of one handle array whose targets declare ``distinct_elements``
  are ten objects: 10 entangles, as ten named ``Resource`` objects take by
  hand;
* ten separate traced arguments may be one object (the caller may pass one
  slot ten times), so each write comes after every earlier call and each
  read after every write: 28 entangles, each needed (9 chain the first
  writes, 9 order the reads after the last of them, 10 the second writes),
  and with all ten arguments one slot every read is right;
* with ``distinct_arguments=True`` (the caller's word that they never
  are), ten separate arguments take the 10 entangles that ten named
  ``Resource`` objects take, and the race check reads the same word from
  the module.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

import entangle_jax
from entangle_jax import in_program_order, testing
from tests.program_order.views_targets import _read, _write

N = 10


def entangles(c) -> int:
  return testing.module_text(c).count('"entangle_jax_entangle"')


def phases(handles):
  """Writes 1 to every handle, reads each, writes 2 to each."""
  tokens = [_write(h, jnp.float32(1.0)) for h in handles]
  reads = [_read(t) for t in tokens]
  for t in tokens:
    _write(t, jnp.float32(2.0))
  return jnp.stack(reads)


def one_array(handles):
  return phases([handles[i] for i in range(N)])


def separate(*handles):
  return phases(handles)


def by_hand(*handles):
  res = [entangle_jax.Resource(h, name=f"h{i}") for i, h in enumerate(handles)]
  for r in res:
    r.write(_write, jnp.float32(1.0))
  reads = [r.read(_read) for r in res]
  for r in res:
    r.write(_write, jnp.float32(2.0))
  return jnp.stack(reads)


class MinimalTest(absltest.TestCase):
  def compiled(self, f, *args):
    c = jax.jit(f).lower(*args).compile()
    self.assertEqual(testing.races(c), [])
    return c

  def test_elements_of_one_array_take_what_resources_take(self):
    args = [jnp.int32(20 + i) for i in range(N)]
    self.assertNotEmpty(
      testing.races(jax.jit(separate).lower(*args).compile())
    )  # The control.
    self.assertEqual(entangles(self.compiled(by_hand, *args)), N)
    handles = jnp.arange(20, 20 + N, dtype=jnp.int32)
    c = self.compiled(in_program_order(one_array), handles)
    self.assertEqual(entangles(c), N)
    np.testing.assert_array_equal(c(handles), [1.0] * N)

  def test_separate_arguments_may_be_one_object(self):
    args = [jnp.int32(20 + i) for i in range(N)]
    c = self.compiled(in_program_order(separate), *args)
    self.assertEqual(entangles(c), (N - 1) + (N - 1) + N)
    same = [jnp.int32(20)] * N
    np.testing.assert_array_equal(c(*same), [1.0] * N)

  def test_distinct_arguments_take_what_resources_take(self):
    args = [jnp.int32(20 + i) for i in range(N)]
    ordered = in_program_order(separate, distinct_arguments=True)
    c = self.compiled(ordered, *args)
    by_hand = entangles(self.compiled(by_hand_fn, *args))
    self.assertEqual(entangles(c), by_hand)
    self.assertLess(by_hand, (N - 1) + (N - 1) + N)  # Fewer than unnamed.
    for _ in range(5):
      np.testing.assert_array_equal(c(*args), [1.0] * N)
    # The check reads the word from the module: without the names the
    # calls record, the same module races.
    text = testing.module_text(c)
    self.assertIn("entangle_jax:write:args[3]", text)
    unnamed = text.replace("entangle_jax:", "renamed:")
    self.assertNotEmpty(testing.races(unnamed))

  def test_distinct_arguments_keep_elements_as_declared(self):
    ordered = in_program_order(one_array, distinct_arguments=True)
    handles = jnp.arange(20, 20 + N, dtype=jnp.int32)
    c = self.compiled(ordered, handles)
    self.assertEqual(entangles(c), N)
    np.testing.assert_array_equal(c(handles), [1.0] * N)

  def test_one_value_passed_twice_is_one_object(self):
    ordered = in_program_order(distinct_arguments=True)(separate)

    def twice(h):
      return ordered(*([h] * N))

    c = self.compiled(twice, jnp.int32(20))
    self.assertEqual(entangles(c), (N - 1) + (N - 1) + N)
    np.testing.assert_array_equal(c(jnp.int32(20)), [1.0] * N)

  def test_keyword_arguments_are_named_by_their_path(self):
    def keywords(*, a, b):
      return phases([a, b])

    ordered = in_program_order(keywords, distinct_arguments=True)
    c = self.compiled(
      lambda a, b: ordered(a=a, b=b), jnp.int32(20), jnp.int32(21)
    )
    # Quotes escaped (XLA's text would escape them its own way), and read
    # back as they were.
    self.assertIn("entangle_jax:read:kwargs[%27a%27]", testing.module_text(c))
    names = {
      a.resource
      for op in testing.OrderAnalysis(c).user_native_calls()
      for a in op.accesses
    }
    self.assertEqual(names, {"kwargs['a']", "kwargs['b']"})
    self.assertEqual(entangles(c), 2)

  def test_keys_that_differ_by_a_quote_are_two_arguments(self):
    def two(tree):
      (a, b) = tree.values()
      return phases([a, b])

    slots = (jnp.int32(20), jnp.int32(21))
    counts = []
    for keys in (("a", "b"), ("a", "a'"), ("a", 'a"')):
      tree = dict(zip(keys, slots, strict=True))
      ordered = in_program_order(two, distinct_arguments=True)
      c = self.compiled(ordered, tree)
      counts.append(entangles(c))
      np.testing.assert_array_equal(c(tree), [1.0, 1.0])
    self.assertEqual(counts, [2, 2, 2])

  def test_distinct_arguments_must_be_a_bool(self):
    with self.assertRaisesRegex(TypeError, "distinct_arguments.*'yes'"):
      in_program_order(separate, distinct_arguments="yes")  # ty: ignore[no-matching-overload]


by_hand_fn = by_hand


if __name__ == "__main__":
  absltest.main()
