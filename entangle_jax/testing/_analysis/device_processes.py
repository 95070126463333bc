"""Which process each device of an SPMD module belongs to: what decides
whether copies of one call on two of its devices can race on
process-wide state.

The device rule (`OrderAnalysis.races`, `Race.across_devices`) reports
copies of one call on two devices of an SPMD module, for targets whose
object may be one for every device (``devices = "shared"``, or nothing
declared). Such an object is at most process-wide: Python state, a host
library's globals, what a host callback touches. Two devices in
different processes (``jax.distributed``, one process per host or per
accelerator) each have their own copy, so their calls cannot race on it.
The rule therefore applies only where some process holds two of the
module's devices; where each device is in a process of its own, its
pairs are left out, with `conflict_rule.APART_REASON` (as a declared safe pair's
would be, so that reports count them and say why).

The map comes from a ``jax.stages.Compiled`` (its devices'
``process_index``, `of_compiled`), or from what the user says
(`ProcessMap`, the command's ``--processes``: a count of processes over
which the devices of each module are split evenly, in device order, or
an explicit process index per device).
"""

from __future__ import annotations

import dataclasses
from typing import Any

FLAG = "--processes"
"""The command's flag that gives the map for dumped modules."""

COMPILED_SOURCE = "the process_index of the Compiled's devices"


@dataclasses.dataclass(frozen=True)
class ProcessMap:
  """Which process runs each device of a module: either `count` processes,
  over which a module's devices are split evenly in device order (the
  first process holds the first devices, as ``jax.distributed`` numbers
  them), or `indices`, each device's process index, in device order.

  Raises:
    ValueError: neither or both given, a count below 1, or an index below
      0 (the message names `source`).
  """

  count: int | None = None
  indices: tuple[int, ...] | None = None
  source: str = FLAG
  """Where the map came from, as errors and reports name it."""

  def __post_init__(self):
    if (self.count is None) == (self.indices is None):
      raise ValueError(f"{self.source}: give a count or one index per device")
    if self.count is not None and self.count < 1:
      raise ValueError(
        f"{self.source}: the number of processes must be 1 or more, not "
        f"{self.count}"
      )
    if self.indices is not None and (not self.indices or min(self.indices) < 0):
      raise ValueError(
        f"{self.source}: each device's process index must be 0 or more, "
        f"not {list(self.indices)}"
      )

  def for_devices(self, devices: int) -> tuple[int, ...]:
    """Each of a module's `devices` devices' process index.

    Raises:
      ValueError: a count that does not divide `devices`, or a list of
        another length than `devices` (the message names `source`).
    """
    if self.indices is not None:
      if len(self.indices) != devices:
        raise ValueError(
          f"{self.source}: the module runs on {devices} devices, but "
          f"{len(self.indices)} process indices were given (one per device)"
        )
      return self.indices
    assert self.count is not None
    if devices % self.count:
      # An example of the form, over the processes asked for.
      example = ",".join(str(k * self.count // devices) for k in range(devices))
      raise ValueError(
        f"{self.source} {self.count}: the module runs on {devices} devices, "
        f"which do not split evenly over {self.count} processes (give one "
        "process index per device instead, each device's process in order: "
        f"{FLAG} {example}, say)"
      )
    each = devices // self.count
    return tuple(k // each for k in range(devices))

  def __str__(self) -> str:
    """As a report names it: ``--processes 2``, ``--processes 0,1``, or
    ``the process_index of the Compiled's devices (0, 1)``."""
    if self.count is not None:
      return f"{self.source} {self.count}"
    indices = self.indices or ()
    if self.source == FLAG:
      return f"{FLAG} {','.join(map(str, indices))}"
    return f"{self.source} ({', '.join(map(str, indices))})"


def parse(value: str) -> ProcessMap:
  """The ``--processes`` value `value`: a count (``2``) or one process
  index per device, comma-separated (``0,0,1,1``).

  Raises:
    ValueError: anything else (the message names the flag and `value`).
  """
  words = [w.strip() for w in value.split(",")]
  if not all(w.isdigit() for w in words):
    raise ValueError(
      f"{FLAG}: give a number of processes (2) or one process index per "
      f"device (0,0,1,1), not {value!r}"
    )
  if len(words) == 1:
    return ProcessMap(count=int(words[0]))
  return ProcessMap(indices=tuple(int(w) for w in words))


def of_compiled(compiled: Any) -> ProcessMap | None:
  """The map of a ``jax.stages.Compiled``: each of the devices its
  shardings name, in device id order, with its ``process_index``; None
  for anything else (text, a ``Lowered``), or when it names no device."""
  if isinstance(compiled, str) or not hasattr(compiled, "input_shardings"):
    return None
  import jax

  devices: dict[int, Any] = {}
  for name in ("input_shardings", "output_shardings"):
    try:
      shardings = jax.tree_util.tree_leaves(getattr(compiled, name))
    except Exception:  # A Compiled without them: nothing is claimed.
      continue
    for sharding in shardings:
      for device in getattr(sharding, "device_set", ()):
        devices[device.id] = device
  if not devices:
    return None
  return ProcessMap(
    indices=tuple(devices[k].process_index for k in sorted(devices)),
    source=COMPILED_SOURCE,
  )


def apart(processes: tuple[int, ...]) -> bool:
  """Whether every device is in a process of its own: then no two of the
  module's devices share process-wide state."""
  return len(set(processes)) == len(processes)
