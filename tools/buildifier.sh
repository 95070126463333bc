#!/usr/bin/env bash
# Formats (default) or checks (--check) every BUILD/.bzl file with buildifier,
# taken from npm (@bazel/buildifier). The native-* lint warnings are off on
# purpose: the BUILD files use the native rule names without loads, which
# works from Bazel 4.2.3 (no rules_python/rules_cc offline) to 8.x (which
# autoloads them from the deps MODULE.bazel declares).
set -euo pipefail
cd "$(dirname "$0")/.."
version=8.2.1
native_warnings=(
  native-cc-binary native-cc-fdo-prefetch-hints native-cc-fdo-profile
  native-cc-import native-cc-library native-cc-objc-import
  native-cc-objc-library native-cc-proto native-cc-shared-library
  native-cc-test native-cc-toolchain native-cc-toolchain-suite native-py
  native-sh-binary
)
warnings=$(printf -- '-%s,' "${native_warnings[@]}")
mode=fix
[[ "${1:-}" == "--check" ]] && mode=check
exec npx --yes "@bazel/buildifier@$version" -mode="$mode" -lint=warn \
  -warnings="${warnings%,}" -r .
