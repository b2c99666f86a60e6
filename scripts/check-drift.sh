#!/bin/sh
# Fails when gofmt or `go mod tidy` (in the main module and in each interop module: spire,
# tinkerbell, tink, quamina) would change a file (`go mod tidy -diff` writes nothing).
set -eu
GO=${GO:-go}
cd "$(dirname "$0")/.."
# The files git tracks (not a build's leftovers); a git that cannot list them (a clone another
# user owns, without safe.directory) fails the check instead of leaving gofmt nothing to read.
files=$(git -c safe.directory="$PWD" ls-files '*.go') || { echo "check-drift: git ls-files failed (above): cannot list the Go files"; exit 1; }
[ -n "$files" ] || { echo "check-drift: git lists no Go files"; exit 1; }
out=$(gofmt -l $files)
if [ -n "$out" ]; then
	echo "gofmt would change:"; echo "$out"; exit 1
fi
fail=0
for dir in . interop/spire interop/tinkerbell interop/tink interop/quamina; do
	if ! (cd "$dir" && $GO mod tidy -diff); then
		echo "go mod tidy would change $dir/go.mod or go.sum (the diff is above): run it there and commit"
		fail=1
	fi
done
exit $fail
