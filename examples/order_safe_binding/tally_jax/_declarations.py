"""What each tally target touches, for entangle-jax's race check, in the
form of a ``[tool.entangle-jax]`` table. pyproject.toml publishes it as an
entry point of group ``entangle_jax.declarations``, so a user's race check
knows the targets without any configuration, and without this package
importing anything of entangle-jax's analysis.

* ``tally_create`` touches nothing another call can see (it takes the
  table's lock and hands out a new handle): ``mode = "none"``. Without
  this, a create counts as a write on every accumulator.
* ``tally_add`` and ``tally_destroy`` write the accumulator their operand 0
  names, and hand that handle back as result 0 (the next call's token).
* ``tally_get`` only reads it.
* Different elements of one array of handles are different accumulators
  (each handle is made once, never reused): ``distinct_elements``.
"""

from typing import Any

# One table for the whole process: every device's calls reach the same
# accumulators (the default, declared here because it is the truth).
_ON_HANDLE = {"object": 0, "distinct_elements": True, "devices": "shared"}

TABLE: dict[str, Any] = {
  "targets": {
    "tally_create": {"mode": "none"},
    "tally_add": {"mode": "write", "returns_object": [0], **_ON_HANDLE},
    "tally_get": {"mode": "read", **_ON_HANDLE},
    "tally_destroy": {"mode": "write", "returns_object": [0], **_ON_HANDLE},
  }
}
