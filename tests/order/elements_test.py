"""Which elements a slice takes and an update writes (`_order.elements`),
and the attributes they are read from (`_hlo.attributes`)."""

from absl.testing import absltest

from entangle_jax.testing._hlo.attributes import attribute_fields
from entangle_jax.testing._order import algebra, elements

S, W = algebra.new_leaf(deps=0b01), algebra.new_leaf(deps=0b10)


def _stack():
  """``concatenate(s[None], w[None])``: a ``f32[2]``."""
  return elements.concatenated([S, W], [(1,), (1,)], (2,), 0)


class SlicedTest(absltest.TestCase):
  def test_a_slice_of_one_part_is_that_part(self):
    stack = _stack()
    self.assertIs(elements.sliced(stack, (2,), ((1, 2, 1),)), W)
    self.assertIs(elements.sliced(stack, (2,), ((0, 1, 1),)), S)

  def test_after_a_reshape_the_row_major_index_tells_the_part(self):
    # A reshape keeps the leaf (and its layout): [1, 0] of (2, 1) is w.
    stack = _stack()
    self.assertIs(elements.sliced(stack, (2, 1), ((1, 2, 1), (0, 1, 1))), W)

  def test_nested_parts_are_followed(self):
    # concatenate([concatenate([s, w]), s]) of f32[3]: [1] is w.
    inner = _stack()
    outer = elements.concatenated([inner, S], [(2,), (1,)], (3,), 0)
    self.assertIs(elements.sliced(outer, (3,), ((1, 2, 1),)), W)
    self.assertIs(elements.sliced(outer, (3,), ((0, 2, 1),)), inner)
    self.assertEqual(elements.sliced(outer, (3,), ((2, 3, 1),)).deps, 0b01)

  def test_a_slice_of_both_parts_is_computed_from_both(self):
    both = elements.sliced(_stack(), (2,), ((0, 2, 1),))
    self.assertEqual(both.deps, 0b11)
    self.assertEqual(algebra.each(both).deps, 0)

  def test_without_a_layout_only_what_every_part_shares(self):
    # A broadcast keeps the parts but not where they lie.
    broadcast = algebra.replace(_stack(), layout=None)
    taken = elements.sliced(broadcast, (2, 3), ((0, 1, 1), (1, 2, 1)))
    self.assertEqual(taken.deps, 0)

  def test_an_elementwise_op_keeps_what_each_element_has(self):
    plus = algebra.join([_stack(), algebra.new_leaf(deps=0b100)])
    self.assertEqual(plus.deps, 0b111)
    self.assertEqual(algebra.each(plus).deps, 0b100)

  def test_an_update_at_known_cells(self):
    cells = elements.cells_of((3,), ((1, 2, 1),))
    self.assertEqual(cells, frozenset({1}))
    assert cells is not None
    updated = elements.updated(S, W, (3,), cells)
    self.assertEqual(updated.deps, 0b11)
    self.assertEqual(elements.sliced(updated, (3,), ((1, 2, 1),)).deps, 0b10)
    self.assertEqual(elements.sliced(updated, (3,), ((0, 1, 1),)).deps, 0b01)
    # Overwriting every element leaves the update alone.
    self.assertEqual(elements.updated(S, W, (1,), frozenset({0})).deps, 0b10)

  def test_a_scatter_of_single_elements_at_constant_indices(self):
    one = ((), (0,), (0,), 0)
    self.assertEqual(elements.scattered(one, "{1}", (1,), (3,)), frozenset({1}))
    # Out of bounds: nothing written.
    self.assertEqual(elements.scattered(one, "{5}", (1,), (3,)), frozenset())
    # A window scatter is not read here.
    window = ((0,), (), (0,), 1)
    self.assertIsNone(elements.scattered(window, "{1}", (1,), (3,)))


class AttributesTest(absltest.TestCase):
  def _fields(self, opcode, text):
    return attribute_fields(opcode, text, lambda frame: ())

  def test_slice_ranges_with_and_without_strides(self):
    fields = self._fields("slice", ", slice={[1:2], [0:6:2]}")
    self.assertEqual(fields["slice_ranges"], ((1, 2, 1), (0, 6, 2)))
    self.assertEqual(fields["slice_starts"], (1, 0))

  def test_dimensions_and_iota_dimension(self):
    self.assertEqual(
      self._fields("concatenate", ", dimensions={1}")["dimensions"], (1,)
    )
    self.assertEqual(
      self._fields("iota", ", iota_dimension=1")["dimensions"], (1,)
    )

  def test_scatter_dims(self):
    text = (
      ", update_window_dims={}, inserted_window_dims={0},"
      " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=r"
    )
    self.assertEqual(
      self._fields("scatter", text)["scatter_dims"], ((), (0,), (0,), 1)
    )


if __name__ == "__main__":
  absltest.main()
