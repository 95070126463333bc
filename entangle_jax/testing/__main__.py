"""``python -m entangle_jax.testing PATH...``: the race check over XLA dumps
(`entangle_jax.testing._ways_in.command`)."""

import os
import sys

from entangle_jax.testing._ways_in.command import main

if __name__ == "__main__":
  try:
    status = main()
    sys.stdout.flush()
  except BrokenPipeError:
    # The reader stopped early (`... | head`): no traceback for that. What
    # is left unwritten goes nowhere, and the status says the output was
    # cut.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    status = 1
  sys.exit(status)
