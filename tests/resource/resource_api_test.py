"""`Resource`'s API: what reaches ``fn``, ``token`` and ``repr``, and the
errors that name a bad token or a read that returns nothing to order by."""

from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

import entangle_jax
from entangle_jax import Resource
from entangle_jax.testing import (
  example_store,
  races,
  read_slot,
  reset_slots,
  write_slot,
)

WRITE = example_store.WRITE_SLOT_TARGET


class ApiTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    reset_slots()

  def test_token_without_pending_reads_is_the_write_result(self):
    given = jnp.int32(6)
    res = Resource(given)
    self.assertIs(res.token, given)
    res.write(write_slot, 1.0)
    token = res.token
    self.assertIs(res.token, token)  # No entangle: nothing is pending.

  def test_arguments_and_keywords_reach_fn(self):
    res = Resource(jnp.int32(6))
    res.write(lambda t, v, *, scale: write_slot(t, v * scale), 2.0, scale=3.0)
    x = res.read(lambda t, *, offset: read_slot(t + offset), offset=0)
    self.assertEqual(float(x), 6.0)

  def test_repr(self):
    res = Resource(jnp.int32(6))
    res.read(read_slot)
    self.assertIn("pending_reads=1", repr(res))


class InputErrorsTest(absltest.TestCase):
  def test_token_leaf_not_an_array(self):
    with self.assertRaisesRegex(
      TypeError, r"token\[1\]\['h'\] is not an array"
    ):
      Resource((jnp.int32(0), {"h": "handle"}))

  def test_leaves_entangle_refuses_are_refused_here_too(self):
    # One check for both: NumPy arrays of strings or objects, and ints too
    # large for any dtype, are no arrays JAX supports.
    for leaf in (np.array(["handle"]), np.array([object()]), 2**80):
      with self.subTest(leaf=type(leaf).__name__):
        with self.assertRaisesRegex(TypeError, r"token is not an array"):
          Resource(leaf)
        with self.assertRaisesRegex(TypeError, "not an array JAX supports"):
          entangle_jax.entangle(jnp.int32(0), leaf)
    # Control: a NumPy array and a Python int are arrays.
    self.assertIsInstance(Resource(np.array([1, 2])), Resource)
    self.assertIsInstance(Resource(7), Resource)

  def test_empty_token(self):
    with self.assertRaisesRegex(ValueError, "no array leaves"):
      Resource(())

  def test_write_changes_structure(self):
    res = Resource((jnp.int32(0), jnp.int32(1)))
    with self.assertRaisesRegex(TypeError, "tree structure"):
      res.write(lambda t, v: write_slot(t[0], v), 1.0)

  def test_fn_not_callable_is_named(self):
    res = Resource(jnp.int32(0))
    for method in (res.read, res.write):
      with (
        self.subTest(method.__name__),
        self.assertRaisesRegex(
          TypeError,
          rf"^Resource\.{method.__name__}: fn \(the native call\) must be "
          "callable, not int 3$",
        ),
      ):
        method(cast(Any, 3))
    # The control: a callable is called.
    self.assertEqual(res.read(lambda t: t * 0).dtype, jnp.int32)

  def test_read_result_not_an_array(self):
    res = Resource(jnp.int32(0))
    with self.assertRaisesRegex(TypeError, "not an array: got str"):
      res.read(lambda t: "status")

  def test_read_that_returns_nothing_is_an_error(self):
    def notify(token):  # a read whose host call returns nothing
      jax.debug.callback(lambda t: None, token)

    # The control: written by hand, nothing orders such a call before the
    # next write, and no entangle could (it has no result to witness).
    def by_hand(slot):
      token = write_slot(slot, 1.0)
      notify(token)
      return write_slot(token, 2.0)

    compiled = jax.jit(by_hand).lower(jnp.int32(0)).compile()
    (race,) = races(compiled)
    self.assertEqual(
      {race.first.target, race.second.target},
      {WRITE, "xla_ffi_python_cpu_callback"},
    )

    def with_resource(slot):
      res = Resource(slot)
      res.write(write_slot, 1.0)
      res.read(notify)
      res.write(write_slot, 2.0)
      return res.token

    with self.assertRaisesRegex(
      ValueError, r"notify returned no array \(None\)"
    ):
      jax.jit(with_resource).lower(jnp.int32(0))


if __name__ == "__main__":
  absltest.main()
