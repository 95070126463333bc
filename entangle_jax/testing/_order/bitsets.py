"""Sets of small integers as Python ints: one bit per member.

`entangle_jax.testing._order.reach` keeps, per op, the set of ops ordered before
and after it as such masks: a union of two sets is one big-integer OR, done
a machine word at a time.
"""

from __future__ import annotations

from collections.abc import Iterable


def mask_of(positions: Iterable[int]) -> int:
  """The int whose set bits are `positions`, in time linear in them."""
  positions = list(positions)
  if not positions:
    return 0
  raw = bytearray(max(positions) // 8 + 1)
  for p in positions:
    raw[p >> 3] |= 1 << (p & 7)
  return int.from_bytes(raw, "little")


def positions(mask: int) -> list[int]:
  """The set bits of `mask`, ascending."""
  if not mask:
    return []
  if mask.bit_count() <= 16:  # Few members: peel the lowest bit off.
    found = []
    while mask:
      low = mask & -mask
      found.append(low.bit_length() - 1)
      mask ^= low
    return found
  text = bin(mask)[:1:-1]  # Bit 0 first.
  found = []
  at = text.find("1")
  while at >= 0:
    found.append(at)
    at = text.find("1", at + 1)
  return found
