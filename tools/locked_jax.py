#!/usr/bin/env python3
"""Checks that the running interpreter has the jax a hashed lock pins for it.

  python tools/locked_jax.py requirements.lock

requirements.lock pins one jax per range of Python versions (jax 0.11 and
newer need Python 3.12); CI runs this in each environment it installs from a
lock, so that a run on a newer Python cannot silently test an older jax.
Prints the interpreter, the installed jax and the pin; exits non-zero, naming
both, when they differ or when the lock has no pin (or several) for this
interpreter.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
from packaging.requirements import Requirement


def jax_pins(lock_text: str) -> list[Requirement]:
  """The lock's ``jax==`` requirements, markers included, hashes dropped."""
  joined = lock_text.replace("\\\n", " ")
  return [
    Requirement(line.split(" --hash")[0].strip())
    for line in joined.splitlines()
    if line.startswith("jax==")
  ]


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("lock", type=pathlib.Path)
  args = parser.parse_args(argv)
  pins = [
    pin
    for pin in jax_pins(args.lock.read_text())
    if pin.marker is None or pin.marker.evaluate()
  ]
  python = sys.version.split()[0]
  if len(pins) != 1:
    listed = ", ".join(map(str, pins)) or "none"
    sys.exit(f"{args.lock}: jax pins for Python {python}: {listed}")
  (pin,) = pins
  print(f"Python {python}, jax {jax.__version__}; {args.lock}: {pin}")
  if not pin.specifier.contains(jax.__version__):
    sys.exit(f"jax {jax.__version__} is installed; {args.lock} pins {pin}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
