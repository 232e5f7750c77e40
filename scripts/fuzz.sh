#!/usr/bin/env bash
# Runs every fuzz target of the module (each `func FuzzX` in a _test.go file,
# found by name, so a new target is fuzzed without being listed here) for a
# short fixed time: LOCKKIT_FUZZTIME (default 5s) each, on top of the seed
# corpora that `go test` already runs. A failure leaves its input under the
# package's testdata/fuzz, to commit as a regression seed once fixed.
# Extra arguments go to `go test` (e.g. -v).
#
# Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a
# failure of the target: "--- FAIL: FuzzX", then the one line "context
# deadline exceeded", with no input written (go.dev/issue/75804, fixed in
# Go 1.27; it came once in CI, FuzzGenerateText at 11 s). A run that failed
# exactly so is run again, at most twice; any other failure, and any run
# that wrote a failing input, fails at once.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${LOCKKIT_FUZZTIME:-5s}"
retries=2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# coordinator_deadline: the output in $out is the coordinator's deadline
# report and nothing else failed: no input written, no message of the
# target's own (those carry a file:line), one FAIL.
coordinator_deadline() {
  ! grep -q 'Failing input written to' "$out" &&
    [ "$(grep -c -e '^--- FAIL: ' "$out")" -eq 1 ] &&
    grep -A1 -e '^--- FAIL: ' "$out" | tail -n 1 | grep -qx '    context deadline exceeded' &&
    ! grep -qE '^ +[A-Za-z0-9_./-]+\.go:[0-9]+: ' "$out"
}

n=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing\.F).*/\1/p' "$file"); do
    for ((try = 0; ; try++)); do
      echo "fuzz: ./$dir $target for $fuzztime"
      corpus="$dir/testdata/fuzz/$target"
      before=$({ ls "$corpus" 2>/dev/null || true; } | wc -l)
      rc=0
      go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel 2 -timeout 10m "$@" "./$dir" 2>&1 | tee "$out" || rc=$?
      [ "$rc" -eq 0 ] && break
      after=$({ ls "$corpus" 2>/dev/null || true; } | wc -l)
      if [ "$after" -eq "$before" ] && [ "$try" -lt "$retries" ] && coordinator_deadline; then
        echo "fuzz: $target: Go's fuzz coordinator reported its own deadline as a failure, with no input written (go.dev/issue/75804); running it again"
        continue
      fi
      exit "$rc"
    done
    n=$((n + 1))
  done
done < <(git ls-files '*_test.go' 2>/dev/null | xargs grep -l '^func Fuzz' | sort)
if [ "$n" -eq 0 ]; then
  echo "fuzz: no fuzz target found" >&2
  exit 1
fi
echo "fuzz: $n targets, $fuzztime each: no failure"
