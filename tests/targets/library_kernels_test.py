"""The library kernel table: what JAX lowers to on CPU is not a native call,
a user target of a similar name is, and the page shows the table."""

import re
import unittest

import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized
from jax.experimental import sparse

from entangle_jax import Resource, testing
from entangle_jax._src.targets import library_kernels as _library_kernels
from tests import test_util
from tests.hand_written_hlo import hlo_module, native
from tools import rule_docs


def _top_k(x):
  return jax.lax.top_k(x, 3)[0]


def _approx_max_k(x):
  return jax.lax.approx_max_k(x, 3)[0]


def _sparse_matmul(x):
  matrix = sparse.BCSR.fromdense(jnp.eye(8) * x, nse=8)
  return matrix @ x


CPU_KERNELS = (
  ("top_k", _top_k, "TopK"),
  ("approx_max_k", _approx_max_k, "TopK"),
  ("sparse_matmul", _sparse_matmul, "cpu_csr_sparse_dense_ffi"),
)


def program(kernel, ordered: bool):
  """A write, a read and a second write on one slot, through a Resource
  (`ordered`) or not, next to `kernel`."""

  def fn(slot, x):
    y = kernel(x)
    if ordered:
      res = Resource(slot, name="slots")
      res.write(testing.write_slot, 1.0)
      value = res.read(testing.read_slot)
      res.write(testing.write_slot, y[0])
      return value, res.token
    t = testing.write_slot(slot, 1.0)
    value = testing.read_slot(t)
    testing.write_slot(t, y[0])
    return value, t

  return test_util.compiled(fn, jnp.int32(0), jnp.arange(8.0))


class CpuKernelsTest(parameterized.TestCase):
  @parameterized.named_parameters(*CPU_KERNELS)
  def test_a_kernel_next_to_an_ordered_pair_is_no_race(self, kernel, target):
    c = program(kernel, ordered=True)
    text = testing.module_text(c)
    # The kernel is in the module, as JAX lowers it on CPU...
    self.assertIn(f'custom_call_target="{target}"', text)
    analysis = testing.OrderAnalysis(c)
    (op,) = analysis.select_ops(target)
    self.assertFalse(testing.is_user_native_call(op))
    # ...and only the user's calls are looked at.
    self.assertEqual(testing.races(c), [])

  @parameterized.named_parameters(*CPU_KERNELS)
  def test_control_without_the_order_the_users_calls_race(self, kernel, target):
    found = testing.races(program(kernel, ordered=False))
    self.assertLen(found, 1)
    targets = {op.target for race in found for op in (race.first, race.second)}
    self.assertNotIn(target, targets)


class SimilarNamesTest(parameterized.TestCase):
  @parameterized.parameters(
    (k.pattern, ("my" + k.pattern) if k.prefix else (k.pattern + "_mine"))
    for k in _library_kernels.KERNELS
  )
  def test_a_user_target_of_a_similar_name_is_a_native_call(self, kernel, user):
    self.assertFalse(_library_kernels.is_library_target(user))
    prefix = kernel + ("x" if kernel.endswith(("_", "$", ".")) else "_x")
    entry = _library_kernels.entry_for(prefix)
    if entry is not None:
      self.assertTrue(entry.prefix)  # Only a prefix entry matches more.
    self.assertLen(testing.races(_next_to_a_write(user)), 1)
    self.assertEqual(testing.races(_next_to_a_write(kernel)), [])  # Control.


def _next_to_a_write(target: str) -> str:
  """A module with a side-effecting call to `target` and one to ``W``,
  unordered."""
  call = (
    f'%c = s32[] custom-call(%p), custom_call_target="{target}", '
    "custom_call_has_side_effect=true"
  )
  return hlo_module(f"%p = s32[] parameter(0)\n{call}\n{native('W', 'p')}")


class TableTest(absltest.TestCase):
  def test_each_entry_once_with_a_reason(self):
    patterns = [k.pattern for k in _library_kernels.KERNELS]
    self.assertEqual(len(patterns), len(set(patterns)))
    for kernel in _library_kernels.KERNELS:
      self.assertIn(kernel.platform, ("cpu", "gpu", "tpu", "any"))
      self.assertGreater(len(kernel.reason), 20, kernel)

  def test_the_kernels_of_the_access_model_issue_are_listed(self):
    for target in (
      "TopK",
      "cpu_csr_sparse_dense_ffi",
      "triton_kernel_call_ffi",
      "cusparse_csr_matmat",
      "hipsparse_coo_matvec",
      "cudnn_rnn_ffi",
    ):
      self.assertTrue(_library_kernels.is_library_target(target), target)

  def test_the_page_shows_the_table(self):
    if not rule_docs.PAGE.is_file():
      raise unittest.SkipTest("no docs/ beside tests/")
    text = rule_docs.PAGE.read_text()
    self.assertEqual(
      rule_docs.block_text(text, "library kernels"),
      _library_kernels.markdown(),
      f"run {rule_docs.COMMAND} to rewrite the page's table",
    )
    rows = re.findall(r"^\| `([^`]+)`", _library_kernels.markdown(), re.M)
    self.assertEqual(rows, [k.pattern for k in _library_kernels.KERNELS])


if __name__ == "__main__":
  absltest.main()
