"""pytest's entry point for the race check: ``pytest
--entangle-races=fail|report``.

The plugin itself is `entangle_jax.testing._ways_in.plugin`; this module is
what the package's ``pytest11`` entry point and ``-p
entangle_jax.testing.pytest_plugin`` name, so it only hands pytest the
plugin's hooks.
"""

from entangle_jax.testing._ways_in.plugin import (
  pytest_addoption,
  pytest_configure,
  pytest_load_initial_conftests,
  pytest_runtest_makereport,
  pytest_sessionfinish,
  pytest_sessionstart,
  pytest_terminal_summary,
  pytest_testnodedown,
)

__all__ = [
  "pytest_addoption",
  "pytest_configure",
  "pytest_load_initial_conftests",
  "pytest_runtest_makereport",
  "pytest_sessionfinish",
  "pytest_sessionstart",
  "pytest_terminal_summary",
  "pytest_testnodedown",
]
