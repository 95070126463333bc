"""``python -m entangle_jax.testing PATH...``: the race check over XLA dumps
(`entangle_jax.testing._check`)."""

import sys

from entangle_jax.testing._check import main

if __name__ == "__main__":
  sys.exit(main())
