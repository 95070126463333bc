# Helpers that .ci/run and tools/ci_bazel.sh share (sourced, not run).
#
# Phases: `section NAME` ends the running phase and starts NAME. Each ended
# phase is appended to $CI_TIMINGS as "SECONDS  CPU  [LANE] NAME", so that
# phases run in parallel lanes (CI_LANE) land in one table; print_timings
# prints it. CPU is the CPU-seconds (user and system) of the processes the
# phase ran and waited for: on two cores shared by four lanes, the run's
# length follows the sum of these, not one lane's wall time (issue 80).
# Daemons are not in it: Bazel's server does the builds and runs the
# tests, so a Bazel phase's CPU is mostly missing (its wall time shows it).

CI_LANE=${CI_LANE:-main}
: "${CI_TIMINGS:=$(mktemp)}"
export CI_TIMINGS
_ci_phase=""
_ci_phase_start=$SECONDS

# _ci_ticks: the CPU, in clock ticks, of this shell's children that it has
# waited for (fields 16 and 17 of /proc/PID/stat: cutime and cstime); 0
# where there is no /proc. Set, not printed: a command substitution would
# read its own subshell's.
_ci_read_ticks() {
  local stat fields
  _ci_ticks=0
  read -r stat 2>/dev/null </proc/$BASHPID/stat || return 0
  # After "PID (COMMAND) ", the first field is the 3rd.
  read -ra fields <<<"${stat##*) }"
  _ci_ticks=$((${fields[13]:-0} + ${fields[14]:-0}))
}

# Prints the CPU-seconds the Bazel server of the workspace in the current
# directory has used so far (its own and its waited-for children's: the
# builds and tests it ran), which no phase's CPU counts.
bazel_server_cpu() {
  local pid stat fields
  pid=$(bazel info server_pid 2>/dev/null) || return 0
  read -r stat 2>/dev/null </proc/"$pid"/stat || return 0
  read -ra fields <<<"${stat##*) }"
  echo "Bazel's server ($PWD): $(((${fields[11]:-0} + ${fields[12]:-0} + ${fields[13]:-0} + ${fields[14]:-0}) / _ci_clock_ticks)) CPU-s so far"
}
_ci_clock_ticks=$(getconf CLK_TCK 2>/dev/null || echo 100)
_ci_read_ticks
_ci_phase_ticks=$_ci_ticks

end_phase() {
  if [[ -n $_ci_phase ]]; then
    _ci_read_ticks
    local cpu=$(((_ci_ticks - _ci_phase_ticks) / _ci_clock_ticks))
    printf '%6ds %6ds  [%s] %s\n' $((SECONDS - _ci_phase_start)) "$cpu" \
      "$CI_LANE" "$_ci_phase" >>"$CI_TIMINGS"
    printf '=== [%s] %s: %ds (%d CPU-s) ===\n' "$CI_LANE" "$_ci_phase" \
      $((SECONDS - _ci_phase_start)) "$cpu"
  fi
  _ci_phase=""
}

section() {
  end_phase
  _ci_phase=$*
  _ci_phase_start=$SECONDS
  _ci_read_ticks
  _ci_phase_ticks=$_ci_ticks
  printf '\n=== [%s] %s ===\n' "$CI_LANE" "$*"
}

print_timings() {
  printf '\n=== phase timings (total %ds; lanes run in parallel; wall, then CPU) ===\n' "$1"
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
