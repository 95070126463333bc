"""Shared test setup: importing this first gives JAX 8 host CPU devices.

Both runners import each test file before any test runs (pytest collects
every file first; Bazel runs one file per process), so the device count is
set before JAX initialises its backends.
"""

import jax

NUM_CPU_DEVICES = 8

jax.config.update("jax_num_cpu_devices", NUM_CPU_DEVICES)


def custom_calls(compiled_text: str, target: str) -> int:
  """How many custom calls to `target` the HLO text holds."""
  return compiled_text.count(f'custom_call_target="{target}"')
