# Helpers that .ci/run and tools/ci_bazel.sh share (sourced, not run).
#
# Phases: `section NAME` ends the running phase and starts NAME. Each ended
# phase is appended to $CI_TIMINGS as "SECONDS  [LANE] NAME", so that phases
# run in parallel lanes (CI_LANE) land in one table; print_timings prints it.

CI_LANE=${CI_LANE:-main}
: "${CI_TIMINGS:=$(mktemp)}"
export CI_TIMINGS
_ci_phase=""
_ci_phase_start=$SECONDS

end_phase() {
  if [[ -n $_ci_phase ]]; then
    printf '%6ds  [%s] %s\n' $((SECONDS - _ci_phase_start)) "$CI_LANE" \
      "$_ci_phase" >>"$CI_TIMINGS"
    printf '=== [%s] %s: %ds ===\n' "$CI_LANE" "$_ci_phase" \
      $((SECONDS - _ci_phase_start))
  fi
  _ci_phase=""
}

section() {
  end_phase
  _ci_phase=$*
  _ci_phase_start=$SECONDS
  printf '\n=== [%s] %s ===\n' "$CI_LANE" "$*"
}

print_timings() {
  printf '\n=== phase timings (total %ds; lanes run in parallel) ===\n' "$1"
  cat "$CI_TIMINGS"
}

# pytest, failing on any exit status but 0 (5, "no tests ran", included).
run_pytest() {
  local status=0
  "$@" || status=$?
  if ((status != 0)); then
    echo "pytest failed (exit status $status): $*" >&2
    exit "$status"
  fi
}

# What an install can break, run against each installed package (the three
# README Install routes and the Bazel wheel): the package's files, the
# extension and what it registers, the runtime ordering test with its
# control, export in a fresh process, the example store's extension, and the
# demo. The whole
# suite runs once per interpreter/jax pair: README Development (3.11), the
# oldest lock, and the newest Python's under `bazel test //...` with the
# files Bazel leaves out run by pytest.
INSTALLED_SUITE=(
  tests/repository/installed_files_test.py
  tests/loading/extensions_test.py
  tests/primitive/hazard_test.py
  tests/sharding/export_test.py
  tests/example_store/example_resource_test.py
  tests/example_store/demo_test.py
)

# INSTALLED_SUITE against the entangle_jax installed for python $1, run from
# a copy of tests/ (and the page that lists the package's files, and the
# licence files with pyproject.toml, which lists them, that
# installed_files_test compares with the installed ones) so that no
# checkout's entangle_jax/ is imported. $2: the checkout to copy from; $3:
# an empty scratch folder.
suite_against_installed() {
  local python=$1 checkout=$2 dir=$3
  mkdir -p "$dir/docs"
  cp -r "$checkout/tests" "$dir/tests"
  cp "$checkout/docs/development.md" "$dir/docs/"
  cp "$checkout/pyproject.toml" "$checkout/LICENSE" "$checkout/THIRD_PARTY_NOTICES" "$dir/"
  (
    cd "$dir"
    "$python" -c 'import entangle_jax, sys; f = entangle_jax.__file__; print("imported", entangle_jax.__version__, "from", f); sys.exit("site-packages" not in f)'
    run_pytest "$python" -m pytest -q -p no:cacheprovider "${INSTALLED_SUITE[@]}"
  )
}
