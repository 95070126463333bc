"""What a worker subprocess can measure: one module a part.

Each module has ``measure(args) -> dict``, where ``args`` are the worker's
parsed arguments (``impl``, ``quick``, ``native``, ``peer_extension``); the
worker adds the versions it ran and prints the dict as JSON. A module is
imported only when its part runs (see ``benchmarks.worker.PARTS``), so each
may import what only its venv has.
"""
