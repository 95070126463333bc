"""tools/manylinux_check.py reads `auditwheel show` as tools/build_release.sh
needs: the wheel's manylinux tag is accepted only if auditwheel finds it
consistent with that tag or an older one, with no library outside the
policy. The texts are auditwheel 6.8's, wrapped as it wraps them.
"""

from absl.testing import absltest

from tests import test_util

manylinux_check = test_util.development_tool("manylinux_check")

WHEEL = "dist/entangle_jax-0.6.0-cp311-cp311-manylinux_2_28_x86_64.whl"


def shown(tag: str) -> str:
  return (
    "\nentangle_jax-0.6.0-cp311-cp311-manylinux_2_28_x86_64.whl is consistent"
    f'\nwith the following platform tag: "{tag}".\n\nThe wheel references'
    " external versioned symbols in these\nsystem-provided shared libraries:"
    " libc.so.6 with versions {'GLIBC_2.2.5'}\n"
  )


def refused(wheel: str, output: str) -> str:
  why = manylinux_check.problem(wheel, output)
  assert why is not None, f"accepted: {output}"
  return why


class ManylinuxCheckTest(absltest.TestCase):
  def test_zig_built_wheel_is_accepted(self):
    # What the zig-built wheel shows: glibc 2.24 at most, tagged 2.28.
    self.assertIsNone(
      manylinux_check.problem(WHEEL, shown("manylinux_2_24_x86_64"))
    )
    self.assertIsNone(
      manylinux_check.problem(WHEEL, shown("manylinux_2_28_x86_64"))
    )

  def test_newer_glibc_than_the_tag_is_refused(self):
    # The control: gcc on this machine (glibc 2.36) gives manylinux_2_34.
    why = refused(WHEEL, shown("manylinux_2_34_x86_64"))
    self.assertIn("needs glibc 2.34", why)

  def test_library_outside_the_policy_is_refused(self):
    why = refused(WHEEL, shown("linux_x86_64"))
    self.assertIn("outside the manylinux policy", why)

  def test_other_machine_and_untagged_wheel_are_refused(self):
    self.assertIn(
      "another machine",
      refused(WHEEL, shown("manylinux_2_17_aarch64")),
    )
    linux = WHEEL.replace("manylinux_2_28_x86_64", "linux_x86_64")
    self.assertIn(
      "not a manylinux_X_Y tag",
      refused(linux, shown("manylinux_2_24_x86_64")),
    )

  def test_output_without_a_tag_is_refused(self):
    self.assertIn(
      "named no platform tag",
      refused(WHEEL, "auditwheel: error: cannot read"),
    )

  def test_a_tag_newer_than_the_newest_allowed_is_refused(self):
    # tools/check_release.sh allows manylinux_2_28 at most: a wheel
    # auditwheel accepts as manylinux_2_34 (built against a newer glibc,
    # and tagged so) passes the plain check, not that one.
    newer = "dist/entangle_jax-0.6.0-cp311-cp311-manylinux_2_34_x86_64.whl"
    output = shown("manylinux_2_34_x86_64")
    self.assertIsNone(manylinux_check.problem(newer, output))
    why = manylinux_check.problem(newer, output, "manylinux_2_28")
    self.assertIn("newer than manylinux_2_28", why or "")
    # The control: the 2.28 wheel, and an older one, are within it.
    for tag in ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64"):
      self.assertIsNone(
        manylinux_check.problem(WHEEL, shown(tag), "manylinux_2_28")
      )
    arm = "dist/entangle_jax-0.6.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    self.assertIsNone(
      manylinux_check.problem(
        arm, shown("manylinux_2_28_aarch64"), "manylinux_2_28"
      )
    )

  def test_a_newest_that_is_no_tag_is_refused(self):
    with self.assertRaisesRegex(ValueError, "'2.28' is not a tag"):
      manylinux_check.problem(WHEEL, shown("manylinux_2_28_x86_64"), "2.28")

  def test_platform_of_a_multi_tagged_name(self):
    self.assertEqual(
      manylinux_check.wheel_platform(
        "x-1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
      ),
      "manylinux_2_17_x86_64",
    )


if __name__ == "__main__":
  absltest.main()
