"""Programs as users write them (jitted helpers called twice, remat,
``custom_vjp``, nested ``jit``, a ``cond`` inside a ``scan``, a
``while_loop`` whose trip count the store decides, ``vmap``, ``lax.map``,
an unrolled ``scan``): each ordered by data, proved and right, beside its
loose twin, which leaves one wait out and is reported (issue 76).

What each loose twin computed on jax 0.10.2 (CPU), 10 of 10 runs, against
its value in program order (`_program_order_value`):

    helper_twice      jit (0.0, 0.0, 3.0)  program order (0.0, 1.0, 3.0)
    remat_loop        jit 0.0              program order 3.0
    custom_vjp        jit (0.0, 0.0, 3.0)  program order (0.0, 5.0, 3.0)
    nested_jit        jit (0.0, 0.0)       program order (0.0, 3.0)
    cond_in_scan      jit (0.0, 1.0)       program order (4.0, 2.0)
    while_data        jit (0.0, 6.0)       program order (3.0, 3.0)
    vmap              jit 0.0              program order 4.0
    loop_then_after   jit (0.0, 3.0)       program order (2.0, 3.0)
    scan_unrolled     jit (0.0, 1.0)       program order (6.0, 4.0)
    map_helper        jit 0.0              program order 2.0

Skeptic pass r76j, the same way (10 of 10 runs, jax 0.10.2):

    scan_reverse (unroll 1, 2, 3, True)
                      jit (0.0, 1.0)       program order (20.0, 10.0)
    while_predicate   jit (10.0, 0.0)      program order (4.0, 4.0)
    export_twice      jit (0.0, 0.0)       program order (0.0, 5.0)
    sharded_jit       jit (0.0, 0.0)       program order (0.0, 5.0)
    cond_in_fori (2 trips)  jit (0.0, 2.0)  program order (1.0, 3.0)
    cond_in_fori (3 trips)  jit (0.0, 1.0)  program order (4.0, 4.0)
    remat_of_loop     jit 0.0              program order 3.0
    remat_policy      jit (0.0, 0.0, 3.0)  program order (0.0, 2.70..., 3.0)
    custom_jvp        jit (0.0, 0.0, 3.0)  program order (0.0, 5.0, 3.0)
    vmap_loop_helper  jit 0.0              program order 2.0
    jitted_and_inlined  jit (0.0, 0.0)     program order (0.0, 5.0)
    switch_folded     jit (0.0, 0.0)       program order (0.0, 5.0)
"""

import functools

import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized
from jax import lax

from entangle_jax import entangle, in_program_order
from entangle_jax.testing import (
  example_store,
  format_races,
  read_slot,
  write_slot,
)
from tests import test_util
from tests.analysis.slot_runs import (
  jit_values,
  program_order_value,
  races_of,
)


@jax.jit
def step(token):
  """A jitted helper: a read, then a write of one more after it; returns
  the write's token."""
  value = read_slot(token)
  return write_slot(entangle(token, value), value + 1.0)


@jax.jit
def peek(token):
  """A jitted query."""
  return read_slot(token)


def helper_twice(slot):
  return peek(step(step(slot)))


def helper_twice_loose(slot):
  """The second query takes the slot, not the update's token."""
  first = peek(slot)
  token = step(entangle(slot, first))
  return first, peek(slot), token.astype(jnp.float32)


def remat_loop(slot):
  body = jax.checkpoint(step)
  return peek(lax.fori_loop(0, 3, lambda i, t: body(t), slot))


def remat_loop_loose(slot):
  """The remat'd read takes the slot in every iteration."""

  def body(i, total):
    value = jax.checkpoint(read_slot)(slot)
    write_slot(entangle(slot, value), value + 1.0)
    return total + value

  return lax.fori_loop(0, 3, body, 0.0)


@jax.custom_vjp
def scaled_read(token, x):
  return read_slot(token) * x


def _scaled_read_forward(token, x):
  value = read_slot(token)
  return value * x, value


def _scaled_read_backward(value, g):
  return None, value * g


scaled_read.defvjp(_scaled_read_forward, _scaled_read_backward)


def custom_vjp(slot):
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  return first, jax.grad(lambda x: scaled_read(written, x))(2.0)


def custom_vjp_loose(slot):
  """The differentiated read takes the slot."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  gradient = jax.grad(lambda x: scaled_read(slot, x))(2.0)
  return first, gradient, written.astype(jnp.float32)


@jax.jit
def _inner_loop(slot):
  def body(i, carry):
    total, token = carry
    value = peek(token)
    token = write_slot(entangle(token, value), total + value + 1.0)
    return total + value, token

  return lax.fori_loop(0, 3, body, (0.0, slot))[0]


@jax.jit
def _inner_loop_loose(slot):
  def body(i, total):
    value = peek(slot)
    write_slot(entangle(slot, value), total + value + 1.0)
    return total + value

  return lax.fori_loop(0, 3, body, 0.0)


def nested_jit(slot):
  first = peek(slot)
  return first, jax.jit(_inner_loop)(entangle(slot, first))


def nested_jit_loose(slot):
  """The inner loop's query takes the slot in every iteration."""
  first = peek(slot)
  return first, jax.jit(_inner_loop_loose)(entangle(slot, first))


def _cond_in_scan(read_from_token):
  def program(slot):
    def body(token, i):
      value = read_slot(token if read_from_token else slot)
      token = lax.cond(
        i % 2 == 0,
        lambda t: write_slot(entangle(t, value), value + 1.0),
        lambda t: t,
        token,
      )
      return token, value

    token, values = lax.scan(body, slot, jnp.arange(4))
    return values.sum(), read_slot(token)

  return program


cond_in_scan = _cond_in_scan(True)
cond_in_scan_loose = _cond_in_scan(False)  # Each read takes the slot.


def while_data(slot):
  """Runs until the slot holds 3 (at most 6 trips): the store decides."""

  def cond(carry):
    value, _, trips = carry
    return (value < 3.0) & (trips < 6)

  def body(carry):
    value, token, trips = carry
    token = write_slot(entangle(token, value), value + 1.0)
    return read_slot(token), token, trips + 1

  value, _, trips = lax.while_loop(
    cond, body, (read_slot(slot), slot, jnp.int32(0))
  )
  return value, trips.astype(jnp.float32)


def while_data_loose(slot):
  """The body's read takes the slot."""

  def cond(carry):
    value, trips = carry
    return (value < 3.0) & (trips < 6)

  def body(carry):
    value, trips = carry
    write_slot(entangle(slot, value), value + 1.0)
    return read_slot(slot), trips + 1

  value, trips = lax.while_loop(cond, body, (read_slot(slot), jnp.int32(0)))
  return value, trips.astype(jnp.float32)


def _bump_and_read(slot):
  value = read_slot(slot)
  return read_slot(write_slot(entangle(slot, value), value + 2.0))


def _bump_and_read_loose(slot):
  value = read_slot(slot)
  written = write_slot(entangle(slot, value), value + 2.0)
  return read_slot(slot) + 0 * written.astype(jnp.float32)


def vmapped(slot):
  return jax.vmap(_bump_and_read)(jnp.stack([slot, slot + 1])).sum()


def vmapped_loose(slot):
  """The second read of each slot takes the slot."""
  return jax.vmap(_bump_and_read_loose)(jnp.stack([slot, slot + 1])).sum()


def loop_then_after(slot):
  return peek(lax.fori_loop(0, 2, lambda i, t: step(t), slot))


def loop_then_after_loose(slot):
  """The query after the loop takes the slot."""
  token = lax.fori_loop(0, 2, lambda i, t: step(t), slot)
  return peek(slot), token.astype(jnp.float32)


def _scan_unrolled(read_from_token):
  def program(slot):
    def body(token, _):
      value = read_slot(token if read_from_token else slot)
      return write_slot(entangle(token, value), value + 1.0), value

    token, values = lax.scan(body, slot, None, length=4, unroll=2)
    return values.sum(), read_slot(token)

  return program


scan_unrolled = _scan_unrolled(True)
scan_unrolled_loose = _scan_unrolled(False)  # Each read takes the slot.


def map_helper(slot):
  return lax.map(lambda s: peek(step(s)), jnp.stack([slot, slot + 1])).sum()


def map_helper_loose(slot):
  """Each query takes its slot, not the step's token."""

  def each(s):
    token = step(s)
    return peek(s) + 0 * token.astype(jnp.float32)

  return lax.map(each, jnp.stack([slot, slot + 1])).sum()


def _scan_reverse(read_from_token, unroll):
  def program(slot):
    def body(token, x):
      value = read_slot(token if read_from_token else slot)
      return write_slot(entangle(token, value), value + x), value

    token, values = lax.scan(
      body, slot, jnp.arange(1.0, 5.0), reverse=True, unroll=unroll
    )
    return values.sum(), read_slot(token)

  return program


def while_predicate(slot):
  """A while loop whose predicate reads the token the body writes."""

  def cond(carry):
    token, trips = carry
    return (read_slot(token) < 4.0) & (trips < 10)

  def body(carry):
    token, trips = carry
    value = read_slot(token)
    return write_slot(entangle(token, value), value + 1.0), trips + 1

  token, trips = lax.while_loop(cond, body, (slot, jnp.int32(0)))
  return trips.astype(jnp.float32), read_slot(token)


def while_predicate_loose(slot):
  """The predicate and the body read the slot, not the token."""

  def body(trips):
    value = read_slot(slot)
    write_slot(entangle(slot, value), value + 1.0)
    return trips + 1

  trips = lax.while_loop(
    lambda trips: (read_slot(slot) < 4.0) & (trips < 10), body, jnp.int32(0)
  )
  return trips.astype(jnp.float32), read_slot(slot)


@functools.cache
def _exported_read():
  """`read_slot` through a `jax.export` round trip."""
  exported = jax.export.export(
    jax.jit(read_slot),
    disabled_checks=[
      jax.export.DisabledSafetyCheck.custom_call(example_store.READ_SLOT_TARGET)
    ],
  )(jax.ShapeDtypeStruct((), jnp.int32))
  return jax.export.deserialize(exported.serialize())


def export_twice(slot):
  first = _exported_read().call(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  return first, _exported_read().call(written)


def export_twice_loose(slot):
  """The second exported query takes the slot."""
  first = _exported_read().call(slot)
  write_slot(entangle(slot, first), first + 5.0)
  return first, _exported_read().call(slot)


def _read_update_read(token):
  first = read_slot(token)
  written = write_slot(entangle(token, first), first + 5.0)
  return first, read_slot(written)


def _read_update_read_loose(token):
  first = read_slot(token)
  write_slot(entangle(token, first), first + 5.0)
  return first, read_slot(token)


@functools.cache
def _sharded(fn):
  """`fn` jitted with shardings on a mesh of one device."""
  mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  return jax.jit(fn, in_shardings=replicated, out_shardings=replicated)


def sharded_jit(slot):
  return _sharded(_read_update_read)(slot)


def sharded_jit_loose(slot):
  return _sharded(_read_update_read_loose)(slot)


def _cond_in_fori(trips, read_from_token):
  """A `fori_loop` of `trips` whose body holds a `cond` in a `cond`."""

  def program(slot):
    def body(i, carry):
      token, total = carry
      value = read_slot(token if read_from_token else slot)

      def even(t):
        return lax.cond(
          value > 100.0,
          lambda u: u,
          lambda u: write_slot(entangle(u, value), value + 1.0),
          t,
        )

      token = lax.cond(
        i % 2 == 0,
        even,
        lambda t: write_slot(entangle(t, value), value + 2.0),
        token,
      )
      return token, total + value

    token, total = lax.fori_loop(0, trips, body, (slot, 0.0))
    return total, read_slot(token)

  return program


def _carried_step(i, carry):
  token, total = carry
  value = read_slot(token)
  return write_slot(entangle(token, value), value + 1.0), total + value


def remat_of_loop(slot):
  token, total = jax.checkpoint(
    lambda s: lax.fori_loop(0, 3, _carried_step, (s, 0.0))
  )(slot)
  return total, read_slot(token)


def remat_of_loop_loose(slot):
  """The whole loop under `jax.checkpoint`; its read takes the slot."""

  def body(i, total):
    value = read_slot(slot)
    write_slot(entangle(slot, value), value + 1.0)
    return total + value

  return jax.checkpoint(lambda s: lax.fori_loop(0, 3, body, 0.0))(slot)


def _remat_policy(read_from_written):
  def program(slot):
    first = read_slot(slot)
    written = write_slot(entangle(slot, first), first + 5.0)
    token = written if read_from_written else slot

    def scaled(x):
      return read_slot(token) * jnp.sin(x)

    policy = jax.checkpoint_policies.nothing_saveable
    gradient = jax.grad(jax.checkpoint(scaled, policy=policy))(1.0)
    return first, gradient, written.astype(jnp.float32)

  return program


remat_policy = _remat_policy(True)
remat_policy_loose = _remat_policy(False)  # The read takes the slot.


@jax.custom_jvp
def _jvp_read(token, x):
  return read_slot(token) * x


@_jvp_read.defjvp
def _jvp_read_rule(primals, tangents):
  token, x = primals
  _, dx = tangents
  value = read_slot(token)
  return value * x, value * dx


def _custom_jvp(read_from_written):
  def program(slot):
    first = read_slot(slot)
    written = write_slot(entangle(slot, first), first + 5.0)
    token = written if read_from_written else slot
    gradient = jax.grad(lambda x: _jvp_read(token, x))(2.0)
    return first, gradient, written.astype(jnp.float32)

  return program


custom_jvp = _custom_jvp(True)
custom_jvp_loose = _custom_jvp(False)  # The differentiated read: the slot.


def _loop_helper(token):
  return lax.fori_loop(0, 2, _carried_step, (token, 0.0))


def vmap_loop_helper(slot):
  tokens, totals = jax.vmap(_loop_helper)(jnp.stack([slot, slot + 1]))
  return totals.sum(), jax.vmap(read_slot)(tokens).sum()


def _loop_helper_loose(token):
  def body(i, total):
    value = read_slot(token)
    write_slot(entangle(token, value), value + 1.0)
    return total + value

  return lax.fori_loop(0, 2, body, 0.0)


def vmap_loop_helper_loose(slot):
  """Each slot's loop reads the slot, not the token it wrote."""
  return jax.vmap(_loop_helper_loose)(jnp.stack([slot, slot + 1])).sum()


def _query(token):
  return read_slot(token)


def jitted_and_inlined(slot):
  """One helper, jitted at one place and inlined at the other."""
  first = jax.jit(_query)(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  return first, _query(written)


def jitted_and_inlined_loose(slot):
  first = _query(slot)
  write_slot(entangle(slot, first), first + 5.0)
  return first, jax.jit(_query)(slot)


def _switch_folded(racy_at):
  """A `lax.switch` on ``slot * 0 + 1``, an index XLA folds: branch 1
  runs; it is racy where `racy_at` is 1."""

  def program(slot):
    branches = [_read_update_read_loose] * 3
    if racy_at != 1:
      branches[1] = _read_update_read
    return lax.switch(slot * 0 + 1, branches, slot)

  return program


switch_folded = _switch_folded(racy_at=0)
switch_folded_loose = _switch_folded(racy_at=1)


class UserProgramsTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ("helper_twice", helper_twice, helper_twice_loose),
    ("remat_loop", remat_loop, remat_loop_loose),
    ("custom_vjp", custom_vjp, custom_vjp_loose),
    ("nested_jit", nested_jit, nested_jit_loose),
    ("cond_in_scan", cond_in_scan, cond_in_scan_loose),
    ("while_data", while_data, while_data_loose),
    ("vmap", vmapped, vmapped_loose),
    ("loop_then_after", loop_then_after, loop_then_after_loose),
    ("scan_unrolled", scan_unrolled, scan_unrolled_loose),
    ("map_helper", map_helper, map_helper_loose),
    *(
      (
        f"scan_reverse_unroll_{unroll}",
        _scan_reverse(True, unroll),
        _scan_reverse(False, unroll),
      )
      for unroll in (1, 2, 3, True)
    ),
    ("while_predicate", while_predicate, while_predicate_loose),
    ("export_twice", export_twice, export_twice_loose),
    ("sharded_jit", sharded_jit, sharded_jit_loose),
    *(
      (
        f"cond_in_fori_{trips}",
        _cond_in_fori(trips, True),
        _cond_in_fori(trips, False),
      )
      for trips in (2, 3)
    ),
    ("remat_of_loop", remat_of_loop, remat_of_loop_loose),
    ("remat_policy", remat_policy, remat_policy_loose),
    ("custom_jvp", custom_jvp, custom_jvp_loose),
    ("vmap_loop_helper", vmap_loop_helper, vmap_loop_helper_loose),
    ("jitted_and_inlined", jitted_and_inlined, jitted_and_inlined_loose),
    ("switch_folded", switch_folded, switch_folded_loose),
  )
  def test_proved_and_right_and_loose_twin_reported(self, program, loose):
    self.assertEqual(races_of(program), [], format_races(races_of(program)))
    self.assertEqual(jit_values(program), [program_order_value(program)] * 3)
    # The control: without the wait, the check reports the pair.
    self.assertNotEmpty(races_of(loose))


class OneTripCondInLoopTest(absltest.TestCase):
  def test_one_trip_has_no_earlier_iteration(self):
    """A `fori_loop` of one trip whose body reads the slot: no earlier
    iteration wrote it, so the read is ordered, right, and clean; at two
    trips the same body is reported (`UserProgramsTest`)."""
    program = _cond_in_fori(1, False)
    self.assertEqual(races_of(program), [], format_races(races_of(program)))
    self.assertEqual(jit_values(program), [program_order_value(program)] * 3)
    self.assertNotEmpty(races_of(_cond_in_fori(2, False)))


class ProgramOrderCheckpointTest(absltest.TestCase):
  def test_a_recomputed_read_takes_its_own_forward_result(self):
    """`in_program_order` of a checkpointed read (`nothing_saveable`)
    after a write, with a read of the same slot before the write: the
    backward pass's recomputation took the first read's result (both are
    `read_slot(slot)` to the transform's keys), so on jax 0.10.2 the
    ordered program computed (0.0, 0.0, 3.0) where program order gives
    (0.0, 2.70..., 3.0), with no pair reported. It takes the result of
    the read made on its own line now."""
    ordered = in_program_order(remat_policy_loose)
    self.assertEqual(races_of(ordered), [], format_races(races_of(ordered)))
    self.assertEqual(
      jit_values(ordered), [program_order_value(remat_policy_loose)] * 3
    )
    # The control: without the transform the read is reported.
    self.assertNotEmpty(races_of(remat_policy_loose))


def _waiting_through(fold):
  """A query, an update ordered after it, and the query again on
  `fold(slot, written)`: what users try in place of consuming the
  update's result."""

  def program(slot):
    first = read_slot(slot)
    written = write_slot(entangle(slot, first), first + 5.0)
    return first, read_slot(fold(slot, written))

  return program


def _switch_clamped(slot):
  """``lax.switch`` clamps its index: 7 runs the last branch, the racy
  one."""
  return lax.switch(
    slot * 0 + 7, [_read_update_read, _read_update_read_loose], slot
  )


def _clamped_predicate(start):
  """``cond(clamp(0, slot * 0 + start, 1) == 1, ordered, racy)``: a
  predicate XLA folds to a constant, through a clamp of constants."""

  def program(slot):
    picked = lax.clamp(0, slot * 0 + start, 1) == 1
    return lax.cond(picked, _read_update_read, _read_update_read_loose, slot)

  return program


class ClampOfConstantsTest(absltest.TestCase):
  def test_the_branch_a_clamp_of_constants_picks(self):
    """The clamp folds to 1: only the ordered branch runs, proved and
    right (the racy branch, which never runs, was paired: jax 0.6.2
    lowers ``lax.switch``'s index through such a clamp, and
    `switch_folded` was reported there). The control, a clamp to 0,
    runs the racy branch: reported, and on jax 0.10.2 (0.0, 0.0) where
    program order gives (0.0, 5.0), in 10 of 10 runs. (jax 0.10.2 and
    newer fold the index before lowering; jax 0.6.2 leaves the clamp in
    the module, where this test failed before the clamp was read.)"""
    program = _clamped_predicate(5)
    self.assertEqual(races_of(program), [], format_races(races_of(program)))
    self.assertEqual(jit_values(program), [program_order_value(program)] * 3)
    control = _clamped_predicate(-5)
    self.assertNotEmpty(races_of(control))
    if test_util.jax_version()[:2] == (0, 10):
      self.assertNotIn(program_order_value(control), jit_values(control))


class WaitsXlaFoldsAwayTest(parameterized.TestCase):
  """Waits users write in place of `optimization_barrier` or of consuming
  the update's result, each a value XLA folds to one that no longer
  depends on the update: on jax 0.10.2 each computed (0.0, 0.0) where
  program order gives (0.0, 5.0), in 10 of 10 runs. Each is reported; its
  fix, applied as the report says (the query consumes the update's
  result, or `in_program_order`), is right and clean."""

  @parameterized.named_parameters(
    ("plus_zero_times", _waiting_through(lambda s, w: s + 0 * w)),
    (
      "where_equal_self",
      _waiting_through(lambda s, w: jnp.where(w == w, s, s)),
    ),
    (
      "where_equal_pick",
      _waiting_through(lambda s, w: jnp.where(w == w, s, w)),
    ),
    (
      "stop_gradient",
      _waiting_through(lambda s, w: lax.stop_gradient((s, w))[0]),
    ),
    (
      "select_n_of_one_value",
      _waiting_through(lambda s, w: lax.select_n(jnp.clip(w, 0, 2), s, s, s)),
    ),
    ("and_zero", _waiting_through(lambda s, w: s + (w & 0))),
    ("switch_clamped", _switch_clamped),
  )
  def test_reported_and_fixed(self, program):
    self.assertNotEmpty(races_of(program))
    if test_util.jax_version()[:2] == (0, 10):
      self.assertNotIn(program_order_value(program), jit_values(program))
    for fixed in (_read_update_read, in_program_order(program)):
      self.assertEqual(races_of(fixed), [], format_races(races_of(fixed)))
      self.assertEqual(jit_values(fixed), [program_order_value(program)] * 3)


if __name__ == "__main__":
  absltest.main()
