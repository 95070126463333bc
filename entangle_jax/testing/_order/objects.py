"""`ObjectRef`: the native object a call's operand names, as far as the
module proves it.

A handle is a value at run time, so the analysis can prove two handles the
same (one HLO value, followed back through everything that passes it on:
`entangle_jax.testing._order.identity`) but needs evidence to call two
different: `distinct`.
"""

from __future__ import annotations

import dataclasses

from entangle_jax._src import conflict_rule

Root = tuple
"""Where an operand's value comes from: ``("constant", literal)`` for a
constant, ``("value", computation, instruction, path)`` for the result
(element `path` of a tuple) of an instruction the analysis cannot see
through: an entry parameter, a native call, a dynamic slice..."""


@dataclasses.dataclass(frozen=True)
class ObjectRef:
  """The object one call's operand names.

  Attributes:
    root: the value the operand holds (`Root`).
    element: the one element of `root`'s array the operand holds (a
      static slice of an array of handles), or None for all of `root`.
    distinct_elements: whether the call's declaration says that different
      elements of one array name different objects.
    scalar: whether the operand is a single element (a rank-0 or
      one-element array): a constant scalar names one object.
  """

  root: Root
  element: int | None = None
  distinct_elements: bool = False
  scalar: bool = False
  tiled: bool = False
  """Whether `root` is an entry parameter split over the devices of an
  SPMD module: each device holds other elements of it."""
  replicated: bool = False
  """Whether `root` is an entry parameter that the module records as the
  same on every device (``sharding={replicated}``)."""
  per_device: bool = False
  """Whether `root` differs on each device of an SPMD module by
  construction: a value every device holds alike, offset by a one-to-one
  function of the device's number (``partition-id``, or the element of an
  ``iota`` it picks): ``h + jnp.arange(n)`` split over the devices, or
  ``h + axis_index``."""
  label: str = dataclasses.field(default="", compare=False)
  """How reports name `root`: the argument's name for an entry parameter
  that JAX named, else the instruction (``%add.3``)."""

  def same(self, other: ObjectRef) -> bool:
    """Whether the two provably name (or share) one object: one value, and
    the same element of it, or all of it."""
    return self.root == other.root and (
      self.element is None
      or other.element is None
      or self.element == other.element
    )

  def distinct(self, other: ObjectRef) -> bool:
    """Whether there is evidence that the two name different objects, as
    `entangle_jax._src.conflict_rule` counts it: different scalar integer
    constants, or different elements of one array where both calls
    declare distinct elements distinct."""
    if self.root[0] == "constant" and other.root[0] == "constant":
      a, b = self.constant_handle(), other.constant_handle()
      return (
        a is not None
        and b is not None
        and conflict_rule.distinct_constants({a}, {b})
      )
    return (
      self.root == other.root
      and self.element is not None
      and other.element is not None
      and conflict_rule.disjoint_elements(
        {self.element},
        {other.element},
        declared=self.distinct_elements and other.distinct_elements,
      )
    )

  def constant_handle(self) -> int | None:
    """The integer a constant scalar operand holds, or None (not a
    constant, not one integer, or one element of a constant array)."""
    value = self.root[1] if self.root[0] == "constant" else None
    if not self.scalar or self.element is not None:
      return None
    return value if isinstance(value, int) else None

  @property
  def uniform(self) -> bool:
    """Whether `root` holds one value on every device of an SPMD module:
    a constant, or a replicated entry parameter."""
    return self.root[0] == "constant" or self.replicated

  def same_across_devices(self, other: ObjectRef) -> bool:
    """Whether the two provably name one object when they run on two
    different devices: `same`, and a value that every device holds
    alike."""
    return self.same(other) and self.uniform and other.uniform

  def distinct_across_devices(self, other: ObjectRef) -> bool:
    """Whether there is evidence that the two name different objects when
    they run on two different devices of one SPMD module: `distinct`'s,
    or different shards of one split parameter declared to hold distinct
    handles, or one value built to differ on each device (`per_device`).
    (The same value on two devices is not one object unless it is a
    constant; without evidence, the two may be one.)"""
    if self.root == other.root and self.tiled and other.tiled:
      return self.distinct_elements and other.distinct_elements
    if self.root == other.root and self.per_device and other.per_device:
      return self.element == other.element  # One value, another per device.
    return self.distinct(other)

  def may_differ_by_element(self, other: ObjectRef) -> bool:
    """Whether the two are different elements of one array, which only a
    ``distinct_elements`` declaration tells apart."""
    return self.root == other.root and (
      self.tiled
      or (
        self.element is not None
        and other.element is not None
        and self.element != other.element
      )
    )

  def __str__(self) -> str:
    if self.root[0] == "constant":
      return f"constant {self.root[1]}"
    _, _, name, path = self.root
    text = (self.label or f"%{name}") + "".join(f"{{{p}}}" for p in path)
    return text if self.element is None else f"{text}[{self.element}]"
