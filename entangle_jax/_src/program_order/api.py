"""The public transform: tracing `f`, arguments in, results out."""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable
from typing import Any, overload

import jax
import numpy as np
from jax.extend import core as jex_core

from entangle_jax._src import arrays, jax_compat
from entangle_jax._src.program_order import natives
from entangle_jax._src.program_order.interpreter import Context
from entangle_jax._src.targets import sources
from entangle_jax._src.targets.declaration import Declarations


@overload
def in_program_order(
  f: Callable[..., Any],
  *,
  distinct_arguments: bool = False,
  collectives: bool | None = None,
) -> Callable[..., Any]: ...


@overload
def in_program_order(
  f: None = None,
  *,
  distinct_arguments: bool = False,
  collectives: bool | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...


def in_program_order(
  f: Callable[..., Any] | None = None,
  *,
  distinct_arguments: bool = False,
  collectives: bool | None = None,
) -> Any:
  """Returns `f` with every native call on one object in program order.

  ``jax.jit(in_program_order(step))`` computes what ``jax.jit(step)``
  computes, but its native calls run in the order in which the Python
  program made them, as far as they may touch one object. A native call is
  a ``jax.ffi.ffi_call``, an ``io_callback`` or ``jax.debug.callback``, or
  a binding's own primitive whose lowering emits custom calls (klujax's,
  jax-finufft's, mpi4jax's): every first-order primitive that is not
  JAX's own is lowered alone to see. ``pure_callback`` is not one: its user
  declares it pure, and the race check does not look at it either.

  In a program of several processes (``jax.distributed``:
  ``jax.process_count() > 1``), JAX's explicit collectives (``lax.psum``,
  ``all_gather``, ``ppermute``, ``psum_scatter``, ``all_to_all`` and
  their kin) are ordered too, as native calls that write anything: every
  process must make them in one order, and XLA, left free, may schedule
  them apart in each. This keeps each process's program order; whether
  the processes' programs agree is `entangle_jax.testing.races_across`'s
  to check. One process schedules its collectives once for all its
  devices, so there they are left free (XLA may then merge, overlap or
  delete them), unless ``collectives=True``.

  * a read runs after every earlier write of an object it may touch;
  * a write runs after every earlier read and write of such an object;
  * reads between the same two writes stay free to run concurrently.

  What a call touches is what its target's declaration says
  (``declare_target``, ``[tool.entangle-jax]``, ...): its mode and its object
  operand. A target nothing declares is taken to write anything: it is
  ordered against every other native call. Calls proven to touch different
  objects (different integer constants, or values a declared
  ``returns_object`` result hands back for them) are not ordered. JAX's,
  jaxlib's and XLA's own kernels are left alone.

  Two array arguments may hold one handle (a caller may pass one slot
  twice), so by default calls on different arguments are ordered as calls
  on one object would be. ``distinct_arguments=True`` is the caller's word
  that they never do: each array argument (each leaf of the arguments'
  pytrees) names its own object, as a named ``Resource`` does, so calls on
  two arguments are not ordered with each other and run as XLA schedules
  them; calls on elements of one argument still follow the declarations
  (``distinct_elements``). The word is recorded in the module as a named
  ``Resource``'s is (each such call is made in the named scope
  ``entangle_jax:read:args[0]``, ``entangle_jax:write:kwargs['h']``, ...;
  quotes written ``%27`` there), so the race check reads it too. A value
  passed twice within a program is still one object; two arguments that
  hold one handle at run time race, which neither this nor the race check
  can see, and the sanitizer reports (`entangle_jax.testing.sanitize`: a
  contradiction).

  The order is made of `entangle` calls on each later call's object operand
  (operand 0 when none is declared), so it costs what ``entangle`` costs:
  none where data already orders two calls, one per call otherwise. Inside a
  ``scan`` or ``while_loop`` body, calls are ordered after the previous
  iteration's too: through the carry where it already does, else through
  one more int32 value in the carry.

  Works under ``jit``, eagerly, under ``jax.disable_jit()`` (where `f`
  runs as it is: each call runs before the next starts, but for the calls
  in a ``shard_map``'s body, which JAX compiles there too and XLA
  schedules unordered), with ``vmap`` and
  ``grad`` on either side, and through ``jax.export``. Inside it, calls in
  the higher-order primitives that have an ordering rule are ordered too
  (the list: "What it orders inside" on docs/fixing_races.md, generated
  from ``entangle_jax._src.program_order.rules``). Array arguments (leaves of
  pytrees) are traced; other leaves reach `f` as they are, as static
  values. `testing.races` of the compiled module is the proof of the result.

  Under ``grad`` on either side, a custom_vjp's backward pass runs after
  every call of the forward program and after the backward passes of
  custom_vjps called later (backward passes run in reverse program order).
  With ``grad`` outside, this is carried by one more float32 value threaded
  through each custom_vjp whose backward pass makes native calls and tied
  to the results by a custom identity; nothing is added without one.

  Under ``checkpoint``, a native call's result is saved and the call never
  made again in the backward pass (it would see a later state), with
  ``grad`` on either side.

  A call whose only result is a JAX token (a binding's primitive whose
  custom call returns a ``!stablehlo.token``) is waited for through that
  token: later calls are entangled after it as after an array.

  Not ordered, and it warns: later calls after a call that returns nothing
  (``jax.debug.callback``), with what to do (return an array or a token).
  A primitive that cannot be lowered alone warns, naming it, and is
  ordered as a call that may write anything; a call whose object operand
  its lowering computes is ordered against every other native call.

  Args:
    f: the function whose native calls to order. Without it,
      ``in_program_order(distinct_arguments=True)`` is a decorator.
    distinct_arguments: whether different array arguments hold different
      objects (see above). Keyword only.
    collectives: whether to order JAX's collectives as native calls (see
      above); None (the default): where ``jax.process_count() > 1`` when
      the function is traced. Keyword only.

  Returns:
    A function of `f`'s signature that returns what `f` returns (or,
    without `f`, a decorator that makes one).

  Raises:
    TypeError: `f` is not callable; or, when called, an argument is an
      array of a type JAX does not trace (the message names it).
    NotImplementedError: when called, `f` makes a native call inside a
      higher-order primitive this transform does not know (the message
      names it), or a native call with no operand to order it by (the
      message names its target and primitive).

  Warns:
    UserWarning: a native call that is not side-effecting may write but
      nothing uses its results, so XLA drops it (the message names the
      target); or later calls cannot be ordered after a call that returns
      nothing; or a primitive could not be lowered alone to see whether it
      makes a native call (the message names it); or a native call inside
      a ``shard_map`` over a mesh of more than one device may write an
      object the devices share, so its copies on two devices may race,
      which no order within one program can prevent (the message names
      the target; the race check reports such pairs across devices).
  """
  if not isinstance(distinct_arguments, bool):
    raise TypeError(
      "in_program_order: distinct_arguments must be True or False, not "
      f"{distinct_arguments!r}"
    )
  if collectives is not None and not isinstance(collectives, bool):
    raise TypeError(
      "in_program_order: collectives must be True, False or None, not "
      f"{collectives!r}"
    )
  if f is None:
    return functools.partial(
      in_program_order,
      distinct_arguments=distinct_arguments,
      collectives=collectives,
    )
  if not callable(f):
    raise TypeError(f"in_program_order: f must be callable, not {f!r}")

  # Name and docstring only: `f`'s attributes (a pmap's or jit's own
  # ``lower``, ``trace``) would lower `f`, not the ordered function.
  @functools.wraps(f, updated=())
  def ordered(*args, **kwargs):
    order = jax.process_count() > 1 if collectives is None else collectives
    token = natives.ORDER_COLLECTIVES.set(order)
    try:
      return _ordered(args, kwargs)
    finally:
      natives.ORDER_COLLECTIVES.reset(token)

  if not hasattr(f, "__name__"):
    # A functools.partial or a callable object: named for what it calls,
    # as jax.jit names their modules (jit_f, not jit_ordered).
    inner = getattr(f, "func", type(f))
    name = getattr(inner, "__name__", "ordered")
    ordered.__name__ = ordered.__qualname__ = name

  def _ordered(args, kwargs):
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    paths = _paths((args, kwargs))
    for leaf, path in zip(leaves, paths, strict=True):
      if _is_array_like(leaf) and not arrays.is_array(leaf):
        raise TypeError(
          f"in_program_order: argument {path} is an array of a type JAX "
          f"does not trace ({type(leaf).__name__} of dtype "
          f"{getattr(leaf, 'dtype', '?')}); pass a JAX or NumPy array of a "
          "supported dtype, or something that is not an array"
        )
    if jax.config.jax_disable_jit:  # ty: ignore[missing-attribute]
      return f(*args, **kwargs)  # Each call runs before the next starts.
    # Arrays are traced; anything else (Python scalars included, as
    # jit's static arguments arrive) reaches `f` as it is.
    dynamic = [_is_array_like(leaf) for leaf in leaves]
    out_tree, static_out = [], {}

    def flat(*traced):
      it = iter(traced)
      full = [
        next(it) if d else leaf for leaf, d in zip(leaves, dynamic, strict=True)
      ]
      a, k = jax.tree_util.tree_unflatten(treedef, full)
      out_leaves, out_def = jax.tree_util.tree_flatten(f(*a, **k))
      out_tree.append(out_def)
      arrays_out = []
      for index, leaf in enumerate(out_leaves):
        if _is_array_like(leaf):
          arrays_out.append(leaf)
        else:
          static_out[index] = leaf
      return arrays_out

    traced = [leaf for leaf, d in zip(leaves, dynamic, strict=True) if d]
    closed = jax.make_jaxpr(flat)(*traced)
    decls = _interned(sources.current())
    scopes = jax_compat.current_name_stack()
    if not natives.has_native_jaxpr(closed.jaxpr, decls, scopes=scopes):
      # Nothing to order: the traced program as it is, with none of the
      # evaluation's bookkeeping.
      outs = iter(jex_core.jaxpr_as_fun(closed)(*traced))
      result = [
        static_out[i] if i in static_out else next(outs)
        for i in range(out_tree[0].num_leaves)
      ]
      return jax.tree_util.tree_unflatten(out_tree[0], result)
    ctx = Context(decls, keys=natives.has_checkpoint(closed.jaxpr))
    if distinct_arguments:
      labels = [p for p, d in zip(paths, dynamic, strict=True) if d]
      ctx.values.name_arguments(traced, labels)
    with _collection_paused():
      outs = iter(ctx.link(ctx.run(closed.jaxpr, closed.consts, traced)))
    result = [
      static_out[i] if i in static_out else next(outs)
      for i in range(out_tree[0].num_leaves)
    ]
    ctx.warn_dropped(result)
    return jax.tree_util.tree_unflatten(out_tree[0], result)

  return ordered


@contextlib.contextmanager
def _collection_paused():
  """Python's cyclic garbage collector paused while the evaluation runs
  (and restarted after it if it ran before). The evaluation keeps nearly
  all it allocates to the end (the program it builds, and what it knows
  of each value and call): a full collection in its midst scans every
  object of the process and frees almost nothing. That was a fifth of
  its time for a program of 5,000 native calls. Reference counting still
  frees what it drops; cycles wait for the next collection."""
  if not gc.isenabled():
    yield
    return
  gc.disable()
  try:
    yield
  finally:
    gc.enable()


_DECLARATIONS: dict[Declarations, Declarations] = {}
"""Each value of the declarations seen: the object the transform's caches
were keyed with."""


def _interned(decls: Declarations) -> Declarations:
  """`decls`, as the object first seen with its value: the declarations
  are read afresh for each traced function, and the caches keyed by them
  (`natives`) then find their keys by identity, where an equal new object
  compared every declaration, at each native call."""
  return _DECLARATIONS.setdefault(decls, decls)


def _paths(tree: Any) -> list[str]:
  (args, kwargs) = tree
  found = []
  for path, _ in jax.tree_util.tree_leaves_with_path(args):
    found.append("args" + jax.tree_util.keystr(path))
  for path, _ in jax.tree_util.tree_leaves_with_path(kwargs):
    found.append("kwargs" + jax.tree_util.keystr(path))
  return found


def _is_array_like(leaf: Any) -> bool:
  """An array (JAX, NumPy, a NumPy scalar, a tracer): what is traced."""
  return isinstance(leaf, jax.Array | np.ndarray | np.generic) or hasattr(
    leaf, "__jax_array__"
  )
