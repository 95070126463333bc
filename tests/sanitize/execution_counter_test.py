"""The execution counter the sanitizer adds to a module whose host
callbacks are all in loops: it survives XLA (even copied from a
``pure_callback``), it is no call of the user's program to the static
check, and nothing of it (nor of the compile hook) outlives the
``sanitize()`` block. Each program's control is what its callbacks
recorded of themselves as they ran."""

import io
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax import lax
from jax.experimental import io_callback

from entangle_jax import testing
from entangle_jax._src.targets.names import (
  SANITIZER_COUNTER_SCOPE,
  SANITIZER_EXECUTION_TARGET,
  SANITIZER_ITERATION_TARGET,
)
from entangle_jax.testing._sanitize import checks, jax_hooks
from tests import test_util

SCALAR = jax.ShapeDtypeStruct((), jnp.float32)
# The first jax whose XLA names the sanitizer's execution op by its scope
# (jax 0.6.2's names it custom-call.N, which shifts the names of the
# module's other custom calls, so races() inside a block names the same
# pairs by other names; its calls are placed and compared all the same:
# programs_test).
COUNTER_FROM = (0, 7)


class Log:
  """What the callbacks did, in the order they did it, as they saw it."""

  def __init__(self):
    self.entries: list[tuple[str, int]] = []

  def tags(self) -> list[str]:
    return [tag for tag, _ in self.entries]

  def add(self, tag: str) -> None:
    self.entries.append((tag, time.monotonic_ns()))

  def read(self, x):
    """A host callback that reads: recorded as "r"."""
    self.add("r")
    return np.float32(x)


def loop_of_two(log: Log, ordered: bool):
  """A loop whose body writes then reads through two io_callbacks; only
  `ordered` keeps them in that order."""

  def write(x):
    log.add("w")
    return np.float32(x)

  def f(x):
    def body(i, x):
      a = io_callback(write, SCALAR, x, ordered=ordered)
      b = io_callback(log.read, SCALAR, x, ordered=ordered)
      return a + b

    return lax.fori_loop(0, 3, body, x)

  return f


def pure_first_loop(log: Log, iterations: int):
  """A loop whose first callback is a pure_callback (the counter's
  template used to be the loop's first callback), then a slow write that
  needs its result and a read that needs nothing of the write: XLA may
  run the read first, and jax 0.10.2 does, every iteration."""

  def probe(x):
    return np.float32(x)

  def slow_write(x):
    time.sleep(0.001)
    log.add("w")
    return np.float32(x)

  def f(x):
    def body(i, x):
      p = jax.pure_callback(probe, SCALAR, x)
      a = io_callback(slow_write, SCALAR, x + p)
      b = io_callback(log.read, SCALAR, x)
      return a + b

    return lax.fori_loop(0, iterations, body, x)

  return f


def inverted_iterations(log: Log) -> int:
  """Iterations whose read ran before their write (program order is the
  write first), as the callbacks logged them."""
  tags = log.tags()
  return sum(tags[k : k + 2] == ["r", "w"] for k in range(0, len(tags), 2))


def compiled_text(f, x) -> str:
  return text_of(jax.jit(f).lower(x).compile())


def text_of(compiled) -> str:
  text = compiled.as_text()
  assert text is not None
  return text


@absltest.skipIf(
  test_util.jax_version() < COUNTER_FROM,
  "this jax's XLA does not name the execution op by its scope",
)
class ExecutionCounterTest(absltest.TestCase):
  def test_a_pure_callback_first_in_the_loop_leaves_every_call_placed(self):
    log = Log()
    f = pure_first_loop(log, 15)
    x = jnp.float32(1.0)
    with testing.sanitize() as seen:
      jax.block_until_ready(jax.jit(f)(x))
      text = compiled_text(f, x)
    report = seen.report(file=io.StringIO())
    # The module ran once: every loop call is placed in that execution and
    # compared, and each iteration whose read the callbacks saw run before
    # its write is reported, and no other.
    self.assertLen(log.entries, 30)
    self.assertEqual(seen.unknown_runs, 0, report)
    self.assertNotIn("not checked", report)
    out_of_order = [r for r in seen.races if r.kind == checks.OUT_OF_ORDER]
    self.assertLen(out_of_order, inverted_iterations(log), report)
    self.assertLen(seen.races, len(out_of_order), report)
    for race in out_of_order:
      self.assertEqual(
        (race.first.function, race.second.function),
        (
          "pure_first_loop.<locals>.slow_write",
          "Log.read",
        ),
      )
    # What placed them: each callback took its execution's id from the
    # sanitizer's execution op, which is in the module XLA compiled (and no
    # counter callback was needed).
    # (The loop's iteration marker and its test carry the scope too.)
    counters = [
      line
      for line in text.splitlines()
      if SANITIZER_COUNTER_SCOPE in line
      and "custom-call(" in line
      and SANITIZER_ITERATION_TARGET not in line
    ]
    self.assertLen(counters, 1, text)
    self.assertIn(
      f'custom_call_target="{SANITIZER_EXECUTION_TARGET}"', counters[0]
    )

  def test_races_of_a_module_are_the_same_before_inside_and_after(self):
    x = jnp.float32(1.0)
    for ordered, pairs in ((True, 0), (False, 1)):
      # ordered: a correct module (no pair); the control, unordered, has
      # its one pair, so races() does see these callbacks.
      f = loop_of_two(Log(), ordered)
      before = testing.races(jax.jit(f).lower(x))
      held = jax.jit(f).lower(x)
      held_text = held.as_text()
      with testing.sanitize():
        jax.block_until_ready(jax.jit(f)(x))
        inside = testing.races(jax.jit(f).lower(x))
        held_races = testing.races(held)
        text = compiled_text(f, x)
      after = testing.races(jax.jit(f).lower(x))
      self.assertLen(before, pairs)
      self.assertEqual(list(inside), list(before))
      self.assertEqual(list(held_races), list(before))
      self.assertEqual(list(after), list(before))
      # A Lowered compiled in the block is the user's program still: its
      # module was not edited, and its races after the block are the same.
      self.assertEqual(held.as_text(), held_text)
      self.assertEqual(list(testing.races(held)), list(before))
      # Not even selected by its target's name, which it shares.
      with testing.sanitize():
        by_target = testing.races(
          jax.jit(f).lower(x), among=["xla_ffi_python_cpu_callback"]
        )
      self.assertEqual(list(by_target), list(before))
      # The control: the module compiled in the block carried the counter,
      # which the static check left out.
      self.assertIn(SANITIZER_COUNTER_SCOPE, text)

  def test_nothing_of_the_sanitizer_outlives_its_block(self):
    compiler = jax_hooks.compiler_module()
    original = getattr(compiler, jax_hooks.COMPILE)
    x = jnp.float32(1.0)
    f = loop_of_two(Log(), False)
    g = jax.jit(f)
    with testing.sanitize():
      self.assertIsNot(getattr(compiler, jax_hooks.COMPILE), original)
      jax.block_until_ready(g(x))
      inside = text_of(g.lower(x).compile())
    self.assertIs(getattr(compiler, jax_hooks.COMPILE), original)
    # The control: in the block, the module carried the counter.
    self.assertIn(SANITIZER_COUNTER_SCOPE, inside)
    # After it, the same jitted function, run and compiled again, and a
    # new one, carry nothing of the sanitizer.
    jax.block_until_ready(g(x))
    for text in (text_of(g.lower(x).compile()), compiled_text(f, x)):
      self.assertNotIn(SANITIZER_COUNTER_SCOPE, text)
      self.assertNotIn("entangle_jax_sanitize_site", text)


if __name__ == "__main__":
  absltest.main()
