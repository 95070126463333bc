"""A throwaway project directory, for tests of ``[tool.entangle-jax]``."""

import contextlib
import os
import pathlib
import tempfile
import textwrap


@contextlib.contextmanager
def project(table: str):
  """Works in a directory two levels below a fresh ``pyproject.toml`` that
  holds `table` (TOML, dedented); yields the file's path."""
  with tempfile.TemporaryDirectory() as root:
    top = pathlib.Path(root)
    (top / "pyproject.toml").write_text(
      '[project]\nname = "user-project"\n\n' + textwrap.dedent(table)
    )
    below = top / "src" / "pkg"
    below.mkdir(parents=True)
    here = os.getcwd()
    os.chdir(below)
    try:
      yield top / "pyproject.toml"
    finally:
      os.chdir(here)
