"""``python -m entangle_jax.demo``: see `entangle_jax.demo`."""

import sys

from entangle_jax.demo import main

sys.exit(main())
