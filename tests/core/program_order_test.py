"""`in_program_order`: native calls ordered as the program made them.

Every ordering test has its control: the same program without the
transform races (``testing.races`` of its compiled module is not empty),
with it races nowhere.
"""

import functools
import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax import export

import entangle_jax
from entangle_jax import in_program_order, testing
from entangle_jax._src import native
from entangle_jax.demo import _hazard
from entangle_jax.testing import example_store
from tests import test_util

try:  # The benchmark's count of entangle calls a step, tested here.
  from benchmarks.parts.program_order_time import loop_entangles
except (
  ModuleNotFoundError
) as missing:  # A copy of tests/ away from the checkout.
  if missing.name != "benchmarks":
    raise
  loop_entangles = None

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


class ProgramOrderTest(absltest.TestCase):
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

  def test_write_read_write_takes_one_entangle(self):
    fixed = self.assert_fixed(write_read_write, jnp.int32(0))
    self.assertEqual(entangles(fixed), 1)
    self.assertEqual(jax.jit(in_program_order(write_read_write))(0), 1.0)

  def test_twelve_hazards_take_twelve_entangles_and_read_right(self):
    big = jnp.ones(1 << 16)
    self.assertLen(testing.races(compiled(twelve_hazards, big)), 24)
    fixed = self.assert_fixed(twelve_hazards, big)
    self.assertEqual(entangles(fixed), 12)
    self.assertEqual(wrong_reads(in_program_order(twelve_hazards)), [0] * 5)
    if not any(wrong_reads(twelve_hazards)):
      self.skipTest("this XLA happened to run every read first, unordered")

  def test_demo_hazard_keeps_its_scopes_and_reads_right(self):
    # The named scopes survive the transform: the race check selects by them.
    hazard = _hazard.program(_hazard.Ordering.NONE)
    self.assertFalse(_hazard.orders_read_first(_hazard.compile_hazard(hazard)))
    fixed = _hazard.compile_hazard(in_program_order(hazard))
    self.assertTrue(_hazard.orders_read_first(fixed))
    self.assertEqual(testing.races(fixed), [])
    self.assertEqual(entangles(fixed), 1)
    self.assertIsNone(_hazard.runs_until_wrong_of(fixed, 100))

  def test_race_report_names_the_users_line(self):
    def f(slot, other):
      token = testing.write_slot(slot, 1.0)
      testing.write_slot(other, 2.0)  # The line the report names.
      return token

    self.assertLen(testing.races(compiled(f, jnp.int32(0), jnp.int32(1))), 1)
    fixed = compiled(in_program_order(f), jnp.int32(0), jnp.int32(1))
    text = testing.module_text(fixed)
    # The calls (and the entangle) carry the user's stack, not the
    # interpreter's: what it binds is bound in the traced equation's context.
    # (Up to jax 0.8.1 HLO records only the innermost frame.)
    if test_util.records_full_stack():
      self.assertIn("test_race_report_names_the_users_line.<locals>.f", text)
      self.assertNotIn("_Context", text)
    else:
      self.assertNotIn("_src/program_order.py", text)

  def test_undeclared_binding(self):
    big = jnp.ones(1 << 16)
    self.assert_fixed(undeclared_hazards, big)
    self.assertEqual(wrong_reads(in_program_order(undeclared_hazards)), [0] * 5)

  def test_distinct_elements_of_a_handle_array(self):
    write = jax.ffi.ffi_call(
      HANDLE_WRITE, jax.ShapeDtypeStruct((), jnp.int32), has_side_effect=True
    )
    read = jax.ffi.ffi_call(HANDLE_READ, jax.ShapeDtypeStruct((), jnp.float32))

    def f(handles, big):
      reads = []
      for i in range(4):
        h = write(handles[i], jnp.float32(1.0))
        reads.append(read(h, delay_us=np.int64(1000)))
        write(h, jnp.float32(2.0))
      return jnp.stack(reads), jnp.sin(big).sum()

    args = (jnp.arange(20, 24, dtype=jnp.int32), jnp.ones(1 << 16))
    fixed = self.assert_fixed(f, *args)
    # One per hazard: handles[i] and handles[j] are different objects.
    self.assertEqual(entangles(fixed), 4)
    np.testing.assert_array_equal(
      jax.jit(in_program_order(f))(*args)[0], [1.0] * 4
    )

  def test_resource_records_are_read_as_the_race_check_reads_them(self):
    # Calls made through two named Resources are on two objects, and a
    # Resource's read only reads, whatever the (undeclared) target: no
    # edge between them; the plain write after them takes one.
    write, read = undeclared_calls()

    def f(handles):
      a = entangle_jax.Resource(handles[0], name="a")
      b = entangle_jax.Resource(handles[1], name="b")
      a.write(write, jnp.float32(1.0))
      b.write(write, jnp.float32(1.0))
      x, y = a.read(read), b.read(read)
      z = b.read(read)
      write(handles[0], jnp.float32(2.0))  # Nothing orders it after reads.
      return x, y, z

    handles = jnp.array([30, 31], jnp.int32)
    fixed = self.assert_fixed(f, handles)
    self.assertEqual(entangles(fixed), 1)
    self.assertEqual(jax.jit(in_program_order(f))(handles), (1.0, 1.0, 1.0))

  def test_traced_slots_may_be_one(self):
    def f(a, b):
      token = testing.write_slot(a, 1.0)
      x = testing.read_slot(token)
      testing.write_slot(b, 2.0)
      return x

    self.assert_fixed(f, jnp.int32(0), jnp.int32(1))
    self.assertEqual(jax.jit(in_program_order(f))(3, 3), 1.0)

  def test_distinct_constants_need_no_edge(self):
    def f(big):
      testing.write_slot(1, 1.0)
      return testing.read_slot(2), jnp.sin(big).sum()

    c = compiled(in_program_order(f), jnp.ones(4))
    self.assertEqual(entangles(c), 0)
    self.assertEqual(testing.races(c), [])

  def test_scan(self):
    def f(x):
      def body(c, _):
        r = testing.read_slot(2)
        testing.write_slot(2, r + 1.0)
        return c, r

      testing.write_slot(2, 0.0)
      return jax.lax.scan(body, x, None, length=4)[1]

    # The order value in the carry is the write's result: one entangle
    # (the read after the last write, before or in the loop) per step.
    self.assertEqual(entangles(self.assert_fixed(f, jnp.int32(0))), 1)
    np.testing.assert_array_equal(
      jax.jit(in_program_order(f))(0), [0.0, 1.0, 2.0, 3.0]
    )

  def test_a_scan_step_takes_as_many_entangles_as_with_resource(self):
    if loop_entangles is None:
      self.skipTest("no benchmarks/ package: tests/ runs from a copy")

    # The benchmark's scan program: each step a hazard, the second write's
    # token the next step's slot. Written with Resource, and unordered under
    # in_program_order: as many entangle calls in the loop body (one per
    # step), and none outside it. With two reads between the writes too.
    def scan_of(hazard):
      def program(slot):
        def step(token, _):
          x, token = hazard(token)
          return token, x

        return jax.lax.scan(step, slot, None, length=50)

      return program

    def unordered(reads):
      def hazard(token):
        token = testing.write_slot(token, 1.0)
        x = sum(testing.read_slot(token) for _ in range(reads))
        return x, testing.write_slot(token, 2.0)

      return hazard

    def with_resource(reads):
      def hazard(token):
        res = entangle_jax.Resource(token)
        res.write(testing.write_slot, 1.0)
        x = sum(res.read(testing.read_slot) for _ in range(reads))
        res.write(testing.write_slot, 2.0)
        return x, res.token

      return hazard

    slot = jnp.int32(22)
    for reads in (1, 2):
      racy = compiled(scan_of(unordered(reads)), slot)
      # The control: unordered, it races, and the loop body has none.
      self.assertNotEmpty(testing.races(racy))
      self.assertEqual(loop_entangles(racy), 0)
      resource = compiled(scan_of(with_resource(reads)), slot)
      fixed = compiled(in_program_order(scan_of(unordered(reads))), slot)
      self.assertEqual(testing.races(resource), [])
      self.assertEqual(testing.races(fixed), [])
      self.assertEqual(loop_entangles(resource), 1)
      self.assertEqual(loop_entangles(fixed), loop_entangles(resource))
      self.assertEqual(entangles(fixed), entangles(resource))
      run = jax.jit(in_program_order(scan_of(unordered(reads))))
      np.testing.assert_array_equal(run(slot)[1], [float(reads)] * 50)

  def test_scan_carrying_the_token_needs_no_order_value(self):
    def f(slot):
      def body(token, _):
        r = testing.read_slot(token)
        token = testing.write_slot(token, 5.0)  # after the read: 1 entangle
        return testing.write_slot(token, r + 1.0), r

      return jax.lax.scan(body, testing.write_slot(slot, 0.0), None, length=3)

    fixed = self.assert_fixed(f, jnp.int32(1))
    self.assertEqual(entangles(fixed), 1)  # As Resource needs per step.
    np.testing.assert_array_equal(
      jax.jit(in_program_order(f))(1)[1], [0.0, 1.0, 2.0]
    )

  def test_scan_over_slots(self):
    # The slots come in as xs: traced, so any two may be one.
    def f(slots):
      def body(c, slot):
        token = testing.write_slot(slot, 1.0)
        r = testing.read_slot(token, delay_us=100)
        testing.write_slot(16, 2.0)
        return c, r

      return jax.lax.scan(body, 0, slots)[1]

    slots = jnp.array([16, 16, 17], jnp.int32)
    self.assert_fixed(f, slots)
    np.testing.assert_array_equal(
      jax.jit(in_program_order(f))(slots), [1.0, 1.0, 1.0]
    )

  def test_custom_vjp_backward_write_inside_a_loop(self):
    @jax.custom_vjp
    def double(x):
      return x * 2

    def backward(_, ct):
      testing.write_slot(17, ct)
      return (ct * 2,)

    double.defvjp(lambda x: (x * 2, None), backward)

    def loss(x):
      testing.write_slot(17, 1.0)

      def body(c, _):
        return double(c) * testing.read_slot(17), None

      return jax.lax.scan(body, x, None, length=2)[0]

    plain = compiled(jax.grad(loss), 1.0)
    self.assertNotEmpty(testing.races(plain))
    for c in (
      self.grad_inside(loss, 1.0),
      compiled(in_program_order(jax.grad(loss)), 1.0),
    ):
      self.assertEqual(testing.races(c), [])
      self.assertEqual(writes(c), writes(plain))

  def test_while_loop(self):
    def f(x):
      testing.write_slot(3, 0.0)

      def body(c):
        r = testing.read_slot(3)
        testing.write_slot(3, r + 1.0)
        return c + 1

      n = jax.lax.while_loop(lambda c: c < 4, body, x)
      return testing.read_slot(3), n

    # One in the body, one for the read after the loop.
    self.assertEqual(entangles(self.assert_fixed(f, jnp.int32(0))), 2)
    self.assertEqual(jax.jit(in_program_order(f))(0)[0], 4.0)

  def test_while_loop_reading_in_its_condition(self):
    def f(x):
      testing.write_slot(18, 0.0)

      def body(c):
        testing.write_slot(18, c.astype(jnp.float32) + 1.0)
        return c + 1

      n = jax.lax.while_loop(lambda c: testing.read_slot(18) < 3.0, body, x)
      testing.write_slot(18, 9.0)
      return n

    self.assert_fixed(f, jnp.int32(0))
    self.assertEqual(jax.jit(in_program_order(f))(0), 3)

  def test_cond(self):
    def f(p):
      testing.write_slot(4, 1.0)
      x = jax.lax.cond(p, lambda: testing.read_slot(4), lambda: 7.0)
      testing.write_slot(4, 2.0)
      return x

    # As by hand: the read after the write, the write after the cond.
    self.assertEqual(entangles(self.assert_fixed(f, True)), 2)
    self.assertEqual(jax.jit(in_program_order(f))(True), 1.0)

  def test_nested_jit_and_checkpoint(self):
    def f(slot):
      token = testing.write_slot(slot, 1.0)
      x = jax.jit(testing.read_slot)(token)
      testing.write_slot(token, 2.0)
      return jax.checkpoint(lambda x: x * testing.read_slot(slot))(x)

    self.assertEqual(entangles(self.assert_fixed(f, jnp.int32(5))), 2)
    self.assertEqual(jax.jit(in_program_order(f))(5), 2.0)

  def test_nested_jit_keeps_its_shardings(self):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = NamedSharding(mesh, P("x"))

    @functools.partial(jax.jit, out_shardings=rows)
    def inner(slots):
      return testing.read_slot(slots)  # (XLA rejects a sharded write.)

    def f(slots):
      return inner(slots) * 2

    # Inlined, the nested jit keeps its output sharding as a constraint.
    slots = jnp.array([40, 41], jnp.int32)
    text = jax.jit(in_program_order(f)).lower(slots).as_text()
    # (sdy.sharding_constraint, or GSPMD's @Sharding custom call.)
    self.assertRegex(text, "sharding_constraint|@Sharding")
    testing.write_slot(slots, jnp.ones(2))
    out = jax.jit(in_program_order(f))(slots)
    np.testing.assert_array_equal(out, [2.0, 2.0])
    self.assertTrue(out.sharding.is_equivalent_to(rows, 1))
    self.assertEqual(testing.races(compiled(in_program_order(f), slots)), [])

  def test_vmap_outside_and_inside(self):
    slots = jnp.arange(3, dtype=jnp.int32)
    for f in (
      jax.vmap(in_program_order(write_read_write)),
      in_program_order(jax.vmap(write_read_write)),
    ):
      c = compiled(f, slots)
      self.assertEqual(testing.races(c), [])
      self.assertEqual(entangles(c), 1)
      np.testing.assert_array_equal(jax.jit(f)(slots), [1.0] * 3)

  def test_grad_of_custom_vjp_writing_in_backward(self):
    @jax.custom_vjp
    def double(x):
      return x * 2

    def backward(_, ct):
      testing.write_slot(6, ct)  # A native write in the backward pass.
      return (ct * 2,)

    double.defvjp(lambda x: (x * 2, x), backward)

    def loss(x):
      testing.write_slot(6, 1.0)
      return double(x) * testing.read_slot(6)

    plain = compiled(jax.grad(loss), 1.0)
    self.assertNotEmpty(testing.races(plain))
    for c in (
      self.grad_inside(loss, 1.0),
      compiled(in_program_order(jax.grad(loss)), 1.0),
    ):
      self.assertEqual(testing.races(c), [])
      self.assertEqual(writes(c), writes(plain))
      self.assertEqual(c(1.0), 2.0)

  def test_backward_passes_run_in_reverse_program_order(self):
    plain = jax.grad(backward_read_and_write)
    racy = compiled(plain, 1.0)
    self.assertNotEmpty(testing.races(racy))
    for f in (
      jax.grad(in_program_order(backward_read_and_write)),
      in_program_order(plain),
    ):
      with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed = compiled(f, 1.0)
      self.assertEqual(testing.races(fixed), [])
      self.assertEqual(writes(fixed), writes(racy))
      self.assertEqual(reads(fixed), reads(racy))
      for _ in range(3):
        self.assertEqual(ran(fixed, REVERSE_SLOT, 1.0), REVERSE_PASS)
    if ran(racy, REVERSE_SLOT, 1.0) == REVERSE_PASS:
      self.skipTest("this XLA happened to run the calls in order, unordered")

  def test_backward_passes_in_scan_cond_and_checkpoint(self):
    # Each backward pass adds 1 after the later forward write of 10.
    cases = {
      "scan": (
        lambda x: jax.lax.scan(
          lambda c, _: (counted(c), None), x, None, length=4
        )[0],
        4,
      ),
      "cond": (
        lambda x: counted(
          jax.lax.cond(x > 0, lambda v: counted(counted(v)), lambda v: v * 4, x)
        ),
        3,
      ),
      "checkpoint": (
        lambda x: counted(jax.checkpoint(lambda v: counted(counted(v)))(x)),
        3,
      ),
    }
    wrong = 0
    for name, (inner, n) in cases.items():
      with self.subTest(name):
        loss = counted_after(inner)
        racy = compiled(jax.grad(loss), 1.0)
        self.assertNotEmpty(testing.races(racy))
        fixed = self.grad_inside(loss, 1.0)
        self.assertEqual(testing.races(fixed), [])
        self.assertEqual(writes(fixed), writes(racy))
        value, count, _ = ran(fixed, COUNT_SLOT, 1.0)
        self.assertEqual((value, count), (2.0**n, 10.0 + n))
        wrong += ran(racy, COUNT_SLOT, 1.0)[1] != 10.0 + n
    if not wrong:
      self.skipTest("this XLA happened to count after the write, unordered")

  def test_backward_passes_under_vmap(self):
    xs = jnp.ones(3)

    def summed(f):
      return lambda x: jax.vmap(f)(x).sum()

    racy = compiled(jax.grad(summed(backward_read_and_write)), xs)
    self.assertNotEmpty(testing.races(racy))
    for f in (
      jax.vmap(jax.grad(in_program_order(backward_read_and_write))),
      jax.grad(in_program_order(summed(backward_read_and_write))),
      jax.grad(summed(in_program_order(backward_read_and_write))),
    ):
      fixed = compiled(f, xs)
      self.assertEqual(testing.races(fixed), [])
      value, slot, _ = ran(fixed, REVERSE_SLOT, xs)
      self.assertEqual((value, slot), ([10.0] * 3, 50.0))

  def test_custom_rules_with_native_calls(self):
    def loss(x):
      testing.write_slot(7, 1.0)

      @jax.custom_vjp
      def write_then_double(x):
        testing.write_slot(7, 5.0)
        return x * 2

      write_then_double.defvjp(
        lambda x: (write_then_double(x), x),
        lambda _, c: (testing.write_slot(7, c) * 0 + c * 2,),
      )

      @jax.custom_jvp
      def scale(x):
        return x * testing.read_slot(7)

      scale.defjvp(lambda p, t: (scale(p[0]), t[0] * testing.read_slot(7)))
      return scale(write_then_double(x)) * testing.read_slot(7)

    for f in (loss, jax.grad(loss)):
      plain = compiled(f, 1.0)
      self.assertNotEmpty(testing.races(plain))
      fixed = [compiled(in_program_order(f), 1.0)]
      if f is not loss:
        fixed.append(self.grad_inside(loss, 1.0))
      for c in fixed:
        self.assertEqual(testing.races(c), [])
        self.assertEqual(writes(c), writes(plain))

  def test_custom_vjp_with_static_and_integer_arguments(self):
    @functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
    def scaled(x, n):
      return x * n

    def backward(n, _, ct):
      testing.write_slot(19, ct)
      return (ct * n,)

    scaled.defvjp(lambda x, n: (x * n, None), backward)

    @jax.custom_vjp
    def times(x, i):
      return x * i

    times.defvjp(
      lambda x, i: (x * i, i),
      lambda i, ct: (testing.write_slot(19, ct) * 0 + ct * i, None),
    )

    def loss(x):
      testing.write_slot(19, 1.0)
      y = scaled(x, 3) + times(x, jnp.int32(2))
      return y * testing.read_slot(19)

    # Without the transform, the two backward writes of slot 19 race.
    self.assertNotEmpty(testing.races(compiled(jax.grad(loss), 1.0)))
    for f in (
      in_program_order(jax.grad(loss)),
      jax.grad(in_program_order(loss)),
    ):
      self.assertEqual(testing.races(compiled(f, 1.0)), [])
      self.assertEqual(jax.jit(f)(1.0), 5.0)

  def test_second_order(self):
    def loss(x):
      testing.write_slot(21, 1.0)
      return jnp.sin(x) * testing.read_slot(21)

    second = jax.grad(jax.grad(in_program_order(loss)))
    hessian = jax.jit(second)(1.0)
    np.testing.assert_allclose(hessian, -np.sin(1.0), rtol=1e-6)
    self.assertNotEmpty(testing.races(compiled(jax.grad(jax.grad(loss)), 1.0)))
    self.assertEqual(testing.races(compiled(second, 1.0)), [])

  def test_native_call_only_in_a_jvp_rule(self):
    # The primal makes no native call; its JVP rule does, which grad
    # outside the transform runs: the rule is transformed too.
    @jax.custom_jvp
    def scale(x):
      return x * 3

    scale.defjvp(
      lambda p, t: (scale(p[0]), t[0] * testing.read_slot(8) + p[0] * 0)
    )

    def loss(x):
      testing.write_slot(8, 1.0)
      y = scale(x)
      testing.write_slot(8, 2.0)
      return y

    plain = compiled(jax.grad(loss), 1.0)
    self.assertNotEmpty(testing.races(plain))
    c = compiled(jax.grad(in_program_order(loss)), 1.0)
    self.assertEqual(testing.races(c), [])
    self.assertEqual(jax.jit(jax.grad(in_program_order(loss)))(1.0), 1.0)
    # Custom rules without native calls are kept as they are.
    relu = compiled(
      in_program_order(lambda x: jax.nn.relu(x).sum()), x := jnp.ones(3)
    )
    self.assertEqual(entangles(relu), 0)
    del x

  def test_export_round_trip(self):
    f = jax.jit(in_program_order(write_read_write))
    checks = [
      *entangle_jax.export_safety_checks(),
      export.DisabledSafetyCheck.custom_call(test_util.WRITE),
      export.DisabledSafetyCheck.custom_call(test_util.READ),
    ]
    exported = export.export(f, disabled_checks=checks)(
      jax.ShapeDtypeStruct((), jnp.int32)
    )
    restored = export.deserialize(exported.serialize())
    self.assertEqual(restored.mlir_module().count(f"@{ENTANGLE}("), 1)
    self.assertEqual(restored.call(jnp.int32(8)), 1.0)
    self.assertEqual(testing.races(compiled(restored.call, jnp.int32(8))), [])

  def test_eager_and_disable_jit(self):
    f = in_program_order(write_read_write)
    self.assertEqual(f(jnp.int32(9)), 1.0)
    with jax.disable_jit():
      self.assertEqual(f(jnp.int32(9)), 1.0)

  def test_pytrees_and_static_leaves(self):
    def f(tree, repeat, name):
      token = tree["slot"]
      for _ in range(repeat):  # A static Python int, as jit passes it.
        token = testing.write_slot(token, tree["value"])
      return {"read": testing.read_slot(token), "name": name}

    tree = {"slot": jnp.int32(10), "value": jnp.float32(2.0)}
    fn = jax.jit(
      lambda t, r: in_program_order(f)(t, r, "label")["read"], static_argnums=1
    )
    self.assertEqual(fn(tree, 3), 2.0)
    self.assertEqual(testing.races(fn.lower(tree, 3).compile()), [])
    eager = in_program_order(f)(tree, 2, "label")  # Non-arrays out as they are.
    self.assertEqual((eager["read"], eager["name"]), (2.0, "label"))

  def test_an_array_jax_cannot_trace_is_named(self):
    f = in_program_order(lambda x, y: x)
    with self.assertRaisesRegex(TypeError, r"argument args\[1\]\['s'\]"):
      f(1.0, {"s": np.array(["a"])})
    with jax.disable_jit(), self.assertRaisesRegex(TypeError, "args"):
      f(1.0, {"s": np.array(["a"])})

  def test_not_callable(self):
    with self.assertRaisesRegex(TypeError, "callable"):
      in_program_order(3)  # ty: ignore[no-matching-overload]

  def test_shard_map(self):
    # Undeclared targets are shared across devices by default, and nothing
    # in one module orders two devices' calls: in_program_order orders each
    # device's own calls, so the pairs left are all across devices (the
    # control: within one device, without the transform, it races).
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",))
    write, read = undeclared_calls((1,))

    def f(slots):
      def body(s):
        token = write(s, jnp.ones(s.shape))
        x = read(token)
        write(token, jnp.full(s.shape, 2.0))
        return x

      return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(
        slots
      )

    slots = jax.device_put(
      jnp.arange(11, 13, dtype=jnp.int32), NamedSharding(mesh, P("x"))
    )
    within = [
      r for r in testing.races(compiled(f, slots)) if not r.across_devices
    ]
    self.assertNotEmpty(within)
    # What it cannot order, it says, as the check does.
    with self.assertWarnsRegex(UserWarning, "may write inside a shard_map"):
      fixed = compiled(in_program_order(f), slots)
    left = testing.races(fixed)
    self.assertNotEmpty(left)
    self.assertTrue(all(r.across_devices for r in left), left)
    # The hand-written one, and one for the order value out of the body.
    self.assertEqual(entangles(fixed), 2)
    with self.assertWarnsRegex(UserWarning, "shard_map"):
      out = jax.jit(in_program_order(f))(slots)
    np.testing.assert_array_equal(out, [1, 1])

  def test_backward_passes_in_shard_map(self):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",))
    sharding = NamedSharding(mesh, P("x"))

    @jax.custom_vjp
    def counted_on(x, slot):
      return x * 2

    def count_on(slot, ct):
      seen = testing.read_slot(slot, delay_us=500)
      token = testing.write_slot(slot, seen + 1.0, delay_us=500)
      return (ct * 2 + token * 0, None)

    counted_on.defvjp(lambda x, slot: (x * 2, slot), count_on)

    def per_device(fn):
      return jax.shard_map(
        fn, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")
      )

    def loss(x, slots):
      # Each device's slot: 0, then 10; three backward passes count after.
      zero = jnp.zeros((1,))
      x = per_device(lambda v, s: v + testing.write_slot(s, zero) * 0)(x, slots)
      y = per_device(lambda v, s: counted_on(counted_on(v, s), s))(x, slots)
      y = per_device(lambda v, s: counted_on(v, s))(y, slots)
      ten = jnp.full((1,), 10.0)
      y = per_device(
        lambda v, s: v + testing.write_slot(s, ten, delay_us=2000) * 0
      )(y, slots)
      return y.sum()

    args = (
      jax.device_put(jnp.ones(2), sharding),
      jax.device_put(jnp.arange(40, 42, dtype=jnp.int32), sharding),
    )

    def within(c):  # Nothing in one module orders two devices' calls.
      return [r for r in testing.races(c) if not r.across_devices]

    self.assertNotEmpty(within(compiled(jax.grad(loss), *args)))
    # The store is one for every device and its slot arrays may repeat a
    # slot: the copies may race across devices, which it says.
    with self.assertWarnsRegex(UserWarning, "writes inside a shard_map"):
      fixed = compiled(jax.grad(in_program_order(loss)), *args)
    self.assertEqual(within(fixed), [])
    self.assertNotEmpty(testing.races(fixed))
    testing.reset_slots()
    np.testing.assert_array_equal(fixed(*args), [8.0, 8.0])
    np.testing.assert_array_equal(testing.slot_values()[40:42], [13.0] * 2)

  def test_shard_map_of_objects_each_device_owns_is_silent(self):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",))
    slots = jax.device_put(
      jnp.arange(11, 13, dtype=jnp.int32), NamedSharding(mesh, P("x"))
    )

    def hazard_on(write, read):
      return lambda slots: jax.shard_map(
        functools.partial(hazard_body, write, read),
        mesh=mesh,
        in_specs=P("x"),
        out_specs=P("x"),
      )(slots)

    def quiet(f):
      with warnings.catch_warnings():
        warnings.simplefilter("error")
        return compiled(in_program_order(f), slots)

    # Each device its own handles (the slot array split over the devices,
    # elements declared distinct), or targets declared per device.
    split_calls = calls_of("split")
    for suffix in DEVICE_OPTIONS:
      write, read = calls_of(suffix)
      f = hazard_on(write, read)
      self.assertNotEmpty(testing.races(compiled(f, slots)))  # The control.
      self.assertEqual(testing.races(quiet(f)), [], suffix)
    # Split over some of the devices only: the devices along the other
    # axis hold the same slots, so the copies may race, and it says so.
    square = jax.make_mesh((2, 2), ("x", "y"))
    four = jax.device_put(
      jnp.arange(11, 13, dtype=jnp.int32), NamedSharding(square, P("x"))
    )

    def on_square(write, read):
      def body(s):
        return read(write(s, jnp.ones(s.shape)))

      return lambda slots: jax.shard_map(
        body, mesh=square, in_specs=P("x"), out_specs=P("x")
      )(slots)

    split = on_square(*split_calls)
    with self.assertWarnsRegex(UserWarning, "shard_map"):
      c = compiled(in_program_order(split), four)
    self.assertTrue(any(r.across_devices for r in testing.races(c)))

    # A conditional inside the body: its calls are still on the device's
    # own slots.
    def in_cond(slots):
      def body(s):
        return jax.lax.cond(
          s[0] > 11,
          # (`+ v * 0`: the read's type varies over the devices, as v's.)
          lambda v: hazard_body(*split_calls, v) + v * 0,
          lambda v: v.astype(jnp.float32),
          s,
        )

      return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(
        slots
      )

    self.assertEqual(testing.races(quiet(in_cond)), [])

    # The control of the silence: the same program on a replicated slot
    # array may race across devices, and it says so.
    replicated = jax.device_put(slots, NamedSharding(mesh, P()))
    write, read = undeclared_calls((2,))
    with self.assertWarnsRegex(UserWarning, "shard_map"):
      jax.jit(
        in_program_order(
          lambda s: jax.shard_map(
            lambda v: read(write(v, jnp.ones(v.shape))),
            mesh=mesh,
            in_specs=P(),
            out_specs=P(),
          )(s)
        )
      ).lower(replicated)

  def test_unknown_higher_order_primitive_raises(self):
    # One of JAX's own higher-order primitives with no ordering rule
    # (custom_vmap, which this test used, has one now).
    def write(slot):
      return jax.custom_derivatives.linear_call(
        lambda _, s: testing.write_slot(s, 1.0), lambda _, c: c, (), slot
      )

    def f(slot):
      return testing.read_slot(write(slot))

    with self.assertRaisesRegex(NotImplementedError, "linear_call"):
      jax.jit(in_program_order(f)).lower(jnp.int32(0))

  def test_host_callbacks(self):
    from jax.experimental import io_callback

    log = []

    def f(slot):
      token = testing.write_slot(slot, 1.0)
      # A host callback may touch anything: ordered after the write, and
      # the second write after it.
      seen = io_callback(
        lambda t: np.float32(log.append(int(t)) or 0),
        jax.ShapeDtypeStruct((), jnp.float32),
        token,
      )
      testing.write_slot(token, 2.0)
      return seen

    self.assert_fixed(f, jnp.int32(13))
    jax.block_until_ready(jax.jit(in_program_order(f))(13))
    self.assertEqual(log, [13])

  def test_debug_callback_returns_nothing_to_order_after(self):
    def f(slot):
      token = testing.write_slot(slot, 1.0)
      jax.debug.callback(lambda t: None, token)
      return testing.write_slot(token, 2.0)

    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      jax.jit(in_program_order(f)).lower(jnp.int32(14))
    messages = [str(w.message) for w in caught]
    self.assertTrue(any("debug_callback" in m for m in messages), messages)
    self.assertTrue(
      all(w.filename == __file__ for w in caught), [w.filename for w in caught]
    )

  def test_a_later_call_keeps_an_unused_write_alive(self):
    write = jax.ffi.ffi_call(
      UNDECLARED_WRITE, jax.ShapeDtypeStruct((), jnp.int32)
    )

    def f(x):
      write(jnp.int32(15), x)  # Not side-effecting, its result unused.
      return testing.read_slot(15)

    def kept(c):
      return test_util.custom_calls(testing.module_text(c), UNDECLARED_WRITE)

    self.assertEqual(kept(compiled(f, jnp.float32(3))), 0)  # JAX drops it.
    with warnings.catch_warnings():
      warnings.simplefilter("error")  # Used by the read's entangle: no warning.
      fixed = compiled(in_program_order(f), jnp.float32(3))
    self.assertEqual(kept(fixed), 1)
    self.assertEqual(jax.jit(in_program_order(f))(jnp.float32(3)), 3.0)

  def test_dropped_write_warns(self):
    write = jax.ffi.ffi_call(
      UNDECLARED_WRITE, jax.ShapeDtypeStruct((), jnp.int32)
    )

    def f(x):
      write(jnp.int32(0), x)
      return x

    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      jax.jit(in_program_order(f)).lower(jnp.float32(1))
    self.assertTrue(
      any(UNDECLARED_WRITE in str(w.message) for w in caught), caught
    )


if __name__ == "__main__":
  absltest.main()
