"""The programs, targets and checks the in_program_order tests share
(program_order_*_test.py; a helper module, not a test: Bazel's py_test
of one test file cannot import another test file)."""

import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

import entangle_jax
from entangle_jax import in_program_order, testing
from entangle_jax._src import native
from entangle_jax.testing import example_store
from tests import test_util

ENTANGLE = "entangle_jax_entangle"
UNDECLARED_WRITE = "program_order_test_write"
UNDECLARED_READ = "program_order_test_read"
HANDLE_WRITE = "program_order_test_handle_write"
HANDLE_READ = "program_order_test_handle_read"
native.register_handlers(
  example_store._native,
  {"write_slot": UNDECLARED_WRITE, "read_slot": UNDECLARED_READ},
  ["cpu"],
)
native.register_handlers(
  example_store._native,
  {"write_slot": HANDLE_WRITE, "read_slot": HANDLE_READ},
  ["cpu"],
)
# Handles: the elements of one array of them are distinct objects.
entangle_jax.declare_target(
  HANDLE_WRITE,
  mode="write",
  object=0,
  returns_object=[0],
  distinct_elements=True,
)
entangle_jax.declare_target(
  HANDLE_READ, mode="read", object=0, distinct_elements=True
)

# Objects each device owns: elements of a slot array split over the
# devices, declared distinct ("split"); or targets declared per device
# ("own").
DEVICE_OPTIONS = ("split", "own")
for _suffix in DEVICE_OPTIONS:
  _write, _read = (
    f"{UNDECLARED_WRITE}_{_suffix}",
    f"{UNDECLARED_READ}_{_suffix}",
  )
  native.register_handlers(
    example_store._native, {"write_slot": _write, "read_slot": _read}, ["cpu"]
  )
  _distinct = True if _suffix == "split" else None
  _devices = "per-device" if _suffix == "own" else "shared"
  entangle_jax.declare_target(
    _write,
    mode="write",
    object=0,
    returns_object=[0],
    distinct_elements=_distinct,
    devices=_devices,
  )
  entangle_jax.declare_target(
    _read,
    mode="read",
    object=0,
    distinct_elements=_distinct,
    devices=_devices,
  )


def calls_of(suffix):
  """The write and read of the targets declared for `suffix` (one of
  `DEVICE_OPTIONS`), on one-element slot arrays."""
  write = jax.ffi.ffi_call(
    f"{UNDECLARED_WRITE}_{suffix}",
    jax.ShapeDtypeStruct((1,), jnp.int32),
    has_side_effect=True,
  )
  read = jax.ffi.ffi_call(
    f"{UNDECLARED_READ}_{suffix}", jax.ShapeDtypeStruct((1,), jnp.float32)
  )
  return write, read


def hazard_body(write, read, s):
  """Write 1, read, write 2 on slots `s`."""
  token = write(s, jnp.ones(s.shape))
  x = read(token)
  write(token, jnp.full(s.shape, 2.0))
  return x


def compiled(f, *args):
  return jax.jit(f).lower(*args).compile()


def entangles(c) -> int:
  return test_util.custom_calls(testing.module_text(c), ENTANGLE)


def writes(c) -> int:
  return test_util.custom_calls(testing.module_text(c), test_util.WRITE)


def reads(c) -> int:
  return test_util.custom_calls(testing.module_text(c), test_util.READ)


def write_read_write(slot):
  token = testing.write_slot(slot, 1.0)
  x = testing.read_slot(token)
  testing.write_slot(token, 2.0)
  return x


def twelve_hazards(big):
  reads = []
  for i in range(12):
    token = testing.write_slot(i, 1.0)
    reads.append(testing.read_slot(token, delay_us=1000))
    testing.write_slot(i, 2.0)
  return jnp.stack(reads), jnp.sin(big).sum()


def undeclared_calls(shape=()):
  """The store's write and read through targets nothing declares (its
  handlers under other names): every call may touch anything."""
  write = jax.ffi.ffi_call(
    UNDECLARED_WRITE,
    jax.ShapeDtypeStruct(shape, jnp.int32),
    has_side_effect=True,
  )
  read = jax.ffi.ffi_call(
    UNDECLARED_READ, jax.ShapeDtypeStruct(shape, jnp.float32)
  )
  return write, read


def undeclared_hazards(big):
  write, read = undeclared_calls()
  reads = []
  for i in range(12):
    token = write(jnp.int32(i), jnp.float32(1.0))
    reads.append(read(token, delay_us=np.int64(1000)))
    write(jnp.int32(i), jnp.float32(2.0))
  return jnp.stack(reads), jnp.sin(big).sum()


def wrong_reads(f, runs=5):
  big = jnp.ones(1 << 16)
  run = jax.jit(f)
  return [int(np.sum(np.asarray(run(big)[0]) != 1.0)) for _ in range(runs)]


REVERSE_SLOT = 30
COUNT_SLOT = 31


def scaled_by(k, backward):
  """``x * k``, a custom_vjp whose backward pass is ``backward(ct)``."""

  @jax.custom_vjp
  def scaled(x):
    return x * k

  scaled.defvjp(lambda x: (x * k, None), lambda _, ct: (backward(ct),))
  return scaled


# The backward pass writes ten times its cotangent.
doubled = scaled_by(
  2,
  lambda ct: (
    testing.write_slot(REVERSE_SLOT, ct * 10, delay_us=1000) * 0 + ct * 2
  ),
)
# The backward pass scales its cotangent by what the slot holds.
tripled = scaled_by(
  3, lambda ct: ct * testing.read_slot(jnp.int32(REVERSE_SLOT), delay_us=1000)
)


def backward_read_and_write(x):
  """Under grad, in program order: the forward writes of 1 and 5, then
  `tripled`'s backward read (of 5: the gradient is 10), then `doubled`'s
  backward write (of 50)."""
  testing.write_slot(REVERSE_SLOT, 1.0)
  y = tripled(doubled(x))
  testing.write_slot(REVERSE_SLOT, 5.0, delay_us=2000)
  return y


REVERSE_PASS = (10.0, 50.0, ["write", "write", "read", "write"])


def _count(ct):
  """Adds 1 to the slot, a read and a write: each backward pass counts."""
  seen = testing.read_slot(jnp.int32(COUNT_SLOT), delay_us=500)
  token = testing.write_slot(COUNT_SLOT, seen + 1.0, delay_us=500)
  return ct * 2 + token * 0


counted = scaled_by(2, _count)


def counted_after(inner):
  """`inner`'s backward passes count after the later forward write of 10."""

  def loss(x):
    testing.write_slot(COUNT_SLOT, 0.0)
    y = inner(x)
    testing.write_slot(COUNT_SLOT, 10.0, delay_us=2000)
    return y

  return loss


def ran(c, slot, *args):
  """``c(*args)`` of compiled `c`, the slot after it, and the kinds of the
  calls on the slot, in the order they ran (None when two overlapped)."""
  testing.reset_slots()
  value = np.asarray(c(*args)).tolist()
  log = [r for r in testing.call_log() if r.slots == (slot,)]
  apart = all(a.end < b.start for a, b in itertools.pairwise(log))
  slots = float(testing.slot_values()[slot])
  return value, slots, [r.kind for r in log] if apart else None


class OrderTestCase(absltest.TestCase):
  """A test case with the transform's two checks."""

  def grad_inside(self, loss, *args):
    """``jax.grad(in_program_order(loss))`` compiled, warning nothing."""
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      return compiled(jax.grad(in_program_order(loss)), *args)

  def assert_fixed(self, f, *args):
    """`f` races; in_program_order(f) does not. Returns its compiled form."""
    self.assertNotEmpty(testing.races(compiled(f, *args)))
    fixed = compiled(in_program_order(f), *args)
    self.assertEqual(testing.races(fixed), [])
    return fixed
