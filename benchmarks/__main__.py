"""``python -m benchmarks``: the whole benchmark (see `benchmarks.runner`)."""

import sys

from benchmarks.runner import main

sys.exit(main())
