""" "Proved" holds for every XLA: the check decides from what XLA may do to a
call that has no side effect (move it out of its loop, merge it, delete
it), not from what one compile did (issue 76).

Each shape runs with the example store and is compared with its value in
program order (the same function under ``jax.disable_jit()``, which runs
each call as the program makes it). Each reported shape has its fix,
applied as the report says, that computes the program-order value with no
pair left. What the shapes computed on jax 0.10.2 (CPU), before this
check reported them (0 pairs each):

    helper_in_loop       jit 0.0   program order 3.0   (the loop's read
                         of the jitted helper moved out of the loop)
    read_merged          jit 0.0   program order 3.0
    query_behind_barrier jit (0.0, 0.0)   program order (0.0, 5.0)
"""

import functools
import inspect
import json
import pathlib
import re
import shutil
import tempfile
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from jax import lax

from entangle_jax import entangle, in_program_order
from entangle_jax.testing import (
  example_store,
  format_races,
  races,
  read_slot,
  reset_slots,
  write_slot,
)
from entangle_jax.testing._analysis.selectors import is_user_native_call
from entangle_jax.testing._hlo import parse
from entangle_jax.testing._hlo.module_text import lowered_hlo_text
from entangle_jax.testing._order import may_order
from entangle_jax.testing._order.may_order import MayOrder
from tests import preloaded_child, test_util

SLOT = 3


@jax.jit
def query(token):
  """A jitted helper: its computation is called from every place."""
  return read_slot(token)


def side_effecting_read(token):
  """The example store's read, marked side-effecting: the fix the report
  gives for a read XLA may move out of its loop."""
  return jax.ffi.ffi_call(
    example_store.READ_SLOT_TARGET,
    jax.ShapeDtypeStruct(jnp.shape(token), jnp.float32),
    has_side_effect=True,
  )(token)


def pure_write(slot, value):
  """The example store's write, not side-effecting (a binding that forgot
  the flag): XLA may delete it when nothing uses its result."""
  return jax.ffi.ffi_call(
    example_store.WRITE_SLOT_TARGET,
    jax.ShapeDtypeStruct(jnp.shape(slot), jnp.int32),
  )(slot, jnp.asarray(value, jnp.float32))


def helper_in_loop(slot, read=query):
  """A jitted query called before a loop and in it; the body writes the
  slot after its read. XLA inlines the helper, moves the loop's read out
  of the loop and merges it with the first."""
  first = read(slot)

  def body(i, total):
    value = read(slot)
    write_slot(entangle(slot, value), total + value + 1.0)
    return total + value

  return lax.fori_loop(0, 3, body, first)


def helper_in_loop_fixed(slot):
  """The report's fix, literally: the loop's read marked side-effecting."""
  return helper_in_loop(slot, read=side_effecting_read)


def helper_in_loop_carried(slot):
  """The report's other fix: the read takes the write's result, carried
  from the iteration before."""
  first = query(slot)

  def body(i, carry):
    total, token = carry
    value = query(token)
    token = write_slot(entangle(token, value), total + value + 1.0)
    return total + value, token

  return lax.fori_loop(0, 3, body, (first, slot))[0]


@functools.cache
def exported_query():
  """The read through a `jax.export` round trip: one function that every
  place calls."""
  exported = jax.export.export(
    jax.jit(read_slot),
    disabled_checks=[
      jax.export.DisabledSafetyCheck.custom_call(example_store.READ_SLOT_TARGET)
    ],
  )(jax.ShapeDtypeStruct((), jnp.int32))
  return jax.export.deserialize(exported.serialize()).call


def exported_in_loop(slot):
  """`helper_in_loop` with the exported query."""
  return helper_in_loop(slot, read=lambda t: exported_query()(t))


def exported_in_loop_carried(slot):
  """The report's fix for it: the read takes the write's result."""
  first = exported_query()(slot)

  def body(i, carry):
    total, token = carry
    value = exported_query()(token)
    token = write_slot(entangle(token, value), total + value + 1.0)
    return total + value, token

  return lax.fori_loop(0, 3, body, (first, slot))[0]


def read_merged(slot):
  """The same shape without the helper: a read before the loop and its
  twin in the body, which XLA moves out and merges."""
  first = read_slot(slot)

  def body(i, total):
    value = read_slot(slot)
    write_slot(entangle(slot, value), total + value + 1.0)
    return total + value

  return lax.fori_loop(0, 3, body, first)


def query_behind_barrier(slot):
  """A query, an update ordered after it, and the query again, made to
  wait for the update through an optimization_barrier: XLA expands the
  barrier, and merges the second query into the first."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  token, _ = lax.optimization_barrier((slot, written))
  return first, read_slot(token)


def query_behind_where(slot):
  """The same wait through a select on a constant, which XLA folds."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  token = jnp.where(jnp.ones((), bool), slot, written)
  return first, read_slot(token)


def query_after_update(slot):
  """The control: the second query consumes the update's result."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  return first, read_slot(written)


def deleted_write(slot):
  """A write with no side effect whose result is used only through an
  optimization_barrier: XLA deletes it, and the read sees the old value."""
  token, _ = lax.optimization_barrier((slot, pure_write(slot, 7.0)))
  return read_slot(token)


def kept_write(slot):
  """The control: the read consumes the write's result."""
  return read_slot(pure_write(slot, 7.0))


def query_behind_same_select(slot):
  """The wait through ``where(p, slot, slot)``: XLA folds a select of
  one value twice to that value."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  return first, read_slot(jnp.where(written > 0, slot, slot))


def query_behind_stacked_slice(slot):
  """The wait through a slice of a stack: XLA folds it to the part it
  takes."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  token = lax.dynamic_index_in_dim(
    jnp.stack([slot, written]), 0, keepdims=False
  )
  return first, read_slot(token)


def query_through(name, fold):
  """The second query made to wait for the update through `fold(slot,
  written)`, a value XLA may fold to one that no longer depends on
  `written` (a skeptic's shapes, each proved before and wrong in every run
  on jax 0.10.2 and 0.12.0.1)."""

  def program(slot):
    first = read_slot(slot)
    written = write_slot(entangle(slot, first), first + 5.0)
    return first, read_slot(fold(slot, written))

  program.__name__ = program.__qualname__ = f"query_through_{name}"
  return program


# An index that cannot change the result: XLA drops it.
query_through_broadcast_index = query_through(
  "broadcast_index", lambda s, w: jnp.broadcast_to(s, (4,))[jnp.clip(w, 0, 3)]
)
query_through_full_slice = query_through(
  "full_slice", lambda s, w: lax.dynamic_slice(s[None], (w,), (1,))[0]
)
query_through_whole_update = query_through(
  "whole_update",
  lambda s, w: lax.dynamic_update_slice(jnp.zeros(1, s.dtype), s[None], (w,))[
    0
  ],
)
# Sort keys decide an order only, and a sort of one element is dropped.
query_through_sort_key = query_through(
  "sort_key", lambda s, w: lax.sort((w[None], s[None]), num_keys=1)[1][0]
)
# Integer arithmetic that cancels: XLA's simplifier folds it to a constant.
query_through_max_minus_itself = query_through(
  "max_minus_itself", lambda s, w: s + (jnp.maximum(w, w) - w)
)
query_through_negated_twice = query_through(
  "negated_twice", lambda s, w: s + (jnp.negative(-w) - w)
)
query_through_remainder_by_one = query_through(
  "remainder_by_one",
  lambda s, w: s + lax.rem(w.astype(jnp.uint32), jnp.uint32(1)).astype(s.dtype),
)


# A skeptic's shapes of issue 76 that the check proved, each wrong in
# every run on jax 0.6.2, 0.10.2 and 0.12.0.1 (0.0 for 5.0): a comparison
# XLA folds to a constant (an unsigned value against 0, a bitcast there
# and back compared with itself), a slice of a value rearranged or padded
# (XLA folds it into a slice of one part), and a loop that never runs
# (XLA deletes it and returns its initial state).
query_through_unsigned_compare = query_through(
  "unsigned_compare",
  lambda s, w: jnp.where(w.astype(jnp.uint32) >= 0, s, w),
)
query_through_unsigned_cond = query_through(
  "unsigned_cond",
  lambda s, w: lax.cond(
    w.astype(jnp.uint32) < 0, lambda a, b: b, lambda a, b: a, s, w
  ),
)
query_through_bitcast_round_trip = query_through(
  "bitcast_round_trip",
  lambda s, w: jnp.where(
    lax.bitcast_convert_type(
      lax.bitcast_convert_type(w, jnp.float32), jnp.int32
    )
    == w,
    s,
    w,
  ),
)
query_through_flipped_stack = query_through(
  "flipped_stack", lambda s, w: jnp.flip(jnp.stack([w, s]))[0]
)
query_through_padding = query_through(
  "padding", lambda s, w: lax.pad(s[None], w, [(0, 1, 0)])[0]
)
query_through_empty_interior = query_through(
  "empty_interior", lambda s, w: lax.pad(s[None], w, [(0, 0, 3)])[0]
)
query_through_negative_padding = query_through(
  "negative_padding",
  lambda s, w: lax.pad(jnp.stack([w, s]), 0, [(-1, 0, 0)])[0],
)
query_through_loop_never_run = query_through(
  "loop_never_run",
  lambda s, w: lax.while_loop(
    lambda c: c[0] < 0, lambda c: (c[0] + 1, c[2], c[2]), (0, s, w)
  )[1],
)


# Element by element (issue 76, second pass): one element of a stack taken
# after an elementwise op, a broadcast or a transpose is the part it came
# from, and a scatter may drop its update (out of bounds) or overwrite the
# whole operand. Each was proved before and, on jax 0.10.2, read 0.0 for
# 5.0 in 5 of 5 runs: XLA folds the slice into the part.
query_through_padded_stack = query_through(
  "padded_stack",
  lambda s, w: (jnp.stack([s, w])[:, None] + jnp.zeros((2, 3), s.dtype))[0, 1],
)
query_through_broadcast_stack = query_through(
  "broadcast_stack",
  lambda s, w: jnp.broadcast_to(jnp.stack([s, w])[:, None], (2, 3))[0, 1],
)
query_through_transposed_stack = query_through(
  "transposed_stack",
  lambda s, w: jnp.broadcast_to(jnp.stack([s, w])[:, None], (2, 3)).T[1, 0],
)
query_through_dropped_scatter = query_through(
  "dropped_scatter",
  lambda s, w: jnp.stack([s]).at[5].set(w, mode="drop")[0],
)
query_through_overwriting_scatter = query_through(
  "overwriting_scatter", lambda s, w: jnp.stack([w]).at[0].set(s)[0]
)

# Ordered by data, element by element: clean, each with its control (the
# other element) reported.
query_through_reshaped_stack = query_through(
  "reshaped_stack", lambda s, w: jnp.stack([s, w]).reshape(2, 1)[1, 0]
)
query_through_reshaped_stack_other = query_through(
  "reshaped_stack_other", lambda s, w: jnp.stack([s, w]).reshape(2, 1)[0, 0]
)
query_through_constant_update = query_through(
  "constant_update",
  lambda s, w: lax.dynamic_update_slice(jnp.stack([s, s]), w[None], (1,))[1],
)
query_through_constant_update_other = query_through(
  "constant_update_other",
  lambda s, w: lax.dynamic_update_slice(jnp.stack([s, s]), w[None], (1,))[0],
)
query_through_constant_scatter = query_through(
  "constant_scatter", lambda s, w: jnp.stack([s, s]).at[1].set(w)[1]
)
query_through_constant_scatter_other = query_through(
  "constant_scatter_other", lambda s, w: jnp.stack([s, s]).at[1].set(w)[0]
)


def _scan_of_writes(slot):
  first = read_slot(slot)

  def body(carry, x):
    return carry, write_slot(entangle(slot, carry), x)

  return first, lax.scan(body, first, jnp.arange(3.0))[1]


def query_after_last_scanned_write(slot):
  """A read of the token the scan's last iteration stacked: after every
  write."""
  first, tokens = _scan_of_writes(slot)
  return first, read_slot(tokens[-1])


def query_after_first_scanned_write(slot):
  """The control: the token of the first iteration orders the read after
  that write only. Right here (2.0) since XLA:CPU runs the loop before
  the read, but a compiler that unrolls it (as ``unroll=True`` does, which
  is reported) may read after the first write (0.0)."""
  first, tokens = _scan_of_writes(slot)
  return first, read_slot(tokens[0])


def _read_write_read(s):
  value = read_slot(s)
  token = write_slot(entangle(s, value), value + 5.0)
  return read_slot(token)


def map_over_two_slots(slot):
  """`lax.map` over two slots: each iteration's first read takes its own
  slot, which changes every iteration, so no compiler may hoist it."""
  return lax.map(_read_write_read, jnp.stack([slot, slot + 1])).sum()


def map_over_one_slot_twice(slot):
  """The control: the same slot twice (a broadcast), whose first read XLA
  may hoist out of the loop."""
  return lax.map(_read_write_read, jnp.broadcast_to(slot, (2,))).sum()


# A skeptic's shapes of issue 76 (third pass), each proved before and
# wrong in 5 of 5 runs on jax 0.10.2 and 0.12.0.1 (0.0 for 5.0): a select
# whose branches XLA proves equal, and an element an update overwrote.
query_through_equal_branches = query_through(
  "equal_branches", lambda s, w: jnp.where(w > 0, s, jnp.negative(-s))
)
query_through_overwritten_element = query_through(
  "overwritten_element",
  lambda s, w: jnp.broadcast_to(w, (2,)).at[0].set(s)[0],
)


def read_used_as_an_index(slot):
  """A stale read whose value only picks an element: XLA keeps it and
  merges it with the first read (0.0 for 7.0), where it was taken as a
  read XLA may delete."""
  first = read_slot(slot)
  write_slot(entangle(slot, first), 7.0)
  value = read_slot(slot)
  return first, jnp.arange(10.0)[value.astype(jnp.int32)]


def read_used_as_an_index_fixed(slot):
  """The fix: the read takes the write's result."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), 7.0)
  value = read_slot(written)
  return first, jnp.arange(10.0)[value.astype(jnp.int32)]


def _stale_body(slot):
  def body(i, total):
    value = read_slot(slot)  # the slot, not the write's result
    write_slot(entangle(slot, value), value + 1.0)
    return total + value

  return body


def _carried_body(i, carry):
  token, total = carry
  value = read_slot(token)
  return write_slot(entangle(token, value), value + 1.0), total + value


@jax.jit
def _from_a_wrapped_start(start, slot):
  # 256 as uint8 is 0: three trips at run time. Read as 256, the check
  # counted none.
  return lax.fori_loop(
    start.astype(jnp.uint8), jnp.uint8(3), _stale_body(slot), 0.0
  )


@jax.jit
def _from_a_wrapped_start_carried(start, slot):
  return lax.fori_loop(
    start.astype(jnp.uint8), jnp.uint8(3), _carried_body, (slot, 0.0)
  )[1]


def loop_from_a_wrapped_start(slot):
  """A loop from ``int32(256).astype(uint8)``: 0.0 for 3.0, its read
  hoisted."""
  return _from_a_wrapped_start(jnp.int32(256), slot)


def loop_from_a_wrapped_start_fixed(slot):
  """The fix: the read takes the token the last write returned."""
  return _from_a_wrapped_start_carried(jnp.int32(256), slot)


def _racy_branch(token):
  first = read_slot(token)
  write_slot(entangle(token, first), first + 5.0)
  return first, read_slot(token)


def _ordered_branch(token):
  first = read_slot(token)
  written = write_slot(entangle(token, first), first + 5.0)
  return first, read_slot(written)


@jax.jit
def _flagged(flag, token):
  return lax.cond(flag, _racy_branch, _ordered_branch, token)


@jax.jit
def _flagged_fixed(flag, token):
  return lax.cond(flag, _ordered_branch, _ordered_branch, token)


def racy_branch_picked(slot):
  """A helper's constant ``True`` picks the racy branch: JAX converts the
  predicate to index 1, which the check read as ``True``, branch 0 (the
  ordered one). 0.0 for 5.0."""
  return _flagged(jnp.bool_(True), slot)


def racy_branch_picked_fixed(slot):
  """The fix, in the branch that runs: the read takes the write's
  result."""
  return _flagged_fixed(jnp.bool_(True), slot)


def racy_branch_not_picked(slot):
  """``False`` picks the ordered branch; the racy one never runs (it was
  reported)."""
  return _flagged(jnp.bool_(False), slot)


def _stepped_by_a_hidden_constant(slot, flag):
  def body(carry):
    i, total = carry
    value = read_slot(slot)
    write_slot(entangle(slot, value), value + 1.0)
    return jnp.where(flag, i + 2, i + 1), total + value

  return lax.while_loop(lambda c: c[0] < 2, body, (0, 0.0))[1]


def loop_stepped_by_a_hidden_constant(slot):
  """A counter stepped by ``where(flag, 2, 1)``, `flag` a constant the
  check cannot read (False): two trips, counted as one. 0.0 for 1.0."""
  return _stepped_by_a_hidden_constant(slot, jnp.all(jnp.array([True, False])))


def loop_stepped_by_a_hidden_constant_fixed(slot):
  """The fix: the read takes the token the last write returned."""

  def body(carry):
    i, token, total = carry
    value = read_slot(token)
    token = write_slot(entangle(token, value), value + 1.0)
    flag = jnp.all(jnp.array([True, False]))
    return jnp.where(flag, i + 2, i + 1), token, total + value

  return lax.while_loop(lambda c: c[0] < 2, body, (0, slot, 0.0))[2]


def take_in_bounds(slot):
  """``jnp.take`` of index 0 (its default mode fills out of bounds): the
  bounds test is a constant XLA folds, so the read takes the write's
  result."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), 9.0)
  return first, read_slot(jnp.take(written[None], 0))


def take_out_of_bounds(slot):
  """The control: index 1 takes the fill value, not the write's result."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), 9.0)
  return first, read_slot(jnp.take(written[None], 1) * 0 + slot)


# A skeptic's shapes of issue 76 (fourth pass), each proved before and
# wrong in 5 of 5 runs on jax 0.10.2 and 0.12.0.1 (0.0 for 5.0): XLA folds
# a comparison of a value it knows never negative with 0, an integer dot
# with zeros, a product over an element 0; and a loop that runs once is
# inlined, keeping only its body's value.
query_through_abs_below_zero = query_through(
  "abs_below_zero", lambda s, w: s + (jnp.abs(w) < 0).astype(s.dtype)
)
query_through_square_at_least_zero = query_through(
  "square_at_least_zero",
  lambda s, w: s + (w * w >= 0).astype(s.dtype) - 1,
)
query_through_integer_dot_with_zeros = query_through(
  "integer_dot_with_zeros",
  lambda s, w: s + jnp.dot(jnp.zeros(2, s.dtype), jnp.stack([w, w])),
)
query_through_product_with_a_zero = query_through(
  "product_with_a_zero",
  lambda s, w: s + jnp.prod(jnp.stack([w, jnp.zeros((), s.dtype)])),
)
query_through_one_trip_loop = query_through(
  "one_trip_loop", lambda s, w: lax.fori_loop(0, 1, lambda i, c: s, w)
)

# Skeptic pass 76e: what XLA knows never negative reaches further than an
# abs: a power of a base never negative, a maximum with an arange, and a
# value behind ops XLA folds away as identities (a slice of a broadcast,
# a division by 1); constants of a product of products multiply to 0 in
# the type's wrapping arithmetic; a loop that XLA counts to one trip
# where the check cannot count it (counted down from 1; a step bound and
# an iteration cap) is replaced by its body.
query_through_power_below_zero = query_through(
  "power_below_zero",
  lambda s, w: s + (2.0 ** w.astype(jnp.float32) < 0).astype(s.dtype),
)
query_through_arange_maximum_below_zero = query_through(
  "arange_maximum_below_zero",
  lambda s, w: s + (jnp.maximum(w, jnp.arange(3)) < 0).sum().astype(s.dtype),
)
query_through_abs_behind_a_slice = query_through(
  "abs_behind_a_slice",
  lambda s, w: (
    s
    + (jnp.broadcast_to(jnp.abs(w.astype(jnp.float32)), (2,))[0] < 0).astype(
      s.dtype
    )
  ),
)
query_through_abs_divided_by_one = query_through(
  "abs_divided_by_one",
  lambda s, w: (
    s + (lax.div(jnp.abs(w.astype(jnp.float32)), 1.0) < 0).astype(s.dtype)
  ),
)
query_through_constants_wrapping_to_zero = query_through(
  "constants_wrapping_to_zero",
  lambda s, w: s + lax.mul(lax.mul(w, jnp.int32(65536)), jnp.int32(65536)),
)
query_through_loop_counted_down = query_through(
  "loop_counted_down",
  lambda s, w: lax.while_loop(
    lambda state: state[0] > 0,
    lambda state: (state[0] - 1, s),
    (jnp.int32(1), w),
  )[1],
)
query_through_capped_loop = query_through(
  "capped_loop",
  lambda s, w: lax.while_loop(
    lambda state: (state[0] < 1) & (state[0] < 5),
    lambda state: (state[0] + 1, s),
    (jnp.int32(0), w),
  )[1],
)


@jax.jit
def _times_65536(x):
  """A jitted helper: XLA inlines it before it reassociates."""
  return x * jnp.int32(65536)


@jax.jit
def _times(x, c):
  """A jitted helper of one place, passed both factors."""
  return x * c


# Skeptic pass 76f: never negative behind a jitted helper's parameter
# (jnp.clip is one), a power of 2 (XLA makes it a square), a constant XLA
# computes; a product of products through a helper or a reshape; an
# integer 1x1 convolution with a zero kernel (a dot for XLA); a constant
# out of a loop that runs once.
query_through_clip_below_zero = query_through(
  "clip_below_zero",
  lambda s, w: s + (jnp.clip(w.astype(jnp.float32), 0.0) < 0).astype(s.dtype),
)
query_through_square_by_power = query_through(
  "square_by_power",
  lambda s, w: s + (lax.pow(w.astype(jnp.float32), 2.0) < 0).astype(s.dtype),
)
query_through_maximum_with_a_computed_zero = query_through(
  "maximum_with_a_computed_zero",
  lambda s, w: (
    s
    + (
      jnp.maximum(w.astype(jnp.float32), jnp.sum(jnp.zeros(3, jnp.float32))) < 0
    ).astype(s.dtype)
  ),
)
query_through_helper_product_wrapping = query_through(
  "helper_product_wrapping",
  lambda s, w: s + _times_65536(w) * jnp.int32(65536),
)
query_through_helper_passed_a_product = query_through(
  "helper_passed_a_product",
  lambda s, w: s + _times(w * jnp.int32(65536), jnp.int32(65536)),
)
query_through_reshaped_product_wrapping = query_through(
  "reshaped_product_wrapping",
  lambda s, w: s + ((w * jnp.int32(65536))[None] * jnp.int32(65536))[0],
)
query_through_zero_kernel = query_through(
  "zero_kernel",
  lambda s, w: (
    s
    + lax.conv_general_dilated(
      jnp.stack([w, w])[None, None],
      jnp.zeros((1, 1, 1), jnp.int32),
      (1,),
      "VALID",
    )[0, 0, 0]
  ),
)
query_through_abs_shifted_back = query_through(
  "abs_shifted_back",
  lambda s, w: (
    s + ((jnp.abs(w.astype(jnp.float32)) - 1.0) + 1.0 < 0).astype(s.dtype)
  ),
)
query_through_one_trip_loop_zero = query_through(
  "one_trip_loop_zero",
  lambda s, w: s + w * lax.fori_loop(0, 1, lambda i, c: c * 0, w),
)


def _one_trip_float_zero():
  """0.0 out of a ``while i < 1`` body's ``c * 0.0`` from ``c = 1.0``:
  a float product with 0 stays, but XLA inlines the one trip and folds
  ``1.0 * 0.0``."""
  return lax.while_loop(
    lambda c: c[0] < 1,
    lambda c: (c[0] + 1, c[1] * 0.0),
    (jnp.int32(0), jnp.float32(1.0)),
  )[1]


def one_trip_loop_reading_through_its_counter(slot):
  """A ``fori_loop(0, 1)`` whose read waits through ``i * written``: XLA
  inlines the one trip, where ``i`` is 0, and the read takes the slot."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  total = lax.fori_loop(
    0, 1, lambda i, t: t + read_slot(slot + i * written), jnp.float32(0.0)
  )
  return first, total


def one_trip_loop_reading_the_update(slot):
  """The fix: the read takes the update's result itself."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  total = lax.fori_loop(
    0, 1, lambda i, t: t + read_slot(written + i), jnp.float32(0.0)
  )
  return first, total


query_through_abs_below_one_trip_zero = query_through(
  "abs_below_one_trip_zero",
  lambda s, w: (
    s
    + (jnp.abs(w.astype(jnp.float32)) < _one_trip_float_zero()).astype(s.dtype)
  ),
)

query_through_summed_copies_wrapping = query_through(
  "summed_copies_wrapping",
  lambda s, w: (
    s
    + jnp.sum(
      jnp.broadcast_to(w.astype(jnp.int8), (256,)), dtype=jnp.int8
    ).astype(s.dtype)
  ),
)
query_through_dot_of_copies_wrapping = query_through(
  "dot_of_copies_wrapping",
  lambda s, w: (
    s
    + jnp.dot(
      jnp.broadcast_to(w.astype(jnp.int8), (256,)), jnp.ones(256, jnp.int8)
    ).astype(s.dtype)
  ),
)


def _below_zero(x, dtype):
  return (x < 0).astype(dtype)


def _float(w):
  return w.astype(jnp.float32)


# Ordered by data: XLA cannot know these never negative (a negation, or a
# constant added that is not undone, hides the ``abs`` or ``exp``), and a
# product with constants that do not multiply to 0 stays. Each reads the
# written slot (the update's result is the slot, 3).
query_through_negated_abs = query_through(
  "negated_abs",
  lambda s, w: s + _below_zero(-jnp.abs(_float(w)), s.dtype) - 1,
)
query_through_abs_minus_one = query_through(
  "abs_minus_one",
  lambda s, w: s + _below_zero(jnp.abs(_float(w)) - 1.0, s.dtype),
)
query_through_exp_minus_a_hundred = query_through(
  "exp_minus_a_hundred",
  lambda s, w: s + _below_zero(jnp.exp(_float(w)) - 100.0, s.dtype) - 1,
)
query_through_abs_and_one = query_through(
  "abs_and_one",
  lambda s, w: s + _below_zero(jnp.abs(w) & 1, s.dtype),
)
query_through_product_by_an_array = query_through(
  "product_by_an_array",
  lambda s, w: (
    s + ((jnp.stack([w, w + 1]) * jnp.array([1, 2], s.dtype)) * 3)[1] - 24
  ),
)
query_through_product_by_a_shifted_constant = query_through(
  "product_by_a_shifted_constant",
  lambda s, w: (
    s
    + ((w - 3) * jnp.int32(65536))
    * lax.shift_right_logical(jnp.int32(65536), jnp.int32(16))
  ),
)


def query_through_summed_copies_not_wrapping(slot):
  """Ordered by data: 255 copies of an ``s8`` sum to ``-w``, not 0."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  copies = jnp.broadcast_to(written.astype(jnp.int8), (255,))
  summed = jnp.sum(copies, dtype=jnp.int8) + jnp.int8(3)
  return first, read_slot(slot + summed.astype(slot.dtype))


def scan_once_handing_on_the_update(slot):
  """A scan of one step whose carry starts at the slot and is handed the
  update for later steps: its one read sees the slot (XLA inlines the
  loop and merges the read with the first), though the joined state
  holds the update (skeptic pass 76f)."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  _, reads = lax.scan(lambda c, _: (written, read_slot(c)), slot, length=1)
  return first, reads.sum()


def scan_once_reading_the_update(slot):
  """The fix: the carry starts at the update."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  _, reads = lax.scan(lambda c, _: (c, read_slot(c)), written, length=1)
  return first, reads.sum()


def query_through_arange_mask(slot):
  """Ordered by data: ``arange(4) - w`` varies with both, so XLA cannot
  know it never negative; the mask's count keeps the update's result."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  mask = (jnp.arange(4) - written < 0).sum().astype(slot.dtype)
  return first, read_slot(slot + mask)


# Ordered by data: each index picks another element of a table whose
# elements all differ, so XLA cannot drop it (skeptic pass 76f: reported,
# and right in 10 of 10 runs on jax 0.10.2). Their controls' tables hold
# one value or one element, so XLA drops the index and the query reads the
# slot before the update: 0.0 where program order gives 5.0, in 10 of 10
# runs.
query_through_table_of_differing_elements = query_through(
  "table_of_differing_elements",
  lambda s, w: (
    s + _below_zero(jnp.array([-1.0, -2.0, -3.0])[jnp.abs(w) % 3], s.dtype) - 1
  ),
)
query_through_table_of_one_value = query_through(
  "table_of_one_value",
  lambda s, w: (
    s + _below_zero(jnp.array([-1.0, -1.0, -1.0])[jnp.abs(w) % 3], s.dtype) - 1
  ),
)
query_through_range_table = query_through(
  "range_table", lambda s, w: s + jnp.arange(3, dtype=s.dtype)[jnp.abs(w) % 3]
)
# The same through a gather (an array of one index, promised in bounds),
# and its control, a table of one value.
query_through_gathered_table = query_through(
  "gathered_table",
  lambda s, w: (
    s
    + jnp.array([-1, -2, -3], s.dtype)
    .at[(jnp.abs(w) % 3)[None]]
    .get(mode="promise_in_bounds")[0]
    + 1
  ),
)
query_through_gathered_one_value = query_through(
  "gathered_one_value",
  lambda s, w: (
    s
    + jnp.array([-1, -1, -1], s.dtype)
    .at[(jnp.abs(w) % 3)[None]]
    .get(mode="promise_in_bounds")[0]
    + 1
  ),
)
query_through_one_element_table = query_through(
  "one_element_table",
  lambda s, w: s + jnp.array([0], s.dtype)[jnp.abs(w) % 3],
)


# Indices a compiler that knows their range may pin to one start (the
# clamp of a start into the table): no order, though XLA keeps them today
# (right in 5 of 5 runs). Their control is `query_through_table_of_
# differing_elements`, whose index takes each start.
query_through_index_pinned_low = query_through(
  "index_pinned_low",
  lambda s, w: (
    s
    + lax.dynamic_slice(
      jnp.array([-1, -2, -3], s.dtype), (jnp.minimum(jnp.abs(w), 0),), (1,)
    )[0]
    + 1
  ),
)
query_through_index_pinned_high = query_through(
  "index_pinned_high",
  lambda s, w: (
    s
    + lax.dynamic_slice(
      jnp.array([-1, -2, -3], s.dtype), (jnp.abs(w) + 7,), (1,)
    )[0]
    + 3
  ),
)


def deep_checksums(steps):
  """Two checksums of one chain of `steps` ops compared, the compare
  before the query: value numbers as deep as the chain."""

  def program(slot):
    first = read_slot(slot)
    written = write_slot(entangle(slot, first), first + 5.0)
    a = b = written
    for _ in range(steps):
      a = a * 31 + 7
      b = b * 31 + 7
    return first, read_slot(written + (a == b).astype(slot.dtype) - 1)

  program.__name__ = program.__qualname__ = f"deep_checksums_{steps}"
  return program


def query_through_square_root_below_zero(slot):
  """Ordered by data: XLA does not take a square root as never negative,
  so ``sqrt(w) < 0`` stays a comparison of the update's result."""
  first = read_slot(slot)
  written = write_slot(entangle(slot, first), first + 5.0)
  below = jnp.sqrt(written.astype(jnp.float32)) < 0
  return first, read_slot(slot + below.astype(slot.dtype))


def _ordered_branch_when(predicate):
  """``cond(predicate, ordered, racy)``: right only where the predicate
  holds; the check must read the predicate as XLA folds it."""

  def program(slot):
    return lax.cond(predicate(), _ordered_branch, _racy_branch, slot)

  return program


@jax.jit
def _to_s8(x):
  return x.astype(jnp.int8)


# f32 200 as int8 saturates to 127 (XLA); read as an int it wrapped to
# -56, so the check took the ordered branch for the one that runs.
racy_branch_after_a_saturating_convert = _ordered_branch_when(
  lambda: _to_s8(jnp.float32(200)) == -56
)
# The control: 100 fits, the ordered branch runs (right, clean).
ordered_branch_after_a_convert = _ordered_branch_when(
  lambda: _to_s8(jnp.float32(100)) == 100
)


def _nested(s, w):
  """Concatenates in concatenates, of shape (5, 4): ``[1, 0]`` is `w`."""
  inner = jnp.concatenate(
    [jnp.broadcast_to(s, (1, 1)), jnp.broadcast_to(w, (1, 1))], axis=0
  )
  column = jnp.concatenate([inner, jnp.broadcast_to(s, (3, 1))], axis=0)
  return jnp.concatenate([column, jnp.broadcast_to(s, (5, 3))], axis=1)


# The write's element of nested concatenates, flattened: [4] is [1, 0].
query_through_nested_flat = query_through(
  "nested_flat", lambda s, w: _nested(s, w).reshape(-1)[4]
)
# The control: [0] is s.
query_through_nested_flat_other = query_through(
  "nested_flat_other", lambda s, w: _nested(s, w).reshape(-1)[0]
)


def _rows_of_writes(slot):
  first = read_slot(slot)

  def body(token, _):
    value = read_slot(token)
    written = write_slot(entangle(token, value), value + 1.0)
    return written, jnp.stack([written, slot])

  return first, lax.scan(body, entangle(slot, first), None, length=3)[1]


def query_after_the_last_rows_write(slot):
  """``ys[-1, 0]``: the last iteration's write's token, in a row of two."""
  first, rows = _rows_of_writes(slot)
  return first, read_slot(rows[-1, 0])


def query_of_the_last_rows_slot(slot):
  """The control: ``ys[-1, 1]`` is the slot, after no write."""
  first, rows = _rows_of_writes(slot)
  return first, read_slot(rows[-1, 1])


# jnp.take of one element at a constant index: a gather XLA folds to it.
query_through_take_of_a_stack = query_through(
  "take_of_a_stack", lambda s, w: jnp.take(jnp.stack([s, w]), 1)
)
# The control: index 0 is the slot.
query_through_take_of_a_stack_other = query_through(
  "take_of_a_stack_other", lambda s, w: jnp.take(jnp.stack([s, w]), 0)
)


def _reading_a_carried_token(next_of):
  """A loop whose read takes a carried element `c` that the body sets to
  `next_of(c, i)`; a write after the read, ordered after it."""

  def program(slot):
    def body(i, state):
      total, token = state
      value = read_slot(token)
      write_slot(entangle(slot, value), value + 1.0)
      return total + value, next_of(token, i)

    return lax.fori_loop(0, 3, body, (0.0, slot))[0]

  return program


@jax.jit
def _difference(a, b):
  """A jitted helper: XLA inlines it, then folds ``i - i``."""
  return a - b


# A skeptic's shapes of issue 76 (fifth pass), proved before and wrong in
# 5 of 5 runs on jax 0.10.2 and 0.12.0.1 (0.0 for 3.0): XLA folds -(-c)
# (or c // 1, sum(c[None])) back to c, takes c as unchanged in the loop,
# and hoists the read.
loop_reading_a_negated_twice_token = _reading_a_carried_token(
  lambda c, i: jnp.negative(-c)
)
loop_reading_a_summed_token = _reading_a_carried_token(
  lambda c, i: jnp.sum(c[None])
)
# Skeptic pass 76g: the counter added and taken off again, inline or in
# a jitted helper; XLA folds it away after inlining.
loop_reading_a_cancelled_token = _reading_a_carried_token(
  lambda c, i: (c + jnp.asarray(i)) - jnp.asarray(i)
)
loop_reading_a_helper_cancelled_token = _reading_a_carried_token(
  lambda c, i: c + _difference(jnp.asarray(i), jnp.asarray(i))
)
# The control: a token that changes with the counter (not foldable).
loop_reading_a_counted_token = _reading_a_carried_token(
  lambda c, i: c + (jnp.asarray(i) > 100).astype(c.dtype)
)


def loop_reading_a_written_token(slot):
  """The fix: the read takes the token the last write returned."""

  def body(i, state):
    total, token = state
    value = read_slot(token)
    token = write_slot(entangle(token, value), value + 1.0)
    return total + value, token

  return lax.fori_loop(0, 3, body, (0.0, slot))[0]


# argmax of one element is 0, a constant XLA folds (0.0 for 5.0).
query_through_argmax_of_one = query_through(
  "argmax_of_one", lambda s, w: s + jnp.argmax(w[None]).astype(s.dtype)
)


def indexed_read_in_loop(slot, read=read_slot):
  """A loop's read of the slot through an index that cannot change it (a
  broadcast's element): XLA drops the index, and the read no longer
  changes in the loop and moves out of it."""

  def body(i, total):
    value = read(jnp.broadcast_to(slot, (3,))[i])
    write_slot(entangle(slot, value), total + value + 1.0)
    return total + value

  return lax.fori_loop(0, 3, body, 0.0)


def indexed_read_in_loop_fixed(slot):
  """The report's fix, literally: the loop's read marked side-effecting."""
  return indexed_read_in_loop(slot, read=side_effecting_read)


def token_remade_in_loop(slot, read=read_slot):
  """A loop that makes its token anew each iteration through
  ``where(True, token, write)``: XLA folds it, the token no longer changes
  in the loop, and the read moves out of it."""

  def body(i, carry):
    token, total = carry
    value = read(token)
    written = write_slot(entangle(slot, value), total + value + 1.0)
    return jnp.where(jnp.ones((), bool), token, written), total + value

  return lax.fori_loop(0, 3, body, (slot, 0.0))[1]


def token_remade_in_loop_fixed(slot):
  return token_remade_in_loop(slot, read=side_effecting_read)


def wrapping_counter(slot, read=read_slot):
  """A uint8 counter from 250 stepped by 10 while <= 250: it wraps, and
  the loop runs 26 times in program order, not the once its constants
  say (XLA:CPU of jax 0.10.2 runs it once: 0.0 where program order
  computes 33554432.0, the read's side effect or not)."""

  def body(carry):
    i, total = carry
    value = read(slot)
    write_slot(entangle(slot, value), total + value + 1.0)
    return i + jnp.uint8(10), total + value

  return lax.while_loop(
    lambda c: c[0] <= jnp.uint8(250), body, (jnp.uint8(250), 0.0)
  )[1]


def read_then_write_scaled(slot):
  """Ordered by data: the write's value is computed from the read's
  result (a product with a constant that is not zero)."""
  value = read_slot(slot)
  written = write_slot(slot, value * 2.0 + 5.0)
  return value, read_slot(written)


def read_then_write_scaled_unordered(slot):
  """The control: the last read takes the slot."""
  value = read_slot(slot)
  write_slot(slot, value * 2.0 + 5.0)
  return value, read_slot(slot)


def write_after_a_float_product_with_zero(slot):
  """Ordered by data through ``value * 0.0``: XLA keeps a floating-point
  product with zero (``nan * 0`` is ``nan``), as in the TPU check's
  ``t.astype(float32) * 0`` (tools/tpu_check.sh), once a false report."""
  value = read_slot(slot)
  written = write_slot(slot, 5.0 + value * 0.0)
  return value, read_slot(written)


def write_after_an_integer_product_with_zero(slot):
  """The control: an integer product with zero is the constant 0 to XLA's
  algebraic simplifier, so the write no longer waits for the read."""
  value = read_slot(slot)
  written = write_slot(slot + value.astype(jnp.int32) * 0, 5.0)
  return value, read_slot(written)


def write_after_a_float_difference(slot):
  """Ordered by data through ``value - value``: XLA keeps a floating-point
  difference of one value (``inf - inf`` is ``nan``)."""
  value = read_slot(slot)
  written = write_slot(slot, 5.0 + (value - value))
  return value, read_slot(written)


def write_after_an_integer_difference(slot):
  """The control: an integer difference of one value is 0 to XLA's
  algebraic simplifier, so the write no longer waits for the read."""
  value = read_slot(slot).astype(jnp.int32)
  written = write_slot(slot + (value - value), 5.0)
  return value.astype(jnp.float32), read_slot(written)


@jax.jit
def bump(slot):
  """A jitted helper that reads the slot, then writes it."""
  value = read_slot(slot)
  return value, write_slot(entangle(slot, value), value + 1.0)


def bump_twice(slot):
  """The helper at two places; the second waits for the first's read, not
  for its write."""
  a, _ = bump(slot)
  b, _ = bump(entangle(slot, a))
  return a, b


def bump_twice_fixed(slot):
  """The report's fix: the second takes the first's write."""
  a, written = bump(slot)
  b, _ = bump(written)
  return a, b


@jax.jit
def query_pair(slot):
  """A jitted query, called at two places on the same operand."""
  return read_slot(slot)


def query_twice_around_a_write(slot):
  """Two identical queries: XLA inlines both and merges them, so the
  second returns the first's value."""
  first = query_pair(slot)
  write_slot(entangle(slot, first), first + 5.0)
  return first, query_pair(slot)


def helper_before_and_after(slot):
  """A jitted query before a write and after it: the pair is the
  second query and the write, the write first."""
  first = query(slot)
  write_slot(entangle(slot, first), first + 5.0)
  return first, query(slot)


def one_trip_loop(slot):
  """A loop that runs once, its read ordered after the write by data."""

  def body(i, total):
    token = write_slot(slot, total + 1.0)
    return total + read_slot(token)

  return lax.fori_loop(0, 1, body, 0.0)


def one_trip_scan(slot):
  def body(total, x):
    token = write_slot(slot, total + x)
    return total + read_slot(token), None

  return lax.scan(body, 0.0, jnp.ones((1,), jnp.float32))[0]


def one_trip_loop_unordered(slot):
  """The control: the read takes the slot, not the write's result."""

  def body(i, total):
    write_slot(slot, total + 1.0)
    return total + read_slot(slot)

  return lax.fori_loop(0, 1, body, 0.0)


def state_from_outside(slot):
  """A loop whose body sets its state from a token made before it."""
  token = write_slot(slot, 4.0)
  (out,) = lax.fori_loop(0, 3, lambda i, c: (token,), (token,))
  return read_slot(out)


def state_from_outside_unordered(slot):
  """The control: the read takes the slot."""
  token = write_slot(slot, 4.0)
  lax.fori_loop(0, 3, lambda i, c: (token,), (token,))
  return read_slot(slot)


def constant_predicate(slot):
  """A cond whose predicate XLA folds (``x * 0 == 0``): the dead
  branch's write is ordered before the read by data anyway."""
  predicate = slot * 0 == 0
  token = lax.cond(
    predicate,
    lambda s: write_slot(s, 2.0),
    lambda s: write_slot(s, 3.0),
    slot,
  )
  return read_slot(token)


def constant_predicate_unordered(slot):
  """The control: the read takes the slot."""
  predicate = slot * 0 == 0
  lax.cond(
    predicate,
    lambda s: write_slot(s, 2.0),
    lambda s: write_slot(s, 3.0),
    slot,
  )
  return read_slot(slot)


def scan_over(name, make_xs, read=read_slot):
  """A scan whose body reads ``slot + x`` and writes the slot after it,
  over the items `make_xs(slot)`: where XLA folds them to zeros, each
  ``x`` is 0 and the read is the same in every iteration, so XLA may move
  it out of the loop."""

  def program(slot):
    def body(total, x):
      value = read(slot + x)
      write_slot(entangle(slot, value), value + 1.0)
      return total + value, None

    return lax.scan(body, jnp.float32(0.0), make_xs(slot))[0]

  program.__name__ = program.__qualname__ = f"scan_over_{name}"
  return program


# Items XLA may fold to zeros (``A - A`` of integers, ``x % 1``); the
# literal zeros show what the fold does.
scan_over_cancelled = scan_over("cancelled", lambda s: jnp.full(3, s) - s)
scan_over_remainders = scan_over(
  "remainders", lambda s: jnp.stack([lax.rem(s, 1)] * 3)
)
scan_over_literal_zeros = scan_over(
  "literal_zeros", lambda s: jnp.zeros(3, jnp.int32)
)
# Ordered: items that differ (constants, but no one value), so the read
# changes from one iteration to the next.
scan_over_ranges = scan_over(
  "ranges",
  lambda s: jnp.concatenate(
    [jnp.arange(3, dtype=s.dtype), jnp.arange(3, dtype=s.dtype) + 3]
  ),
)


# Ordered: one range stacked twice has items that differ (skeptic pass
# 76g: reported, right in 10 of 10 runs on jax 0.10.2). Its control, the
# range times zero stacked twice, is zeros: the read leaves the loop, 0.0
# where program order gives 15.0, in 10 of 10 runs on jax 0.10.2 (jax 0.6.2
# keeps the read in the loop).
scan_over_repeated_ranges = scan_over(
  "repeated_ranges",
  lambda s: jnp.concatenate([jnp.arange(3, dtype=s.dtype)] * 2),
)
scan_over_repeated_zeros = scan_over(
  "repeated_zeros",
  lambda s: jnp.concatenate([jnp.arange(3, dtype=s.dtype) * 0] * 2),
)
# The same through a broadcast of the range (``tile``): a broadcast of an
# array whose elements differ is no broadcast of one value. Its control,
# a tile of the range times zero, is zeros (0.0 for 15.0 in 10 of 10
# runs on jax 0.10.2).
scan_over_tiled_range = scan_over(
  "tiled_range", lambda s: jnp.tile(jnp.arange(3, dtype=s.dtype), 2)
)
scan_over_tiled_zeros = scan_over(
  "tiled_zeros", lambda s: jnp.tile(jnp.arange(3, dtype=s.dtype) * 0, 2)
)


def _scan_over_rows(name, make_rows):
  def program(slot):
    def body(total, row):
      value = read_slot(slot + row[0])
      write_slot(entangle(slot, value), value + 1.0)
      return total + value, None

    return lax.scan(body, jnp.float32(0.0), make_rows(slot))[0]

  program.__name__ = program.__qualname__ = f"scan_over_rows_{name}"
  return program


# Rows of a range broadcast (or stacked) are alike: each iteration reads
# ``slot + 0``, which a compiler may see (it folds a slice of a broadcast
# along the broadcast dimensions) and move out of the loop. Right in 10 of
# 10 runs on jax 0.10.2 (XLA keeps the read), and reported by rule.
scan_over_rows_of_a_broadcast_range = _scan_over_rows(
  "broadcast_range",
  lambda s: jnp.broadcast_to(jnp.arange(3, dtype=s.dtype), (4, 3)),
)
scan_over_rows_of_a_stacked_range = _scan_over_rows(
  "stacked_range", lambda s: jnp.stack([jnp.arange(3, dtype=s.dtype)] * 4)
)


def _jit_values(fn, times=3):
  values = []
  for _ in range(times):
    reset_slots()
    values.append(jax.tree.map(float, fn(jnp.int32(SLOT))))
  return values


def _program_order_value(fn):
  reset_slots()
  with jax.disable_jit():
    return jax.tree.map(float, fn(jnp.int32(SLOT)))


def _races(fn):
  return races(jax.jit(fn).lower(jnp.int32(SLOT)))


class ReportedWithAWorkingFixTest(parameterized.TestCase):
  """Shapes that every run computes wrong, which the check proved before:
  each is reported now, and its fix, applied literally, is right and
  clean."""

  @parameterized.named_parameters(
    ("helper_in_loop", helper_in_loop, helper_in_loop_fixed, "hoisted"),
    ("helper_carried", helper_in_loop, helper_in_loop_carried, "hoisted"),
    ("read_merged", read_merged, helper_in_loop_fixed, "hoisted"),
    ("exported", exported_in_loop, exported_in_loop_carried, "hoisted"),
    ("barrier", query_behind_barrier, query_after_update, None),
    ("where", query_behind_where, query_after_update, None),
    ("deleted_write", deleted_write, kept_write, "deleted"),
    ("same_select", query_behind_same_select, query_after_update, None),
    ("stacked_slice", query_behind_stacked_slice, query_after_update, None),
    (
      "token_remade",
      token_remade_in_loop,
      token_remade_in_loop_fixed,
      "hoisted",
    ),
    (
      "indexed_in_loop",
      indexed_read_in_loop,
      indexed_read_in_loop_fixed,
      "hoisted",
    ),
    (
      "broadcast_index",
      query_through_broadcast_index,
      query_after_update,
      None,
    ),
    ("full_slice", query_through_full_slice, query_after_update, None),
    ("whole_update", query_through_whole_update, query_after_update, None),
    ("sort_key", query_through_sort_key, query_after_update, None),
    (
      "max_minus_itself",
      query_through_max_minus_itself,
      query_after_update,
      None,
    ),
    ("negated_twice", query_through_negated_twice, query_after_update, None),
    (
      "unsigned_compare",
      query_through_unsigned_compare,
      query_after_update,
      None,
    ),
    ("unsigned_cond", query_through_unsigned_cond, query_after_update, None),
    (
      "bitcast_round_trip",
      query_through_bitcast_round_trip,
      query_after_update,
      None,
    ),
    ("flipped_stack", query_through_flipped_stack, query_after_update, None),
    ("padding", query_through_padding, query_after_update, None),
    ("empty_interior", query_through_empty_interior, query_after_update, None),
    (
      "negative_padding",
      query_through_negative_padding,
      query_after_update,
      None,
    ),
    ("loop_never_run", query_through_loop_never_run, query_after_update, None),
    (
      "remainder_by_one",
      query_through_remainder_by_one,
      query_after_update,
      None,
    ),
    ("padded_stack", query_through_padded_stack, query_after_update, None),
    (
      "broadcast_stack",
      query_through_broadcast_stack,
      query_after_update,
      None,
    ),
    (
      "transposed_stack",
      query_through_transposed_stack,
      query_after_update,
      None,
    ),
    (
      "dropped_scatter",
      query_through_dropped_scatter,
      query_after_update,
      None,
    ),
    (
      "overwriting_scatter",
      query_through_overwriting_scatter,
      query_after_update,
      None,
    ),
    ("equal_branches", query_through_equal_branches, query_after_update, None),
    (
      "overwritten_element",
      query_through_overwritten_element,
      query_after_update,
      None,
    ),
    (
      "read_used_as_an_index",
      read_used_as_an_index,
      read_used_as_an_index_fixed,
      None,
    ),
    (
      "wrapped_start",
      loop_from_a_wrapped_start,
      loop_from_a_wrapped_start_fixed,
      "hoisted",
    ),
    ("branch_picked", racy_branch_picked, racy_branch_picked_fixed, None),
    (
      "hidden_step",
      loop_stepped_by_a_hidden_constant,
      loop_stepped_by_a_hidden_constant_fixed,
      "hoisted",
    ),
    ("abs_below_zero", query_through_abs_below_zero, query_after_update, None),
    (
      "square_at_least_zero",
      query_through_square_at_least_zero,
      query_after_update,
      None,
    ),
    (
      "integer_dot_with_zeros",
      query_through_integer_dot_with_zeros,
      query_after_update,
      None,
    ),
    (
      "product_with_a_zero",
      query_through_product_with_a_zero,
      query_after_update,
      None,
    ),
    ("one_trip_loop", query_through_one_trip_loop, query_after_update, None),
    (
      "saturating_convert",
      racy_branch_after_a_saturating_convert,
      ordered_branch_after_a_convert,
      None,
    ),
    (
      "negated_twice_token",
      loop_reading_a_negated_twice_token,
      loop_reading_a_written_token,
      "hoisted",
    ),
    (
      "summed_token",
      loop_reading_a_summed_token,
      loop_reading_a_written_token,
      "hoisted",
    ),
    (
      "cancelled_token",
      loop_reading_a_cancelled_token,
      loop_reading_a_written_token,
      "hoisted",
    ),
    (
      "helper_cancelled_token",
      loop_reading_a_helper_cancelled_token,
      loop_reading_a_written_token,
      "hoisted",
    ),
    ("argmax_of_one", query_through_argmax_of_one, query_after_update, None),
    (
      "power_below_zero",
      query_through_power_below_zero,
      query_after_update,
      None,
    ),
    (
      "arange_maximum_below_zero",
      query_through_arange_maximum_below_zero,
      query_after_update,
      None,
    ),
    (
      "abs_behind_a_slice",
      query_through_abs_behind_a_slice,
      query_after_update,
      None,
    ),
    (
      "abs_divided_by_one",
      query_through_abs_divided_by_one,
      query_after_update,
      None,
    ),
    (
      "constants_wrapping_to_zero",
      query_through_constants_wrapping_to_zero,
      query_after_update,
      None,
    ),
    (
      "loop_counted_down",
      query_through_loop_counted_down,
      query_after_update,
      None,
    ),
    ("capped_loop", query_through_capped_loop, query_after_update, None),
    (
      "clip_below_zero",
      query_through_clip_below_zero,
      query_after_update,
      None,
    ),
    (
      "square_by_power",
      query_through_square_by_power,
      query_after_update,
      None,
    ),
    (
      "maximum_with_a_computed_zero",
      query_through_maximum_with_a_computed_zero,
      query_after_update,
      None,
    ),
    (
      "helper_product_wrapping",
      query_through_helper_product_wrapping,
      query_after_update,
      None,
    ),
    (
      "helper_passed_a_product",
      query_through_helper_passed_a_product,
      query_after_update,
      None,
    ),
    (
      "reshaped_product_wrapping",
      query_through_reshaped_product_wrapping,
      query_after_update,
      None,
    ),
    ("zero_kernel", query_through_zero_kernel, query_after_update, None),
    (
      "one_trip_loop_zero",
      query_through_one_trip_loop_zero,
      query_after_update,
      None,
    ),
    (
      "abs_below_one_trip_zero",
      query_through_abs_below_one_trip_zero,
      query_after_update,
      None,
    ),
    (
      "abs_shifted_back",
      query_through_abs_shifted_back,
      query_after_update,
      None,
    ),
    (
      "one_trip_counter",
      one_trip_loop_reading_through_its_counter,
      one_trip_loop_reading_the_update,
      None,
    ),
    (
      "summed_copies_wrapping",
      query_through_summed_copies_wrapping,
      query_after_update,
      None,
    ),
    (
      "scan_once_handing_on_the_update",
      scan_once_handing_on_the_update,
      scan_once_reading_the_update,
      None,
    ),
    (
      "dot_of_copies_wrapping",
      query_through_dot_of_copies_wrapping,
      query_after_update,
      None,
    ),
  )
  def test_reported_and_fixed(self, program, fixed, kind):
    found = _races(program)
    report = format_races(found)
    self.assertNotEmpty(found, report)
    if kind is not None:
      self.assertIn(kind, [r.xla_change.kind for r in found], report)
    if kind == "hoisted":
      self.assertIn("side-effecting", report)
    # The wrong run, where this XLA's optimized module shows the change
    # (another XLA may not make it: "may").
    shown = any(
      r.xla_change is not None
      and r.xla_change.seen
      and r.xla_change.kind in ("hoisted", "merged", "deleted")
      for r in found
    )
    # On jax 0.10.2 (the dev environment's) every shape but the where one
    # runs wrong in every run, measured, whatever the module shows.
    measured = test_util.jax_version()[:2] == (0, 10)
    if shown or (measured and program is not query_behind_where):
      wrong = _jit_values(jax.jit(program))
      self.assertNotIn(_program_order_value(program), wrong)
    # The fix: right in every run, and nothing reported.
    self.assertEqual(_races(fixed), [], format_races(_races(fixed)))
    self.assertEqual(
      _jit_values(jax.jit(fixed)), [_program_order_value(fixed)] * 3
    )


class ReportedByTheRuleTest(parameterized.TestCase):
  """Loops this XLA keeps (it folds their items after moving reads), right
  today, which another may break as it breaks the same loop over items it
  sees are zeros: each is reported as a read XLA may move out of its loop,
  and its fix, the read marked side-effecting, is right and clean."""

  @parameterized.named_parameters(
    ("cancelled", scan_over_cancelled, lambda s: jnp.full(3, s) - s),
    (
      "remainders",
      scan_over_remainders,
      lambda s: jnp.stack([lax.rem(s, 1)] * 3),
    ),
  )
  def test_reported_and_fixed(self, program, make_xs):
    found = _races(program)
    report = format_races(found)
    self.assertIn("hoisted", [r.xla_change.kind for r in found], report)
    # The control: over items XLA sees are zeros, the read leaves the
    # loop and reads the slot before every write (0.0 for 3.0).
    control = scan_over_literal_zeros
    self.assertNotEmpty(_races(control))
    if test_util.jax_version()[:2] == (0, 10):
      wrong = _jit_values(jax.jit(control))
      self.assertNotIn(_program_order_value(control), wrong)
    fixed = scan_over("fixed", make_xs, read=side_effecting_read)
    self.assertEqual(_races(fixed), [], format_races(_races(fixed)))
    self.assertEqual(
      _jit_values(jax.jit(fixed)), [_program_order_value(program)] * 3
    )


class PinnedIndexTest(parameterized.TestCase):
  """An index orders only where it surely takes two starts: one a clamp
  pins (``min(abs(w), 0)``, or ``abs(w) + 7`` of a table of three, which
  takes two only where ``abs`` of the least integer wraps) is reported, as
  a compiler may fold it; its control, ``abs(w) % 3``, is proved."""

  @parameterized.named_parameters(
    ("low", query_through_index_pinned_low),
    ("high", query_through_index_pinned_high),
  )
  def test_reported_and_control_proved(self, program):
    self.assertNotEmpty(_races(program))
    control = query_through_table_of_differing_elements
    self.assertEqual(_races(control), [], format_races(_races(control)))


class RowsOfARepeatedRangeTest(parameterized.TestCase):
  """A range repeated along another dimension has rows that are alike:
  reported, as a compiler may move the read out of the loop; its control,
  the range repeated along its own dimension (`scan_over_tiled_range`),
  has items that differ and is proved."""

  @parameterized.named_parameters(
    ("broadcast", scan_over_rows_of_a_broadcast_range),
    ("stacked", scan_over_rows_of_a_stacked_range),
  )
  def test_reported_and_control_proved(self, program):
    found = _races(program)
    self.assertIn(
      "hoisted", [r.xla_change.kind for r in found], format_races(found)
    )
    control = scan_over_tiled_range
    self.assertEqual(_races(control), [], format_races(_races(control)))


class ProgramOrderOrdersFoldedWaitsTest(parameterized.TestCase):
  """`in_program_order` of each wait through a value XLA folds: it
  entangles the query after the update (it once took ``jnp.maximum(w, w) -
  w`` for an order and added nothing: 0.0 where program order gives 5.0);
  without it, each is wrong (`ReportedWithAWorkingFixTest`)."""

  @parameterized.named_parameters(
    ("max_minus_itself", query_through_max_minus_itself),
    ("negated_twice", query_through_negated_twice),
    ("remainder_by_one", query_through_remainder_by_one),
    ("broadcast_index", query_through_broadcast_index),
    ("sort_key", query_through_sort_key),
  )
  def test_ordered_and_right(self, program):
    ordered = in_program_order(program)
    self.assertEqual(_races(ordered), [], format_races(_races(ordered)))
    self.assertEqual(
      _jit_values(jax.jit(ordered)), [_program_order_value(program)] * 3
    )


class NoFalseReportTest(parameterized.TestCase):
  """Programs ordered by data on every path stay clean; their controls,
  the same programs without that order, are reported."""

  @parameterized.named_parameters(
    ("one_trip_loop", one_trip_loop, one_trip_loop_unordered),
    ("one_trip_scan", one_trip_scan, one_trip_loop_unordered),
    ("state_from_outside", state_from_outside, state_from_outside_unordered),
    ("constant_predicate", constant_predicate, constant_predicate_unordered),
    ("scaled", read_then_write_scaled, read_then_write_scaled_unordered),
    (
      "float_product_with_zero",
      write_after_a_float_product_with_zero,
      write_after_an_integer_product_with_zero,
    ),
    (
      "float_difference",
      write_after_a_float_difference,
      write_after_an_integer_difference,
    ),
    (
      "reshaped_stack",
      query_through_reshaped_stack,
      query_through_reshaped_stack_other,
    ),
    (
      "constant_update",
      query_through_constant_update,
      query_through_constant_update_other,
    ),
    (
      "constant_scatter",
      query_through_constant_scatter,
      query_through_constant_scatter_other,
    ),
    (
      "last_scanned_write",
      query_after_last_scanned_write,
      query_after_first_scanned_write,
    ),
    ("map_over_two_slots", map_over_two_slots, map_over_one_slot_twice),
    ("take_in_bounds", take_in_bounds, take_out_of_bounds),
    ("branch_not_picked", racy_branch_not_picked, racy_branch_picked),
    ("nested_flat", query_through_nested_flat, query_through_nested_flat_other),
    (
      "take_of_a_stack",
      query_through_take_of_a_stack,
      query_through_take_of_a_stack_other,
    ),
    (
      "counted_token",
      loop_reading_a_counted_token,
      loop_reading_a_negated_twice_token,
    ),
    (
      "last_rows_write",
      query_after_the_last_rows_write,
      query_of_the_last_rows_slot,
    ),
    (
      "square_root_below_zero",
      query_through_square_root_below_zero,
      query_through_abs_below_zero,
    ),
    ("arange_mask", query_through_arange_mask, query_through_abs_below_zero),
    (
      "summed_copies_not_wrapping",
      query_through_summed_copies_not_wrapping,
      query_through_summed_copies_wrapping,
    ),
    ("scan_over_ranges", scan_over_ranges, scan_over_literal_zeros),
    ("abs_and_one", query_through_abs_and_one, query_through_abs_below_zero),
    ("negated_abs", query_through_negated_abs, query_through_negated_twice),
    (
      "abs_minus_one",
      query_through_abs_minus_one,
      query_through_abs_shifted_back,
    ),
    (
      "exp_minus_a_hundred",
      query_through_exp_minus_a_hundred,
      query_through_abs_shifted_back,
    ),
    (
      "product_by_an_array",
      query_through_product_by_an_array,
      query_through_constants_wrapping_to_zero,
    ),
    (
      "product_by_a_shifted_constant",
      query_through_product_by_a_shifted_constant,
      query_through_constants_wrapping_to_zero,
    ),
    (
      "table_of_differing_elements",
      query_through_table_of_differing_elements,
      query_through_table_of_one_value,
    ),
    (
      "range_table",
      query_through_range_table,
      query_through_one_element_table,
    ),
    (
      "repeated_ranges",
      scan_over_repeated_ranges,
      scan_over_repeated_zeros,
    ),
    ("tiled_range", scan_over_tiled_range, scan_over_tiled_zeros),
    (
      "gathered_table",
      query_through_gathered_table,
      query_through_gathered_one_value,
    ),
    (
      "deep_checksums",
      deep_checksums(700),
      query_through_abs_below_zero,
    ),
  )
  def test_clean_and_control_reported(self, program, control):
    self.assertEqual(_races(program), [], format_races(_races(program)))
    self.assertEqual(
      _jit_values(jax.jit(program)), [_program_order_value(program)] * 3
    )
    self.assertNotEmpty(_races(control))


class ExplanationTest(absltest.TestCase):
  def test_a_used_read_xla_removed_is_merged_not_deleted(self):
    # XLA folds the second read's operand to the slot and merges the read
    # into the first one; its result is returned, so "its result is
    # unused" (as it said) was wrong.
    found = _races(query_through_broadcast_stack)
    self.assertNotEmpty(found)
    kinds = [r.xla_change.kind for r in found if r.xla_change is not None]
    self.assertNotIn("deleted", kinds, format_races(found))
    # The control: a write whose result nothing uses is deleted.
    deleted = [r.xla_change.kind for r in _races(deleted_write)]
    self.assertIn("deleted", deleted)


class HelperPlacesTest(absltest.TestCase):
  def test_the_pair_is_in_the_order_the_program_reaches_the_places(self):
    found = _races(helper_before_and_after)
    self.assertLen(found, 1, format_races(found))
    (race,) = found
    self.assertEqual(race.first.target, example_store.WRITE_SLOT_TARGET)
    self.assertEqual(race.second.target, example_store.READ_SLOT_TARGET)
    self.assertTrue(race.order_known)
    wrong = _jit_values(jax.jit(helper_before_and_after))
    self.assertNotIn(_program_order_value(helper_before_and_after), wrong)

  def test_a_helper_at_two_places_is_reported_once_per_pair(self):
    # Each call of the helper named by its place, as the optimized module
    # names its inlined copies: the pairs it reports are not reported
    # again from the program (once 4 pairs for 2, two of them "merged").
    found = _races(bump_twice)
    report = format_races(found)
    self.assertLen(found, 2, report)
    self.assertNotIn("merged", report)
    wrong = _jit_values(jax.jit(bump_twice))
    self.assertNotIn(_program_order_value(bump_twice), wrong)
    self.assertEqual(_races(bump_twice_fixed), [])
    self.assertEqual(
      _jit_values(jax.jit(bump_twice_fixed)),
      [_program_order_value(bump_twice_fixed)] * 3,
    )

  def test_a_merged_helper_call_names_both_places(self):
    found = _races(query_twice_around_a_write)
    report = format_races(found)
    merged = [
      r for r in found if r.xla_change and r.xla_change.kind == "merged"
    ]
    self.assertNotEmpty(merged, report)
    lines = {race.first.location for race in merged} | {
      race.second.location for race in merged
    }
    self.assertGreaterEqual(len(lines), 2, report)
    self.assertRegex(report, r"with an identical call at \S+:\d+")


class CasesTest(absltest.TestCase):
  def test_every_opcode_with_a_case_is_in_the_special_table(self):
    # `_instruction` skips its cases for an opcode not in `_SPECIAL` (a
    # shortcut for speed): a case added without its row would silently
    # never run (the new folds of issue 76 did not, after a merge).
    source = inspect.getsource(may_order.MayOrder._instruction)
    named = set(re.findall(r'opcode == "([\w-]+)"', source))
    for table in re.findall(r"opcode in (_[A-Z_]+)", source):
      named |= set(getattr(may_order, table))
    self.assertNotEmpty(named)
    self.assertEqual(named - may_order._SPECIAL, set())


class MayOrderTest(absltest.TestCase):
  """The evaluation itself, on the module before optimization."""

  def _may(self, fn):
    text = lowered_hlo_text(jax.jit(fn).lower(jnp.int32(SLOT)))
    assert text is not None
    return MayOrder(parse(text, optimized=False), is_user_native_call)

  def test_a_helper_called_at_two_places_is_two_calls(self):
    may = self._may(helper_in_loop)
    reads = [
      i
      for i in may.instances.values()
      if i.instruction.target == example_store.READ_SLOT_TARGET
    ]
    self.assertLen(reads, 2)
    self.assertEqual(reads[0].instruction, reads[1].instruction)
    self.assertEqual([len(r.loops) for r in reads], [0, 1])

  def test_trip_counts(self):
    self.assertEqual([loop.trips for loop in self._may(read_merged).loops], [3])
    self.assertEqual(
      [loop.trips for loop in self._may(one_trip_scan).loops], [1]
    )

    def traced_bound(slot):
      return lax.fori_loop(0, slot, lambda i, c: c + read_slot(slot), 0.0)

    self.assertEqual(
      [loop.trips for loop in self._may(traced_bound).loops], [None]
    )
    # A counter that may wrap before it reaches its limit: not known.
    self.assertEqual(
      [loop.trips for loop in self._may(wrapping_counter).loops], [None]
    )
    self.assertNotEmpty(_races(wrapping_counter))

  def test_a_deleted_write_is_no_live_call(self):
    may = self._may(deleted_write)
    (write,) = [
      i
      for i in may.instances.values()
      if not i.side_effect
      and i.instruction.target == example_store.WRITE_SLOT_TARGET
    ]
    self.assertTrue(may.deletable(write))
    may = self._may(kept_write)
    (write,) = [
      i
      for i in may.instances.values()
      if i.instruction.target == example_store.WRITE_SLOT_TARGET
    ]
    self.assertFalse(may.deletable(write))


HELPER_PROGRAM = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  from jax import lax
  from entangle_jax import entangle
  from entangle_jax.testing import read_slot, write_slot


  @jax.jit
  def query(token):
    return read_slot(token)


  def helper_in_loop(slot):
    first = query(slot)

    def body(i, total):
      value = query(slot)
      write_slot(entangle(slot, value), total + value + 1.0)
      return total + value

    return lax.fori_loop(0, 3, body, first)


  jax.jit(helper_in_loop)(jnp.int32(3)).block_until_ready()
  """
)


class SameAnswerFromADumpTest(absltest.TestCase):
  """The dump command reads the module before optimization beside the
  optimized one: the same pair, in every format."""

  def test_every_format_reports_the_helper_in_a_loop(self):
    root = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, root, ignore_errors=True)
    (root / "helper.py").write_text(HELPER_PROGRAM)
    dump = root / "dump"
    env = dict(
      test_util.child_env(),
      XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_as_text",
    )
    preloaded_child.run(
      ["helper.py"], timeout=180, env=env, cwd=root
    ).check_returncode()

    def check(*flags):
      return preloaded_child.run(
        ["-m", "entangle_jax.testing", str(dump), *flags],
        timeout=180,
        env=test_util.child_env(),
        cwd=root,
      )

    text = check()
    self.assertEqual(text.returncode, 1, text.stdout + text.stderr)
    self.assertIn("out of its loop", text.stdout)
    records = json.loads(check("--format", "json").stdout)
    codes = [r["code"] for m in records["modules"] for r in m["races"]]
    self.assertIn("EJ008", codes)
    sarif = json.loads(check("--format", "sarif").stdout)
    rules = [r["ruleId"] for run in sarif["runs"] for r in run["results"]]
    self.assertIn("EJ008", rules)


if __name__ == "__main__":
  np.set_printoptions(precision=3)
  absltest.main()
