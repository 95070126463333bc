#!/usr/bin/env python3
"""Benchmarks entangle-jax against the peers, side by side, in one run.

Compared, each in its own subprocess so that rounds can alternate:
  entangle-jax (this checkout), entangle-jax 0.1.1 (the PyPI package,
  installed by this script into its own venv under the cache dir, since both
  import as ``entangle_jax``), ``jax.lax.optimization_barrier``, and a plain
  identity (the baseline).

Reports medians over rounds and ratios against the baseline of the same run:
cost per call in a scan (1 leaf x 1 witness, 3 leaves x 4 witnesses),
``jit(vmap)`` at two batch sizes, custom calls emitted for 3 x 4, collectives
around an 8-way sharded call, and copies with a donated payload. Writes
``results.md``, ``results.json`` and ``results.png`` to ``--out``.

  uv run --group bench python tools/bench.py --quick   # under 3 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time

from timing import median_seconds

ROOT = pathlib.Path(__file__).resolve().parents[1]
PEER_VERSION = "0.1.1"
IMPLS = (
  "entangle-jax",
  f"entangle-jax {PEER_VERSION}",
  "optimization_barrier",
  "identity",
)
BASELINE = "identity"


# --- worker: runs inside one subprocess, for one implementation ------------


def _entangle_fn(impl: str):
  import jax

  if impl.startswith("entangle-jax"):
    from entangle_jax import entangle

    return entangle
  if impl == "optimization_barrier":
    return lambda payload, *w: jax.lax.optimization_barrier((payload, w))[0]
  return lambda payload, *w: payload


def _scan_seconds(entangle, leaves: int, witnesses: int, steps: int, repeats):
  import jax
  import jax.numpy as jnp

  def body(carry, _):
    payload, wits = carry
    payload = entangle(payload, *wits)
    return (payload, tuple(w + 1 for w in wits)), None

  @jax.jit
  def run(payload, wits):
    return jax.lax.scan(body, (payload, wits), None, length=steps)[0]

  payload = tuple(jnp.zeros(()) for _ in range(leaves))
  payload = payload[0] if leaves == 1 else payload
  wits = tuple(jnp.zeros(()) for _ in range(witnesses))
  return median_seconds(run, (payload, wits), repeats)


def _vmap_seconds(entangle, batch: int, repeats: int) -> float:
  import jax
  import jax.numpy as jnp

  fn = jax.jit(jax.vmap(lambda p, w: entangle(p, w)))
  return median_seconds(
    fn, (jnp.ones((batch, 4)), jnp.ones((batch, 2))), repeats
  )


def _structure(entangle) -> dict:
  import jax
  import jax.numpy as jnp
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  def text(fn, *args, **kw):
    return jax.jit(fn, **kw).lower(*args).compile().as_text()

  three_by_four = text(
    lambda p, w: entangle(p, *w),
    tuple(jnp.ones(3) for _ in range(3)),
    tuple(jnp.ones(2) for _ in range(4)),
  )
  mesh = jax.make_mesh((8,), ("x",))
  x = jax.device_put(jnp.ones(64), NamedSharding(mesh, P("x")))
  w = jax.device_put(jnp.ones((8, 64)), NamedSharding(mesh, P(None, "x")))
  sharded = text(lambda p, w: entangle(p, w), x, w)
  donated = text(
    lambda p, w: entangle(p, w), jnp.ones(64), 1.0, donate_argnums=0
  )
  entry = donated[donated.index("\nENTRY") :]
  collective = (
    r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)"
    r"(-start)?\("
  )
  return {
    "custom_calls_3x4": len(re.findall(r"\bcustom-call\(", three_by_four)),
    "collectives_sharded": len(re.findall(collective, sharded)),
    "copies_donated": len(re.findall(r"= \S+ copy\(", entry)),
  }


def worker(impl: str, quick: bool) -> dict:
  import jax

  jax.config.update("jax_num_cpu_devices", 8)
  entangle = _entangle_fn(impl)
  steps = 100_000
  repeats = 3 if quick else 7
  result = {
    "jax": jax.__version__,
    "scan_1x1_s": _scan_seconds(entangle, 1, 1, steps, repeats),
    "scan_3x4_s": _scan_seconds(entangle, 3, 4, steps, repeats),
    "vmap_1e3_s": _vmap_seconds(entangle, 1_000, 20 if quick else 50),
    "vmap_1e5_s": _vmap_seconds(entangle, 100_000, 10 if quick else 30),
    "steps": steps,
  }
  result.update(_structure(entangle))
  return result


# --- driver -----------------------------------------------------------------


def cache_dir() -> pathlib.Path:
  default = pathlib.Path.home() / ".cache" / "entangle-jax"
  return pathlib.Path(os.environ.get("ENTANGLE_JAX_CACHE", default))


def peer_python() -> pathlib.Path:
  """A venv holding the peer package from PyPI; created on first use."""
  venv = cache_dir() / f"peer-{PEER_VERSION}"
  python = venv / "bin" / "python"
  if not python.exists():
    subprocess.run(
      ["uv", "venv", "--quiet", "--allow-existing", str(venv)], check=True
    )
    subprocess.run(
      [
        "uv",
        "pip",
        "install",
        "--quiet",
        "--python",
        str(python),
        f"entangle-jax=={PEER_VERSION}",
      ],
      check=True,
    )
  return python


def run_worker(impl: str, quick: bool, python: pathlib.Path) -> dict:
  env = dict(os.environ)
  env.pop("PYTHONPATH", None)
  # The peer's venv must not see this checkout's package: run from elsewhere.
  cwd = cache_dir() if impl != "entangle-jax" else ROOT
  command = [
    str(python),
    str(pathlib.Path(__file__).resolve()),
    "--worker",
    impl,
  ]
  if quick:
    command.append("--quick")
  out = subprocess.run(
    command, capture_output=True, text=True, env=env, cwd=cwd, check=False
  )
  if out.returncode != 0:
    raise RuntimeError(f"worker {impl} failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(rounds: dict[str, list[dict]]) -> dict[str, dict]:
  summary = {}
  for impl, results in rounds.items():
    summary[impl] = {
      key: statistics.median(r[key] for r in results)
      for key in results[0]
      if isinstance(results[0][key], (int, float))
    }
    summary[impl]["jax"] = results[0]["jax"]
  base = summary[BASELINE]
  steps = base["steps"]
  for s in summary.values():
    s["per_call_1x1_ns"] = (s["scan_1x1_s"] - base["scan_1x1_s"]) / steps * 1e9
    s["per_step_3x4_ns"] = (s["scan_3x4_s"] - base["scan_3x4_s"]) / steps * 1e9
    s["vmap_1e3_ratio"] = s["vmap_1e3_s"] / base["vmap_1e3_s"]
    s["vmap_1e5_ratio"] = s["vmap_1e5_s"] / base["vmap_1e5_s"]
  return summary


def markdown(summary: dict[str, dict], rounds: int) -> str:
  ours, peer = summary["entangle-jax"], summary[f"entangle-jax {PEER_VERSION}"]
  rows = [
    (
      "scan, 1 leaf x 1 witness: ns a call over identity",
      "per_call_1x1_ns",
      "{:.0f}",
    ),
    (
      "scan, 3 leaves x 4 witnesses: ns a step over identity",
      "per_step_3x4_ns",
      "{:.0f}",
    ),
    ("jit(vmap), B=1e3: time / identity's", "vmap_1e3_ratio", "{:.2f}x"),
    ("jit(vmap), B=1e5: time / identity's", "vmap_1e5_ratio", "{:.2f}x"),
    ("custom calls for 3 leaves x 4 witnesses", "custom_calls_3x4", "{:.0f}"),
    ("collectives, 8-way sharded payload", "collectives_sharded", "{:.0f}"),
    ("copies with a donated payload", "copies_donated", "{:.0f}"),
  ]
  header = "| metric | " + " | ".join(IMPLS) + " |"
  lines = [header, "|" + "---|" * (len(IMPLS) + 1)]
  for label, key, fmt in rows:
    cells = [fmt.format(summary[i][key]) for i in IMPLS]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  ratio_1x1 = ours["per_call_1x1_ns"] / peer["per_call_1x1_ns"]
  ratio_3x4 = ours["per_step_3x4_ns"] / peer["per_step_3x4_ns"]
  lines += [
    "",
    f"entangle-jax / entangle-jax {PEER_VERSION}: scan 1x1 {ratio_1x1:.2f}x, "
    f"scan 3x4 {ratio_3x4:.2f}x.",
    "",
    f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, "
    f"{os.cpu_count()} cores, "
    f"Python {platform.python_version()}, jax {ours['jax']} (peer venv: jax "
    f"{peer['jax']}); medians of {rounds} alternating rounds; scan of "
    f"{int(ours['steps'])} steps.",
  ]
  return "\n".join(lines)


def chart(summary: dict[str, dict], path: pathlib.Path) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  impls = [i for i in IMPLS if i != BASELINE]
  panels = [
    ("ns a call over identity, scan 1x1", "per_call_1x1_ns"),
    ("ns a step over identity, scan 3x4", "per_step_3x4_ns"),
    ("jit(vmap) / identity, B=1e5", "vmap_1e5_ratio"),
  ]
  fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.6))
  for ax, (title, key) in zip(axes, panels, strict=True):
    values = [summary[i][key] for i in impls]
    ax.bar(range(len(impls)), values, color=["#2a7", "#c63", "#68c"])
    ax.set_xticks(range(len(impls)), impls, rotation=15, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.set_yscale(
      "log" if max(values) > 20 * max(min(values), 1e-9) else "linear"
    )
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--quick", action="store_true", help="fewer rounds and repeats (<3 min)"
  )
  parser.add_argument("--rounds", type=int, default=None)
  parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench-out")
  parser.add_argument("--worker", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    print(json.dumps(worker(args.worker, args.quick)))
    return 0
  rounds = args.rounds or (3 if args.quick else 5)
  pythons = {impl: pathlib.Path(sys.executable) for impl in IMPLS}
  pythons[f"entangle-jax {PEER_VERSION}"] = peer_python()
  results: dict[str, list[dict]] = {impl: [] for impl in IMPLS}
  for r in range(rounds):
    for impl in IMPLS if r % 2 == 0 else reversed(IMPLS):
      print(f"round {r + 1}/{rounds}: {impl}", file=sys.stderr, flush=True)
      results[impl].append(run_worker(impl, args.quick, pythons[impl]))
  summary = summarize(results)
  args.out.mkdir(parents=True, exist_ok=True)
  table = markdown(summary, rounds)
  (args.out / "results.md").write_text(table + "\n")
  (args.out / "results.json").write_text(
    json.dumps({"summary": summary, "rounds": results}, indent=2)
  )
  chart(summary, args.out / "results.png")
  print(table)
  print(f"\nwrote {args.out}/results.md, results.json, results.png")
  return 0


if __name__ == "__main__":
  sys.exit(main())
