"""Does `auditwheel show` accept a wheel as it is, for its manylinux tag?

  auditwheel show WHEEL | python tools/manylinux_check.py WHEEL [NEWEST]

Exits 0 when auditwheel finds the wheel consistent with a manylinux tag no
newer than the one the wheel's name carries (manylinux_2_28_x86_64 for
tools/build_release.sh's wheel): no repair is needed, no library to graft.
Exits 1, saying why, otherwise: the wheel needs a newer glibc than its tag
says (today's gcc-built wheel on this machine: manylinux_2_34), or a shared
library outside the manylinux policy (auditwheel then says linux_x86_64).
With NEWEST (a tag such as manylinux_2_28, as tools/check_release.sh gives
it), the wheel's tag must also be no newer than that: a wheel must install
where NEWEST's glibc is.
"""

import re
import sys

# auditwheel wraps its sentences; the tag is the quoted word after this.
_CONSISTENT = re.compile(
  r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"([^"]+)"'
)
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(\w+)$")


def glibc_of(tag: str) -> tuple[int, int, str] | None:
  """(major, minor, arch) of a PEP 600 tag; None for any other tag."""
  m = _MANYLINUX.match(tag)
  return (int(m[1]), int(m[2]), m[3]) if m else None


def wheel_platform(wheel: str) -> str:
  """The platform tag of a wheel's file name (its last tag)."""
  name = wheel.rsplit("/", 1)[-1]
  if not name.endswith(".whl"):
    raise ValueError(f"{name}: not a wheel's file name")
  return name[: -len(".whl")].split("-")[-1].split(".")[-1]


def problem(
  wheel: str, show_output: str, newest: str | None = None
) -> str | None:
  """Why auditwheel's output rejects the wheel's tag, or why the tag is
  newer than `newest` (manylinux_X_Y, any machine); None if neither."""
  claimed = wheel_platform(wheel)
  wanted = glibc_of(claimed)
  if wanted is None:
    return f"the wheel is tagged {claimed}, not a manylinux_X_Y tag"
  if newest is not None:
    limit = glibc_of(f"{newest}_{wanted[2]}")
    if limit is None:
      raise ValueError(f"{newest!r} is not a tag like manylinux_2_28")
    if wanted[:2] > limit[:2]:
      return f"the wheel is tagged {claimed}, newer than {newest}"
  found = _CONSISTENT.search(show_output)
  if not found:
    return "auditwheel show named no platform tag:\n" + show_output
  consistent = found[1]
  have = glibc_of(consistent)
  if have is None or have[2] != wanted[2]:
    return (
      f"auditwheel finds the wheel consistent with {consistent} only: it "
      "needs a library outside the manylinux policy, or is for another "
      "machine"
    )
  if have[:2] > wanted[:2]:
    return (
      f"auditwheel finds the wheel consistent with {consistent}, newer than "
      f"its tag {claimed}: it needs glibc {have[0]}.{have[1]}"
    )
  return None


def main(argv: list[str]) -> int:
  if len(argv) not in (1, 2):
    print(__doc__, file=sys.stderr)
    return 2
  newest = argv[1] if len(argv) == 2 else None
  why = problem(argv[0], sys.stdin.read(), newest)
  if why:
    print(f"{argv[0]}: {why}", file=sys.stderr)
    return 1
  print(f"auditwheel accepts {wheel_platform(argv[0])} as it is")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
