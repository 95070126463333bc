"""Writes a PEP 427 wheel: the files given, METADATA, WHEEL, RECORD,
entry_points.txt when there are entry points, and the licence files (PEP 639)
under .dist-info/licenses/ when given.

Invoked by the `py_wheel` rule in wheel.bzl; every argument comes from there.
Archive entries get a fixed timestamp so the same inputs give the same wheel.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import zipfile

_EPOCH = (1980, 1, 1, 0, 0, 0)


def record_hash(data: bytes) -> str:
  digest = hashlib.sha256(data).digest()
  return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def metadata(args: argparse.Namespace) -> str:
  lines = [
    # 2.4: License-Expression and License-File (PEP 639).
    "Metadata-Version: 2.4",
    f"Name: {args.distribution.replace('_', '-')}",
    f"Version: {args.version}",
  ]
  if args.license:
    lines.append(f"License-Expression: {args.license}")
  lines += [f"License-File: {name}" for name, _ in license_files(args)]
  if args.summary:
    lines.append(f"Summary: {args.summary}")
  if args.python_requires:
    lines.append(f"Requires-Python: {args.python_requires}")
  lines += [f"Requires-Dist: {r}" for r in args.requires]
  lines += [f"Provides-Extra: {e}" for e in args.provides_extra]
  body = ""
  if args.description_file:
    lines.append("Description-Content-Type: text/markdown")
    with open(args.description_file, encoding="utf-8") as f:
      body = f.read()
  return "\n".join(lines) + "\n\n" + body


def license_files(args: argparse.Namespace) -> list[tuple[str, str]]:
  """Each ``--license-file NAME=SOURCE_PATH`` as (NAME, SOURCE_PATH): NAME is
  the file's path in the source tree, which PEP 639 keeps under
  .dist-info/licenses/."""
  pairs = [spec.split("=", 1) for spec in args.license_file]
  for spec, pair in zip(args.license_file, pairs, strict=True):
    if len(pair) != 2 or not pair[0]:
      raise SystemExit(f"--license-file {spec!r} is not NAME=SOURCE_PATH")
  return [(name, source) for name, source in pairs]


def wheel_file(tag: str) -> str:
  return "\n".join(
    [
      "Wheel-Version: 1.0",
      "Generator: entangle_jax tools/bazel/build_wheel.py",
      "Root-Is-Purelib: false",
      f"Tag: {tag}",
      "",
    ]
  )


def entry_points_file(points: list[str]) -> str:
  """entry_points.txt from ``GROUP:NAME = VALUE`` items, groups in order."""
  groups: dict[str, list[str]] = {}
  for point in points:
    group, entry = point.split(":", 1)
    groups.setdefault(group, []).append(entry)
  return "".join(
    f"[{group}]\n" + "".join(f"{entry}\n" for entry in entries) + "\n"
    for group, entries in sorted(groups.items())
  )


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--output", required=True)
  parser.add_argument("--distribution", required=True)
  parser.add_argument("--version", required=True)
  parser.add_argument("--tag", required=True)
  parser.add_argument("--summary", default="")
  parser.add_argument("--python-requires", default="")
  parser.add_argument("--requires", action="append", default=[])
  parser.add_argument("--provides-extra", action="append", default=[])
  parser.add_argument("--entry-point", action="append", default=[])
  parser.add_argument("--description-file")
  parser.add_argument("--license", default="", help="an SPDX expression")
  parser.add_argument(
    "--license-file", action="append", default=[], help="NAME=SOURCE_PATH"
  )
  parser.add_argument(
    "--file", action="append", default=[], help="ARCHIVE_PATH=SOURCE_PATH"
  )
  args = parser.parse_args()

  dist_info = f"{args.distribution}-{args.version}.dist-info"
  entries: list[tuple[str, bytes]] = []
  for spec in sorted(args.file):
    archive_path, source = spec.split("=", 1)
    with open(source, "rb") as f:
      entries.append((archive_path, f.read()))
  for name, source in license_files(args):
    with open(source, "rb") as f:
      entries.append((f"{dist_info}/licenses/{name}", f.read()))
  entries.append((f"{dist_info}/METADATA", metadata(args).encode()))
  entries.append((f"{dist_info}/WHEEL", wheel_file(args.tag).encode()))
  if args.entry_point:
    text = entry_points_file(args.entry_point)
    entries.append((f"{dist_info}/entry_points.txt", text.encode()))
  record = [f"{p},{record_hash(d)},{len(d)}" for p, d in entries]
  record.append(f"{dist_info}/RECORD,,")
  entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))

  with zipfile.ZipFile(args.output, "w", zipfile.ZIP_DEFLATED) as wheel:
    for archive_path, data in entries:
      info = zipfile.ZipInfo(archive_path, date_time=_EPOCH)
      executable = archive_path.endswith(".so")
      info.external_attr = (0o755 if executable else 0o644) << 16
      info.compress_type = zipfile.ZIP_DEFLATED
      wheel.writestr(info, data)


if __name__ == "__main__":
  main()
