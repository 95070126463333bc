"""Every JAX surface entangle_jax uses that is not JAX's stable public API.

One place to look when a JAX release moves something. Each name here is
exercised by tests/core/private_api_test.py, which fails when the name
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

Public extension API that the primitive is built on and that this module
does not wrap: ``jax.extend.core.Primitive``, ``jax.interpreters.ad``,
``jax.interpreters.batching``, ``jax.interpreters.mlir``, ``jax.ffi``.
"""

from __future__ import annotations

from jax._src import xla_bridge as _xla_bridge
from jax._src.lib import xla_client as _xla_client
from jax.experimental import jet as _jet

register_custom_call_partitioner = _xla_client.register_custom_call_partitioner
HloSharding = _xla_client.HloSharding
register_plugin_callbacks = _xla_bridge.register_plugin_callbacks
jet_rules = _jet.jet_rules
