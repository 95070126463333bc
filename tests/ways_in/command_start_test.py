"""``python -m entangle_jax.testing DUMP`` imports no JAX: checking HLO
text needs none, so the command starts in a fraction of a second.

The command runs in a fresh interpreter as ``python -m`` runs it
(``runpy.run_module`` with ``alter_sys``), which then writes the names in
``sys.modules`` as it exits. The control is a binding whose published
declarations (an ``entangle_jax.declarations`` entry point the command
loads) import JAX: the same listing then shows it."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest

from tests import test_util
from tests.hand_written_hlo import hlo_module, native

# Two unordered writes of one object: a race, so the command has to parse
# and analyse the module (exit status 1), not only read its header.
_RACY = hlo_module(
  "\n".join(
    [
      "%p = s32[] parameter(0)",
      native("tp_a", "p"),
      native("tp_b", "p"),
      "ROOT %t = (s32[], s32[]) tuple(%tp_a, %tp_b)",
    ]
  )
)
_NO_CALLS = hlo_module("%p = s32[] parameter(0)\nROOT %q = s32[] add(%p, %p)")

_JAX = ("jax", "jaxlib")

# `python -m entangle_jax.testing ARGS` (argv[2:]) that writes the names in
# sys.modules to the file argv[1] as it exits.
_COMMAND = textwrap.dedent(
  """
  import atexit, json, runpy, sys

  listing = sys.argv[1]
  atexit.register(
    lambda: open(listing, "w").write(json.dumps(sorted(sys.modules)))
  )
  sys.argv[1:] = sys.argv[2:]
  runpy.run_module("entangle_jax.testing", run_name="__main__", alter_sys=True)
  """
)


class CommandStartTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.root = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
    dump = self.root / "dump"
    dump.mkdir()
    for k, text in enumerate([_RACY, _NO_CALLS]):
      name = f"module_{k:04d}.jit_f.cpu_after_optimizations.txt"
      (dump / name).write_text(text)
    self.dump = dump

  def run_command(self, *site: pathlib.Path) -> tuple[set[str], str]:
    """Runs the command on the dump (`site` folders first on the path);
    returns the modules it imported and its output."""
    env = test_util.child_env()
    env["PYTHONPATH"] = os.pathsep.join([*map(str, site), env["PYTHONPATH"]])
    listing = self.root / "modules.json"
    project = ["--project", str(self.root)]
    result = subprocess.run(
      [sys.executable, "-c", _COMMAND, str(listing), str(self.dump), *project],
      capture_output=True,
      text=True,
      timeout=60,
      env=env,
      cwd=self.root,
    )
    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
    self.assertIn("1 with races", result.stdout)
    return set(json.loads(listing.read_text())), result.stdout

  def write_project(self) -> None:
    # An empty table: --project makes the answer independent of where the
    # test runs.
    (self.root / "pyproject.toml").write_text("[tool.entangle-jax]\n")

  def test_checking_a_dump_imports_no_jax(self):
    self.write_project()
    modules, _ = self.run_command()
    # The listing holds the command and the analysis it ran...
    self.assertIn("entangle_jax.testing._ways_in.command", modules)
    self.assertIn("entangle_jax.testing._order.relations", modules)
    # ...and nothing of JAX.
    self.assertEqual(sorted(m for m in modules if m.split(".")[0] in _JAX), [])

  def test_control_a_declaration_that_imports_jax_shows(self):
    self.write_project()
    site = self.root / "site"
    info = site / "jax_binding-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
      "Metadata-Version: 2.1\nName: jax-binding\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
      "[entangle_jax.declarations]\njax_binding = jax_binding:DECLARATIONS\n"
    )
    (site / "jax_binding.py").write_text("import jax\n\nDECLARATIONS = {}\n")
    modules, _ = self.run_command(site)
    self.assertIn("jax_binding", modules)
    self.assertIn("jax", modules)


if __name__ == "__main__":
  absltest.main()
