#!/usr/bin/env python3
"""Obtains the pinned XLA FFI headers from the pinned jaxlib, checksummed.

The headers are third-party code and never committed. Both builds (meson and
Bazel) call this script, so the pin in ``xla_ffi_pin.json`` is the single
source of truth for which FFI API version the native code is compiled against.

Usage:
  xla_ffi_headers.py fetch DEST   put verified headers under DEST/xla/ffi/api
  xla_ffi_headers.py refresh VER  re-pin to jaxlib VER (rewrites the pin file)

Headers come, in order of preference, from ``$ENTANGLE_JAX_FFI_HEADERS`` (a
directory holding ``xla/ffi/api/*.h``, for machines without an index), from
an installed jaxlib of exactly the pinned version, or from the jaxlib wheel
downloaded with ``python -m pip download`` (so the user's pip configuration,
index and mirrors apply) into a cache directory (``$ENTANGLE_JAX_CACHE``,
default ``~/.cache/entangle-jax``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys
import zipfile

PIN_FILE = pathlib.Path(__file__).resolve().with_name("xla_ffi_pin.json")
HEADER_DIR_IN_WHEEL = "jaxlib/include/"


class HeaderError(RuntimeError):
  """The headers could not be obtained or did not match the pin."""


def load_pin() -> dict:
  return json.loads(PIN_FILE.read_text())


def sha256(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def cache_dir() -> pathlib.Path:
  default = pathlib.Path.home() / ".cache" / "entangle-jax"
  return pathlib.Path(os.environ.get("ENTANGLE_JAX_CACHE", default))


def verify(name: str, data: bytes, expected: str, origin: str) -> None:
  actual = sha256(data)
  if actual != expected:
    raise HeaderError(
      f"{name} from {origin} has sha256 {actual}, but the pin in "
      f"{PIN_FILE.name} expects {expected}"
    )


def installed_jaxlib_include(version: str) -> pathlib.Path | None:
  """The include dir of an installed jaxlib, if it is exactly `version`."""
  try:
    if importlib.metadata.version("jaxlib") != version:
      return None
  except importlib.metadata.PackageNotFoundError:
    return None
  for file in importlib.metadata.files("jaxlib") or ():
    if str(file).endswith("xla/ffi/api/ffi.h"):
      return pathlib.Path(file.locate()).parents[3]
  return None


def download_wheel(version: str) -> pathlib.Path:
  """Returns a cached jaxlib wheel of `version`, downloading it with pip."""
  wheels = cache_dir() / "wheels"
  found = sorted(wheels.glob(f"jaxlib-{version}-*.whl"))
  if found:
    return found[0]
  wheels.mkdir(parents=True, exist_ok=True)
  command = [
    sys.executable,
    "-m",
    "pip",
    "download",
    "--quiet",
    "--no-deps",
    "--only-binary=:all:",
    f"jaxlib=={version}",
    "--dest",
    str(wheels),
  ]
  result = subprocess.run(command, capture_output=True, text=True)
  found = sorted(wheels.glob(f"jaxlib-{version}-*.whl"))
  if result.returncode != 0 or not found:
    raise HeaderError(
      f"could not download jaxlib=={version} with pip (needed for its XLA "
      f"FFI headers): {' '.join(command)}\n{result.stderr.strip()}\n"
      "Without a package index, set ENTANGLE_JAX_FFI_HEADERS to a folder "
      "holding xla/ffi/api/*.h (docs/native_build.md, Building offline)."
    )
  return found[0]


def read_headers(
  version: str, names: list[str]
) -> tuple[dict[str, bytes], str]:
  provided = os.environ.get("ENTANGLE_JAX_FFI_HEADERS")
  if provided:
    root = pathlib.Path(provided)
    headers = {n: (root / n).read_bytes() for n in names}
    return headers, f"$ENTANGLE_JAX_FFI_HEADERS ({root})"
  include = installed_jaxlib_include(version)
  if include is not None:
    return {
      n: (include / n).read_bytes() for n in names
    }, f"installed jaxlib {include}"
  wheel = download_wheel(version)
  with zipfile.ZipFile(wheel) as archive:
    try:
      return {n: archive.read(HEADER_DIR_IN_WHEEL + n) for n in names}, str(
        wheel
      )
    except KeyError as err:
      raise HeaderError(f"{wheel} lacks an XLA FFI header: {err}") from None


def fetch(dest: pathlib.Path) -> None:
  pin = load_pin()
  expected: dict[str, str] = pin["headers"]
  present = all(
    (dest / n).is_file() and sha256((dest / n).read_bytes()) == h
    for n, h in expected.items()
  )
  if present:
    return
  headers, origin = read_headers(pin["jaxlib"], list(expected))
  for name, data in headers.items():
    verify(name, data, expected[name], origin)
  for name, data in headers.items():
    target = dest / name
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(target)


def refresh(version: str) -> None:
  pin = load_pin()
  names = list(pin["headers"])
  headers, origin = read_headers(version, names)
  pin["jaxlib"] = version
  pin["headers"] = {n: sha256(headers[n]) for n in names}
  PIN_FILE.write_text(json.dumps(pin, indent=2) + "\n")
  print(f"pinned jaxlib {version} from {origin}")
  for name, digest in pin["headers"].items():
    print(f"  {digest}  {name}")


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  commands = parser.add_subparsers(dest="command", required=True)
  fetch_cmd = commands.add_parser("fetch", help="place verified headers")
  fetch_cmd.add_argument("dest", type=pathlib.Path)
  refresh_cmd = commands.add_parser(
    "refresh", help="re-pin to a jaxlib version"
  )
  refresh_cmd.add_argument("version")
  args = parser.parse_args(argv)
  try:
    if args.command == "fetch":
      fetch(args.dest)
      print(args.dest.resolve())
    else:
      refresh(args.version)
  except HeaderError as err:
    print(f"xla_ffi_headers: {err}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
