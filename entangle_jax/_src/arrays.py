"""What an array leaf is: the one check that `entangle` and `Resource` make
of the leaves they are given."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_CONVERTIBLE = (bool, int, float, complex, np.generic, np.ndarray)


class NotAnArrayError(TypeError):
  """`leaf` is no array JAX supports; `reason` says why, when JAX did
  (``" (...)"``, or empty)."""

  def __init__(self, leaf: Any, reason: str = ""):
    super().__init__(f"{type(leaf).__name__} is not an array{reason}")
    self.leaf = leaf
    self.reason = reason


def as_array(leaf: Any) -> jax.Array:
  """`leaf` as a ``jax.Array``: itself when it is one (a tracer too), else
  what ``jax.numpy.asarray`` makes of a scalar, a NumPy array or an object
  with ``__jax_array__``.

  Raises:
    NotAnArrayError: anything else, and values those conversions refuse
      (strings, objects, datetimes, masked arrays, Python ints too large
      for their dtype).
  """
  if isinstance(leaf, jax.Array):
    return leaf
  if isinstance(leaf, _CONVERTIBLE) or hasattr(leaf, "__jax_array__"):
    try:
      return jnp.asarray(leaf)
    except OverflowError as error:  # A Python int too large for its dtype.
      raise NotAnArrayError(leaf, f" ({error})") from error
    except TypeError as error:  # Strings, objects, datetimes.
      raise NotAnArrayError(leaf) from error
    except ValueError as error:  # Masked arrays: JAX's reason says what to do.
      raise NotAnArrayError(leaf, f" ({error})") from error
  raise NotAnArrayError(leaf)


def is_array(leaf: Any) -> bool:
  """Whether `as_array` accepts `leaf`."""
  try:
    as_array(leaf)
  except NotAnArrayError:
    return False
  return True
