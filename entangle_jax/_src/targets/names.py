"""Target names the core and the analysis both know: entangle's own no-op
and JAX's host callbacks. Plain data: importing it loads no extension."""

from __future__ import annotations

import fnmatch
import functools

from entangle_jax._src.targets import platforms

ENTANGLE_TARGET = "entangle_jax_entangle"
"""The custom-call target name of entangle's no-op handler."""

HOST_CALLBACK_PATTERNS = (
  "xla_python_*_callback",
  "xla_ffi_python_*_callback",
  "xla_ffi_partitioned_python_*_callback",
  "xla_buffer_python_*_callback",
)
"""The targets of JAX's host callbacks, as globs. ``io_callback``,
``jax.debug.callback`` and ``pure_callback`` call
``xla_ffi_python_{cpu,gpu}_callback`` (jax 0.6.2 to 0.12), or
``xla_ffi_partitioned_python_{cpu,gpu}_callback`` when JAX calls them on
each shard (``partitioned``); ``jax.experimental.buffer_callback`` calls
``xla_buffer_python_{cpu,gpu}_callback``; older jaxlib called
``xla_python_{cpu,gpu}_callback``. Only ``pure_callback``'s call is not
marked ``custom_call_has_side_effect=true``."""

TPU_HOST_CALLBACK_TARGET = platforms.TRANSFER_CALLBACK_TARGET
"""The target the race check gives a host callback on TPU. There JAX lowers
a host callback to host transfers (``send``/``recv`` with
``is_host_transfer=true``), not to a custom call; the check reads each
callback's transfers as one call of this target
(`entangle_jax.testing._hlo.host_callbacks`), which
`HOST_CALLBACK_PATTERNS` match: it is declared as a host callback on
CPU."""

DEBUG_CALLBACK_PRIMITIVES = ("debug_callback", "debug_print")
"""The primitives of ``jax.debug.callback`` and ``jax.debug.print``: host
callbacks that return nothing. ``jax.debug.print`` binds its own
``debug_print`` (jax 0.10), lowered as a ``debug_callback``, or
``debug_callback`` itself (other versions)."""

HOST_CALLBACK_PRIMITIVES = (
  "io_callback",
  *DEBUG_CALLBACK_PRIMITIVES,
  "buffer_callback",
)
"""The jaxpr primitives of the host callbacks that may have effects: each
lowers to one call of a `HOST_CALLBACK_PATTERNS` target."""

XLA_COLLECTIVE_PRIMITIVES = frozenset(
  {
    "psum",
    "psum_invariant",
    "pmax",
    "pmin",
    "ppermute",
    "psend",
    "precv",
    "pbroadcast",
    "all_gather",
    "all_gather_invariant",
    "all_to_all",
    "ragged_all_to_all",
    "reduce_scatter",
  }
)
"""The jaxpr primitives of JAX's explicit collectives (``lax.psum``,
``all_gather``, ``ppermute``, ``psum_scatter``, ``all_to_all`` and their
kin, in ``shard_map`` or ``pmap``), jax 0.6.2 to 0.12: each lowers to an
XLA collective, which every process of a multi-process program must make
in one order (``in_program_order`` orders them as native calls)."""

PURE_CALLBACK_PRIMITIVE = "pure_callback"
"""``jax.pure_callback``'s primitive. Its user declares it pure: XLA may run
it at any time, merge identical ones and drop unused ones. Neither the race
check nor ``in_program_order`` treats it as a native call."""


SANITIZER_COUNTER_SCOPE = "entangle_jax:sanitizer_execution_counter"
"""The scope (``op_name``) of the host callback the run-time sanitizer adds
to a module it compiles (`entangle_jax.testing.sanitize`), which counts the
module's executions. XLA keeps it through optimization, so the optimized
module and a dump of it say which call is the sanitizer's own."""


SANITIZER_EXECUTION_TARGET = "entangle_jax_sanitize_execution"
"""The target of the op the run-time sanitizer adds before each host
callback of a module it compiles on CPU: it hands the callback XLA's id of
the execution and the call's place, as one more operand (its scope is
`SANITIZER_COUNTER_SCOPE`)."""


SANITIZER_ITERATION_TARGET = "entangle_jax_sanitize_iteration"
"""The target of the op the run-time sanitizer adds at the top of each
loop's condition in a module it compiles on one CPU device: its recorded
calls count the loop's iterations in each execution, which place each
call of the loop in its iteration (its scope is `SANITIZER_COUNTER_SCOPE`).
"""


def is_sanitizer_counter(target: str | None, op_name: str) -> bool:
  """Whether a custom call of `target` with scope `op_name` is the
  sanitizer's own (its execution counter, or the op that tells a host
  callback its execution), no call of the user's program: the static
  check leaves it out of every question."""
  if target in (SANITIZER_EXECUTION_TARGET, SANITIZER_ITERATION_TARGET):
    return True
  return (
    op_name == SANITIZER_COUNTER_SCOPE
    and target is not None
    and is_host_callback(target)
  )


@functools.lru_cache(maxsize=4096)
def is_host_callback(target: str) -> bool:
  """Whether `target` is the target of one of JAX's host callbacks."""
  return any(fnmatch.fnmatchcase(target, p) for p in HOST_CALLBACK_PATTERNS)


def is_pure_host_callback(target: str, side_effect: bool) -> bool:
  """Whether a custom call of `target` is ``pure_callback``'s: a host
  callback that is not side-effecting. JAX's contract makes it pure, so it
  touches nothing: the race check does not count it as a native call, and
  the sanitizer records it as touching nothing."""
  return is_host_callback(target) and not side_effect


def host_callback_target(
  primitive: str, platform: str, partitioned: bool = False
) -> str:
  """The target a host callback's `primitive` (one of
  `HOST_CALLBACK_PRIMITIVES`, or ``pure_callback``) lowers to on
  `platform` (``jax.default_backend()``: ``cpu``, ``gpu``, ``cuda``,
  ``rocm``, ``tpu``), as jax 0.6.2 to 0.12 name it; on TPU, where it
  lowers to host transfers, the target the race check reads them as
  (`TPU_HOST_CALLBACK_TARGET`), so that one declaration of it applies to
  both."""
  # A platform not in the table: its callbacks are taken for the CPU's.
  row = platforms.of_jax_name(platform) or platforms.CPU
  if row.transfer_target is not None:
    return row.transfer_target
  device = row.callback_device
  if primitive == "buffer_callback":
    return f"xla_buffer_python_{device}_callback"
  partition = "_partitioned" if partitioned else ""
  return f"xla_ffi{partition}_python_{device}_callback"
