#!/usr/bin/env bash
# Runs every fuzz target of the module (each `func FuzzX` in a _test.go file,
# found by name, so a new target is fuzzed without being listed here) for a
# short fixed time: LOCKKIT_FUZZTIME (default 10s) each, on top of the seed
# corpora that `go test` already runs. A failure leaves its input under the
# package's testdata/fuzz, to commit as a regression seed once fixed.
# Extra arguments go to `go test` (e.g. -v).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${LOCKKIT_FUZZTIME:-10s}"
n=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing\.F).*/\1/p' "$file"); do
    echo "fuzz: ./$dir $target for $fuzztime"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel 2 -timeout 10m "$@" "./$dir"
    n=$((n + 1))
  done
done < <(git ls-files '*_test.go' 2>/dev/null | xargs grep -l '^func Fuzz' | sort)
if [ "$n" -eq 0 ]; then
  echo "fuzz: no fuzz target found" >&2
  exit 1
fi
echo "fuzz: $n targets, $fuzztime each: no failure"
