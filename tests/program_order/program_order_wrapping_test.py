"""`in_program_order` around what JAX hands it: ``jax.export`` with
symbolic shapes (issue 51, case 6: the transform's sizes called ``int()``
on a symbolic dimension and raised ``InconclusiveDimensionOperation``),
and ``jax.pmap`` (case 7: ``functools.wraps`` copied pmap's own ``lower``
onto the wrapper, so ``jax.jit(in_program_order(jax.pmap(f))).lower()``
lowered the unordered program: 1 race there, none in what ran).

Each test has its control: the same program without the transform races.
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax import export

import entangle_jax
from entangle_jax import in_program_order, testing
from tests import test_util

ENTANGLE = "entangle_jax_entangle"


def write_read_write(slots, values):
  token = testing.write_slot(slots, values)
  x = testing.read_slot(token)
  testing.write_slot(token, values * 2)
  return x


def entangles(text: str) -> int:
  return text.count(f'custom_call_target="{ENTANGLE}"')


class WrappingTest(absltest.TestCase):
  def test_export_with_symbolic_shapes(self):
    checks = [
      *entangle_jax.export_safety_checks(),
      export.DisabledSafetyCheck.custom_call(test_util.WRITE),
      export.DisabledSafetyCheck.custom_call(test_util.READ),
    ]
    shape = export.symbolic_shape("n")
    specs = (
      jax.ShapeDtypeStruct(shape, jnp.int32),
      jax.ShapeDtypeStruct(shape, jnp.float32),
    )
    exported = export.export(
      jax.jit(in_program_order(write_read_write)), disabled_checks=checks
    )(*specs)
    restored = export.deserialize(exported.serialize())
    self.assertEqual(restored.mlir_module().count(f"@{ENTANGLE}("), 1)
    args = (jnp.arange(3, 6, dtype=jnp.int32), jnp.ones(3))
    racy = test_util.compiled(write_read_write, *args)
    self.assertNotEmpty(testing.races(racy))  # The control.
    run = test_util.compiled(restored.call, *args)
    self.assertEqual(testing.races(run), [])
    np.testing.assert_array_equal(run(*args), [1.0] * 3)

  def test_a_partial_names_its_module_as_jit_does(self):
    args = (jnp.arange(3, dtype=jnp.int32), jnp.ones(3))
    for f in (write_read_write, functools.partial(write_read_write)):
      plain = jax.jit(f).lower(*args).as_text()
      ordered = jax.jit(in_program_order(f)).lower(*args).as_text()
      self.assertIn("jit_write_read_write", plain)  # The control.
      self.assertIn("jit_write_read_write", ordered)

  def test_pmap_lowers_the_ordered_function(self):
    wrapped = in_program_order(jax.pmap(write_read_write))
    self.assertNotIn("lower", vars(wrapped))
    args = (jnp.arange(1, dtype=jnp.int32) + 7, jnp.ones(1))
    racy = jax.jit(jax.pmap(write_read_write)).lower(*args).compile()
    self.assertNotEmpty(testing.races(racy))  # The control.
    primitives = {
      e.primitive.name
      for e in jax.make_jaxpr(jax.pmap(write_read_write))(*args).jaxpr.eqns
    }
    if "xla_pmap" in primitives:
      # Older jax binds pmap as its own primitive, which in_program_order
      # does not order inside: it says so, naming it, rather than pass
      # the calls by.
      with self.assertRaisesRegex(NotImplementedError, "`xla_pmap`"):
        jax.jit(wrapped).lower(*args)
      return
    # Newer jax runs pmap as a shard_map inside a jit: in_program_order then
    # warns that the devices' copies of the write are not ordered with each
    # other (here one device runs it). No other warning.
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      lowered = jax.jit(wrapped).lower(*args)
    for warning in caught:
      self.assertIn("writes inside a shard_map", str(warning.message))
    fixed = lowered.compile()
    self.assertEqual(testing.races(fixed), [])
    self.assertGreater(entangles(testing.module_text(fixed)), 0)
    np.testing.assert_array_equal(fixed(*args), [1.0])
    np.testing.assert_array_equal(jax.jit(wrapped)(*args), [1.0])


if __name__ == "__main__":
  absltest.main()
