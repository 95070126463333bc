"""Programs with a host callback between a write and a read of one slot of
the example store, and the callbacks that record when they ran: shared by
the tests of `in_program_order` on calls that return nothing
(program_order/program_order_no_result_test.py) and of the race report's
fixes for them (findings/suggested_fix_callbacks_test.py)."""

import jax
import numpy as np
from jax.experimental import io_callback

from entangle_jax import testing
from entangle_jax.testing import example_store

EVENTS: list[tuple[int, tuple]] = []
"""What each host callback saw: the store's sequence number when it ran
(one counter with `call_log`'s), and the shapes of its arguments."""


def log(*args):
  EVENTS.append(
    (example_store.next_sequence_number(), tuple(np.shape(a) for a in args))
  )


def log_int(*args):
  log(*args)
  return np.int32(0)


def debug_between(slot, value):
  testing.write_slot(slot, value)
  jax.debug.callback(log, value)
  return testing.read_slot(slot)  # The slot as given: no data order.


def io_between(slot, value):
  testing.write_slot(slot, value)
  io_callback(log, None, value)
  return testing.read_slot(slot)
