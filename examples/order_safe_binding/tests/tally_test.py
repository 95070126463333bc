"""tally_jax's tests: each ordering claim with the control that shows it
fails without the ordering. They run with pytest on an installed tally-jax
(`pip install .`, then `python -m pytest tests`) and as Bazel py_tests
(`bazel test //...`), from this folder."""

import importlib.metadata
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tally_jax
from absl.testing import absltest
from tally_jax import Tally, _ffi, tokens
from tally_jax._declarations import TABLE

from entangle_jax import in_program_order
from entangle_jax.testing import (
  assert_happens_before,
  declarations_in_effect,
  declare_target,
  races,
)

HAZARDS = 12

# Tests that compile racing programs on purpose (the controls):
# `pytest --entangle-races=fail` reports their races without failing them.
RACES_ON_PURPOSE = pytest.mark.entangle_races_expected


def _installed() -> bool:
  try:
    importlib.metadata.distribution("tally-jax")
  except importlib.metadata.PackageNotFoundError:
    return False
  return True


if not _installed():
  # Bazel runs the package from its runfiles, where no entry point is
  # published: declare its targets in code instead, as the entry point
  # would (tally_jax/_declarations.py).
  for _target, _keys in TABLE["targets"].items():
    declare_target(_target, **_keys)


# Twelve add / slow get / add hazards, each on its own accumulator, and one
# array large enough that XLA:CPU runs the module on its concurrent
# executor (a small module runs in schedule order and proves nothing).
# Each program returns the reads and the handles after its last call: the
# tokens that the next use of the accumulators (here, destroy) must take.
def unordered(handles, big):
  """As a binding without entangle-jax leaves it: nothing orders a get
  before the add written after it."""
  reads, after = [], []
  for i in range(HAZARDS):
    handle = _ffi.add(handles[i], 1.0)
    reads.append(_ffi.get(handle))
    after.append(_ffi.add(handle, 1.0))
  return jnp.stack(reads), jnp.stack(after), jnp.sin(big).sum()


GET_LINE = unordered.__code__.co_firstlineno + next(
  n
  for n, line in enumerate(inspect.getsourcelines(unordered)[0])
  if "_ffi.get(" in line
)


def with_tally(handles, big):
  reads, after = [], []
  for i in range(HAZARDS):
    t = Tally(handles[i])
    t.add(1.0)
    reads.append(t.get())
    t.add(1.0)  # after the get
    after.append(t.handle)
  return jnp.stack(reads), jnp.stack(after), jnp.sin(big).sum()


def with_tokens(handles, big):
  reads, after = [], []
  for i in range(HAZARDS):
    handle = tokens.add(handles[i], 1.0)
    value, handle = tokens.get(handle)
    after.append(tokens.add(handle, 1.0))  # takes the token the get returned
    reads.append(value)
  return jnp.stack(reads), jnp.stack(after), jnp.sin(big).sum()


def with_stale_token(handles, big):
  """Token threading gone wrong: the last add takes the handle from before
  the get."""
  reads, after = [], []
  for i in range(HAZARDS):
    handle = tokens.add(handles[i], 1.0)
    value, _ = tokens.get(handle)
    after.append(tokens.add(handle, 1.0))
    reads.append(value)
  return jnp.stack(reads), jnp.stack(after), jnp.sin(big).sum()


BIG = jnp.ones(1 << 16)


def compiled(fn):
  handles = jnp.zeros(HAZARDS, jnp.int32)
  return jax.jit(fn).lower(handles, BIG).compile()


def wrong_reads(fn, runs=5):
  """Gets that did not see exactly the first add, over `runs` runs, each on
  fresh accumulators, destroyed after the run's last add (through the
  handles it returned)."""
  step = jax.jit(fn)
  wrong = 0
  tally_jax.set_query_delay(0.002)
  try:
    for _ in range(runs):
      reads, after, _ = step(_ffi.create(jnp.zeros(HAZARDS)), BIG)
      wrong += int(np.sum(np.asarray(reads) != 1.0))
      _ffi.destroy(after).block_until_ready()
  finally:
    tally_jax.set_query_delay(0)
  return wrong


class CompiledOrderTest(absltest.TestCase):
  """What entangle-jax's analysis proves on the module XLA runs."""

  def test_tally_leaves_no_race(self):
    self.assertEqual(races(compiled(with_tally)), [])

  def test_tokens_leave_no_race(self):
    self.assertEqual(races(compiled(with_tokens)), [])

  @RACES_ON_PURPOSE
  def test_control_unordered_calls_race(self):
    pairs = races(compiled(unordered))
    # One get / second-add pair per accumulator, nothing between them.
    self.assertLen(pairs, HAZARDS)
    self.assertEqual(
      {frozenset({r.first.target, r.second.target}) for r in pairs},
      {frozenset({"tally_get", "tally_add"})},
    )

  def test_in_program_order_orders_the_unordered_calls(self):
    # A user's one-line fix, for calls made without Tally: the declarations
    # say what each call touches, and in_program_order adds one entangle
    # per hazard, as Tally does.
    self.assertEqual(races(compiled(in_program_order(unordered))), [])

  @RACES_ON_PURPOSE
  def test_control_a_stale_token_races(self):
    self.assertLen(races(compiled(with_stale_token)), HAZARDS)

  def test_the_get_happens_before_the_next_add(self):
    def step(handle):
      t = Tally(handle)
      with jax.named_scope("first_add"):
        t.add(1.0)
      with jax.named_scope("query"):
        value = t.get()
      with jax.named_scope("second_add"):
        t.add(1.0)
      return value, t.handle

    module = jax.jit(step).lower(jnp.int32(0)).compile()
    assert_happens_before(module, "first_add", "query")
    assert_happens_before(module, "query", "second_add")

  @RACES_ON_PURPOSE
  def test_control_without_tally_the_get_is_not_ordered(self):
    def step(handle):
      with jax.named_scope("query"):
        value = _ffi.get(handle)
      with jax.named_scope("second_add"):
        _ffi.add(handle, 1.0)
      return value

    module = jax.jit(step).lower(jnp.int32(0)).compile()
    with self.assertRaisesRegex(AssertionError, "query"):
      assert_happens_before(module, "query", "second_add")

  @RACES_ON_PURPOSE
  def test_reports_name_the_callers_line_not_the_bindings(self):
    version = tuple(int(p) for p in jax.__version__.split(".")[:3])
    if version < (0, 8, 2):
      self.skipTest("this jax records only the innermost Python frame")
    (race, *_) = races(compiled(unordered))
    # The get and the second add of `unordered`, in this file; the frame
    # inside the binding (tally_jax/_ffi.py) that made each call is not it.
    # (Its path is as the module's stack frames give it: relative to the
    # folder of the run, tests/tally_test.py under Bazel.)
    lines = [
      str(r.location).rpartition("/")[2] for r in (race.first, race.second)
    ]
    self.assertEqual(
      sorted(lines),
      [f"tally_test.py:{GET_LINE}", f"tally_test.py:{GET_LINE + 1}"],
    )

  def test_declarations_are_in_effect(self):
    declared = declarations_in_effect().for_target("tally_create")
    assert declared is not None, "tally_create is not declared"
    self.assertEqual(declared.mode, "none")
    if _installed():  # Published by the installed package's entry point.
      self.assertIn("entry point tally", declared.source)


class RuntimeOrderTest(absltest.TestCase):
  """What XLA:CPU does when it runs the wide program."""

  def test_tally_reads_right(self):
    self.assertEqual(wrong_reads(with_tally), 0)

  def test_tokens_read_right(self):
    self.assertEqual(wrong_reads(with_tokens), 0)

  def test_in_program_order_reads_right(self):
    self.assertEqual(wrong_reads(in_program_order(unordered)), 0)

  @RACES_ON_PURPOSE
  def test_control_unordered_reads_go_wrong(self):
    self.assertGreater(wrong_reads(unordered), 0)


class LifetimeTest(absltest.TestCase):
  def test_create_inside_jit_makes_distinct_handles(self):
    @jax.jit
    def two():
      return Tally.create(0.0).handle, Tally.create(0.0).handle

    first, second = two()
    self.assertNotEqual(int(first), int(second))
    _ffi.destroy(jnp.stack([first, second])).block_until_ready()

  def test_control_a_create_without_side_effect_is_merged(self):
    pure_create = jax.ffi.ffi_call(
      "tally_create", jax.ShapeDtypeStruct((), jnp.int32)
    )

    @jax.jit
    def two():
      return pure_create(jnp.float32(0)), pure_create(jnp.float32(0))

    first, second = two()
    self.assertEqual(int(first), int(second))  # one accumulator, not two
    _ffi.destroy(first).block_until_ready()

  def test_destroy_after_the_last_use(self):
    live = tally_jax.live_count()

    @jax.jit
    def use_once(x):
      t = Tally.create(x)
      t.add(1.0)
      value = t.get()
      t.destroy()  # after the get
      return value

    self.assertEqual(float(use_once(2.0)), 3.0)
    self.assertEqual(tally_jax.live_count(), live)
    self.assertEqual(races(jax.jit(use_once).lower(2.0).compile()), [])

  def test_a_call_after_destroy_is_refused(self):
    t = Tally.create(0.0)
    t.destroy()
    with self.assertRaisesRegex(RuntimeError, "get after destroy"):
      t.get()

  def test_a_dangling_handle_fails_at_run_time(self):
    handle = Tally.create(0.0).handle
    _ffi.destroy(handle).block_until_ready()
    with self.assertRaisesRegex(Exception, "no accumulator with handle"):
      _ffi.get(handle).block_until_ready()


class TransformsTest(absltest.TestCase):
  def test_vmap_over_a_batch_of_handles(self):
    def step(handle, amount):
      t = Tally(handle)
      t.add(amount)
      return t.get(), t.handle

    handles = Tally.create(jnp.array([1.0, 5.0, 7.0])).handle
    values, _ = jax.jit(jax.vmap(step))(handles, jnp.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(values, [2.0, 7.0, 10.0])
    module = jax.jit(jax.vmap(step)).lower(handles, jnp.ones(3)).compile()
    self.assertEqual(races(module), [])
    _ffi.destroy(handles).block_until_ready()

  def test_grad_through_a_query(self):
    t = Tally.create(3.0)

    def loss(w):
      t2 = Tally(t.handle)
      t2.add(w)  # changes the state; no gradient flows into it
      return w * t2.get()

    # d/dw (w * value) with the value held constant: the value, 3 + 2.
    self.assertEqual(float(jax.grad(loss)(2.0)), 5.0)
    _ffi.destroy(t.handle).block_until_ready()

  def test_order_across_jitted_calls_follows_the_handle(self):
    add = jax.jit(lambda h: tokens.add(h, 1.0))
    get = jax.jit(tokens.get)
    handle = Tally.create(0.0).handle
    tally_jax.set_query_delay(0.001)
    try:
      for expected in range(1, 6):
        handle = add(handle)  # the next call takes this handle
        value, handle = get(handle)
        self.assertEqual(float(value), expected)
    finally:
      tally_jax.set_query_delay(0)
    _ffi.destroy(handle).block_until_ready()

  def test_eager_and_disable_jit(self):
    with jax.disable_jit():
      t = Tally.create(1.0)
      t.add(2.0)
      self.assertEqual(float(t.get()), 3.0)
      t.destroy()

  def test_bad_handles_are_named(self):
    with self.assertRaisesRegex(TypeError, "int32"):
      Tally(jnp.float32(1.0))
    with self.assertRaisesRegex(ValueError, "delay"):
      tally_jax.set_query_delay(-1)


if __name__ == "__main__":
  absltest.main()
