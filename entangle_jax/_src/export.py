"""What `jax.export` needs to accept modules that contain `entangle`."""

from __future__ import annotations

from jax import export

from entangle_jax._src import native


def export_safety_checks() -> list[export.DisabledSafetyCheck]:
  """The safety checks to disable when exporting code that uses `entangle`.

  ``jax.export`` refuses custom calls whose targets carry no compatibility
  guarantee from JAX. entangle's target is stable: its handler is a no-op
  that reads no operand, attribute or result, so any version of this package
  runs a module exported by any other. Pass the result as
  ``disabled_checks`` to ``jax.export.export``::

    jax.export.export(fn, disabled_checks=entangle_jax.export_safety_checks())

  The process that calls the deserialized module must have imported
  ``entangle_jax`` (which registers the handler) before the call.

  Returns:
    A list holding the one ``DisabledSafetyCheck`` for entangle's custom
    call target.
  """
  return [export.DisabledSafetyCheck.custom_call(native.ENTANGLE_TARGET)]
