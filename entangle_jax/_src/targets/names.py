"""Target names the core and the analysis both know: entangle's own no-op
and JAX's host callbacks. Plain data: importing it loads no extension."""

from __future__ import annotations

ENTANGLE_TARGET = "entangle_jax_entangle"
"""The custom-call target name of entangle's no-op handler."""

HOST_CALLBACK_PREFIXES = ("xla_python_", "xla_ffi_python_")
"""Targets of JAX's host callbacks. ``io_callback``, ``jax.debug.callback``
and ``pure_callback`` all call one of these (``xla_ffi_python_cpu_callback``
on CPU with jax 0.6.2 to 0.12); only ``pure_callback``'s call is not marked
``custom_call_has_side_effect=true``."""


def is_host_callback(target: str) -> bool:
  """Whether `target` is the target of JAX's host callbacks."""
  return target.startswith(HOST_CALLBACK_PREFIXES)
