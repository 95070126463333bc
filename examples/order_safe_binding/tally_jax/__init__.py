"""tally_jax: a JAX binding to the tally library (accumulators behind
integer handles) whose calls keep their program order under `jax.jit`.

* `Tally`: the ordered API (entangle-jax's `Resource` inside).
* `tally_jax.tokens`: the same calls with tokens the caller threads.
* `set_query_delay`, `live_count`: the library's settings and counts.

The unordered calls (`tally_jax._ffi`) are what a binding without
entangle-jax would publish.
"""

from tally_jax._ffi import live_count, set_query_delay
from tally_jax._tally import Tally

__all__ = ["Tally", "live_count", "set_query_delay"]
