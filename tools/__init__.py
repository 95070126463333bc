"""Development tools of entangle-jax: CI helpers, the XLA FFI header pin,
README checks and Bazel rules (tools/bazel). Not part of the wheel.

A package so that tests import its modules by name (``from tools import
readme_commands``); the scripts still run by path as well
(``python3 tools/readme_commands.py``), since they import no sibling.
"""
