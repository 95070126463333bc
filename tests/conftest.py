"""pytest imports this before any test module: the device setup comes first.

Under Bazel each test file runs in a process of its own, so every test
module that uses JAX imports `tests.test_util` too (imports_test checks).
"""

from tests import test_util  # noqa: F401  (sets up 8 CPU devices)
