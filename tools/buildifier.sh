#!/usr/bin/env bash
# Formats (default) or checks (--check) every BUILD, .bzl, WORKSPACE and
# MODULE.bazel file with buildifier, taken from npm (@bazel/buildifier), with
# every lint warning on: the native-* ones check that each file loads the
# rules it uses (from rules_cc/rules_python; offline Bazel 4.2.3 gets
# stand-ins for both from tools/bazel/offline.bzl). The stand-ins themselves
# forward to the native rules, so they are only formatted, not linted.
set -euo pipefail
cd "$(dirname "$0")/.."
version=8.2.1
mode=fix
[[ "${1:-}" == "--check" ]] && mode=check
stand_ins='^tools/bazel/(rules_cc|rules_python)/'
all=$(git ls-files --cached --others --exclude-standard \
  '*BUILD.bazel' '*.bzl' '*WORKSPACE' '*MODULE.bazel')
linted=$(grep -Ev "$stand_ins" <<<"$all")
forwarding=$(grep -E "$stand_ins" <<<"$all")
buildifier() { npx --yes "@bazel/buildifier@$version" -mode="$mode" "$@"; }
# shellcheck disable=SC2086 # one file name per word
buildifier -lint=warn $linted
# shellcheck disable=SC2086
buildifier -lint=off $forwarding
