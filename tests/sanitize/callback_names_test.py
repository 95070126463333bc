"""The sanitizer names every common style of host callback in its
records and reports: by the function's qualified name, a lambda with its
file:line, a callable object by its class, ``jax.debug.print`` by its
format string; and a vmapped ``io_callback`` has its user's file:line.
The control: each callback logs itself, with the time, as it runs; each
record is matched to the callback that ran inside it."""

import contextlib
import functools
import io
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.experimental import io_callback

from entangle_jax import testing

SCALAR = jax.ShapeDtypeStruct((), jnp.float32)
log: list[tuple[str, int]] = []


def note(tag: str) -> None:
  log.append((tag, time.monotonic_ns()))


def named(x):
  note("named")
  return np.float32(x)


def tagged(tag, x):
  note(tag)
  return np.float32(x)


def pure(x):
  note("pure")
  return np.float32(x)


def batched(x):
  note("vmapped")
  return np.float32(x)


class Callable:
  def __call__(self, x):
    note("object")
    return np.float32(x)


class Holder:
  def method(self, x):
    note("method")
    return np.float32(x)


class Printed(io.StringIO):
  """Standard output while the program runs: ``jax.debug.print``'s text
  is logged as it is written, inside its callback."""

  def write(self, text):
    if text.strip():
      note("print")
    return super().write(text)


def program(x):
  a = io_callback(named, SCALAR, x)
  b = io_callback(lambda v: tagged("lambda", v), SCALAR, a)  # LAMBDA LINE
  c = io_callback(Callable(), SCALAR, b)
  d = io_callback(Holder().method, SCALAR, c)
  e = io_callback(functools.partial(tagged, "partial"), SCALAR, d)
  f = jax.pure_callback(pure, SCALAR, e)
  jax.debug.print("f is {}", f)
  jax.debug.callback(lambda v: note("debug lambda"), f)  # DEBUG LAMBDA LINE

  def each(y):
    return io_callback(batched, SCALAR, y)  # VMAP LINE

  return jax.vmap(each)(jnp.ones(3) * f).sum()


def line_of(marker: str) -> int:
  with open(__file__) as source:
    return next(n for n, text in enumerate(source, 1) if f"# {marker}" in text)


class CallbackNamesTest(absltest.TestCase):
  def test_each_style_is_named_at_the_call_it_made(self):
    log.clear()
    with testing.sanitize() as seen, contextlib.redirect_stdout(Printed()):
      jax.block_until_ready(jax.jit(program)(jnp.float32(1.0)))
    lambda_at = f"{__file__}:{line_of('LAMBDA LINE')}"
    debug_at = f"{__file__}:{line_of('DEBUG LAMBDA LINE')}"
    expected = {
      "named": "named",
      "lambda": f"program.<locals>.<lambda> ({lambda_at})",
      "object": "Callable",
      "method": "Holder.method",
      "partial": "tagged",
      "pure": "pure",
      "print": "jax.debug.print('f is {}')",
      "debug lambda": f"program.<locals>.<lambda> ({debug_at})",
      "vmapped": "batched",
    }
    self.assertLen(seen.calls, 11)
    self.assertCountEqual(
      [tag for tag, _ in log], [*expected, "vmapped", "vmapped"]
    )
    # Each record holds the time its callback logged itself at: that is
    # the callback it records, and the name must be that callback's.
    named_as = {}
    for call in seen.calls:
      inside = [tag for tag, t in log if call.start_ns <= t <= call.end_ns]
      self.assertLen(inside, 1, call)
      self.assertEqual(call.function, expected[inside[0]], inside[0])
      assert call.site is not None
      named_as.setdefault(inside[0], set()).add(call.site.source)
    # Every call has its user's file:line, the vmapped one included
    # (its custom call's location names none: it is the vmap's).
    self.assertEqual(
      named_as["vmapped"], {f"{__file__}:{line_of('VMAP LINE')}"}
    )
    self.assertEqual(named_as["lambda"], {lambda_at})
    self.assertEqual(named_as["debug lambda"], {debug_at})
    for tag, sources in named_as.items():
      self.assertTrue(all(s.startswith(f"{__file__}:") for s in sources), tag)


if __name__ == "__main__":
  absltest.main()
