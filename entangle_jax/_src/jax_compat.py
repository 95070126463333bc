"""Every JAX surface entangle_jax uses that is not JAX's stable public API.

One place to look when a JAX release moves something. Each name here is
exercised by tests/loading/private_api_test.py, which fails when the name
disappears or stops meaning what the package relies on.

Private (``jax._src``), for sharding (`entangle_jax._src.partitioning`):

* `register_custom_call_partitioner`: jaxlib's registry of Python
  partitioners for custom-call targets, which XLA's SPMD partitioner calls;
* `HloSharding`: the sharding objects that registry hands over and expects
  back;
* `register_plugin_callbacks`: runs a callback for every PJRT plugin
  (GPU), whose compiler has a partitioner registry of its own.

Experimental (``jax.experimental``), for Taylor-mode AD
(`entangle_jax._src.primitive`):

* `jet_rules`: the rule table of ``jax.experimental.jet``.

For `entangle_jax.in_program_order` (`entangle_jax._src.program_order`),
which evaluates a jaxpr again equation by equation:

* `equation_context`: ``source_info_util.user_context`` and the
  equation's ``ctx.manager``, as ``jax.core.eval_jaxpr`` enters them, so
  that what is bound again keeps the user's source lines and named scopes
  (which the race check reports and selects by);
* `current_name_stack`: the named scopes in effect, as text (what a
  ``Resource`` call records its access in);
* `ordered_effects` and `lowerable_effects`: JAX's registries of effect
  types (and `Effect`, the base class of effects); an equation with an
  effect of an ordered type is threaded by JAX on one token per effect,
  which XLA runs in program order
  (`ordered_effects_of` reads an equation's; a binding such as mpi4jax
  registers its effect type in both, as the tests' stand-in for it does);
* `bind_equation` and `equation_subfuns`: ``Primitive.get_bind_params``,
  which returns ``(subfuns, params)`` up to jax 0.7 and, later, the
  params alone, with the subfuns under the key ``"subfuns"`` where the
  primitive has any.

Public, but moved between releases, for token witnesses (`is_token`):

* ``AbstractToken``, the type of a token's abstract value, and ``Token``,
  an eager token (``jax.lax.create_token()``): ``jax.extend.core`` on
  jax 0.7 and newer, ``jax.core`` before.

Public extension API that the primitive is built on and that this module
does not wrap: ``jax.extend.core.Primitive``, ``jax.interpreters.ad``,
``jax.interpreters.batching``, ``jax.interpreters.mlir``, ``jax.ffi``.
"""

from __future__ import annotations

import contextlib

import jax
from jax._src import effects as _effects
from jax._src import source_info_util as _source_info_util
from jax._src import xla_bridge as _xla_bridge
from jax._src.lib import xla_client as _xla_client
from jax.core import Tracer
from jax.experimental import jet as _jet
from jax.extend import core as _jex_core

register_custom_call_partitioner = _xla_client.register_custom_call_partitioner
HloSharding = _xla_client.HloSharding
register_plugin_callbacks = _xla_bridge.register_plugin_callbacks
jet_rules = _jet.jet_rules
ordered_effects = _effects.ordered_effects
lowerable_effects = _effects.lowerable_effects
Effect = _effects.Effect  # jax.extend.core.Effect from jax 0.7 or so on.

try:
  from jax.extend.core import AbstractToken
except ImportError:  # jax 0.6 has it in jax.core only.
  from jax.core import AbstractToken  # ty: ignore[missing-module-member]
Token = _jex_core.Token


def is_token_aval(aval) -> bool:
  """Whether `aval` is the abstract value of a JAX token (a jaxpr's
  ``Tok``, a ``!stablehlo.token`` once lowered)."""
  return isinstance(aval, AbstractToken)


def is_token(value) -> bool:
  """Whether `value` is a JAX token: an eager one (what
  ``jax.lax.create_token()`` returns, or a binding's primitive that returns
  a token, run eagerly) or a traced one. A token holds no elements and has
  no dtype or shape; it only orders."""
  if isinstance(value, Token):
    return True
  return isinstance(value, Tracer) and is_token_aval(value.aval)


def ordered_effects_of(eqn) -> frozenset:
  """The effects of `eqn` that JAX orders by a token: two equations that
  share one run in program order, with no data between them."""
  found = getattr(eqn, "effects", None) or ()
  return frozenset(e for e in found if ordered_effects.contains(e))


def _bind_params(eqn) -> tuple[list, dict, bool]:
  """``(subfuns, params, subfuns_in_params)`` for re-binding `eqn`."""
  got = eqn.primitive.get_bind_params(eqn.params)
  if isinstance(got, tuple):
    subfuns, params = got
    return list(subfuns), dict(params), False
  params = dict(got)
  return list(params.get("subfuns", ())), params, True


def equation_subfuns(eqn) -> list:
  """The functions a higher-order equation binds with (a custom_vjp call's
  ``(fun, fwd, bwd)``), as ``lu.WrappedFun`` objects."""
  return _bind_params(eqn)[0]


def bind_equation(eqn, args):
  """Binds `eqn`'s primitive to `args` with `eqn`'s params, as
  ``jax.core.eval_jaxpr`` does; returns its outputs as a list."""
  subfuns, params, in_params = _bind_params(eqn)
  if in_params:
    outs = eqn.primitive.bind(*args, **params)
  else:
    outs = eqn.primitive.bind(*subfuns, *args, **params)
  return list(outs) if eqn.primitive.multiple_results else [outs]


@contextlib.contextmanager
def equation_context(eqn):
  """While binding what stands for `eqn`: its source line and named scopes
  (inside the current ones), and its context (as ``eval_jaxpr`` does)."""
  info = eqn.source_info
  name_stack = _source_info_util.current_name_stack() + info.name_stack
  with (
    _source_info_util.user_context(info.traceback, name_stack=name_stack),
    eqn.ctx.manager,
  ):
    yield


def call_site(eqn) -> tuple:
  """The Python lines that made `eqn` (each frame's file and line), or ()
  where JAX kept no traceback. JAX's differentiation copies an equation
  with its source, so a checkpoint's recomputation and the forward call it
  repeats have one site, and two calls of one target on one handle made
  on different lines have two."""
  traceback = getattr(eqn.source_info, "traceback", None)
  if traceback is None:
    return ()
  return tuple((f.file_name, f.line_num) for f in traceback.frames)


def current_name_stack() -> str:
  """The named scopes in effect now, as ``op_name`` will show them."""
  return str(_source_info_util.current_name_stack())


def scan_counts(params) -> tuple[int, int]:
  """How many of a ``scan`` equation's operands are constants and how many
  the carry. jax up to 0.11 writes ``num_consts``/``num_carry``; jax 0.12
  writes ``ft_in``, a flat tree (a tuple or a pytree of one) that
  ``unpack`` splits into its three groups (constants, carry, xs), each
  iterating over its leaves."""
  if "num_consts" in params:
    return params["num_consts"], params["num_carry"]
  consts, carry, _ = params["ft_in"].unpack()
  return len(list(consts)), len(list(carry))


def varying_axes(value) -> frozenset:
  """The manual mesh axes over which `value` varies inside a
  ``shard_map``: its type's ``manual_axis_type.varying`` (jax 0.10 and
  newer), or ``vma`` (before); empty outside one, or on a jax that does
  not track them."""
  aval = jax.typeof(value)
  # jax 0.10 moved ``vma`` into ``manual_axis_type``; reading ``vma``
  # alone there answered "none" for every value.
  manual = getattr(aval, "manual_axis_type", None)
  if manual is not None:
    return frozenset(getattr(manual, "varying", None) or ())
  return frozenset(getattr(aval, "vma", None) or ())


def make_varying(value, axes: frozenset):
  """`value`, typed as varying over `axes` too (those it does not vary
  over already): ``jax.lax.pcast(..., to="varying")`` on jax 0.8 and
  newer, ``jax.lax.pvary`` before; `value` itself when nothing is
  missing."""
  missing = tuple(sorted(axes - varying_axes(value)))
  if not missing:
    return value
  if hasattr(jax.lax, "pcast"):
    return jax.lax.pcast(value, missing, to="varying")
  return jax.lax.pvary(value, missing)


def pallas_tpu_rank1_needs_rows() -> bool:
  """Whether vectors and scalars must go into entangle's TPU kernel as rows
  (`entangle_jax._src.tpu_kernel.call`).

  Newer Pallas (jax 0.10.2 does) asks the attached TPU for its tiling when an
  operand has rank 1. Lowering for TPU on a machine without one
  (`jax.export`, a CPU test) it cannot; there rank 0 and 1 operands go in
  as (1, n), which it does not ask about. Older Pallas (0.6.2) has no
  `tpu_info` and asks nothing.
  """
  try:
    from jax._src.pallas.mosaic import tpu_info
  except ImportError:
    return False
  try:
    tpu_info.get_tpu_info()
  except Exception:  # Any failure means: no chip to ask.
    return True
  return False


def generic_batching_options() -> dict:
  """``defvjp``'s keyword for a custom_vjp whose backward rule may hand a
  batched cotangent to an unbatched primal input under ``vmap``
  (``generic_batching=True``, public from jax 0.12, which refuses such a
  rule without it); nothing for an older JAX, which sums that cotangent
  over the batch as it always did.

  The rebuilt custom_vjp of ``in_program_order`` needs it for its order
  values (`rules.custom_derivatives`): their cotangents only order, and
  their values never reach a result, so which example gets them does not
  matter."""
  import inspect

  parameters = inspect.signature(jax.custom_vjp.defvjp).parameters
  return {"generic_batching": True} if "generic_batching" in parameters else {}
