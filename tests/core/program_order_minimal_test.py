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
  and with all ten arguments one slot every read is right.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

import entangle_jax
from entangle_jax import in_program_order, testing
from tests.core.views_targets import _read, _write

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


if __name__ == "__main__":
  absltest.main()
