#!/bin/sh
# Fails when gofmt or `go mod tidy` (in the main module and in interop/spire) would change a
# committed file. It restores what tidy changed, so it leaves the tree as it found it.
set -eu
GO=${GO:-go}
cd "$(dirname "$0")/.."
out=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$out" ]; then
	echo "gofmt would change:"; echo "$out"; exit 1
fi
fail=0
for dir in . interop/spire; do
	tmp=$(mktemp -d)
	cp "$dir/go.mod" "$dir/go.sum" "$tmp/"
	(cd "$dir" && $GO mod tidy)
	if ! git diff --quiet -- "$dir/go.mod" "$dir/go.sum"; then
		echo "go mod tidy changes $dir/go.mod or go.sum: run it there and commit"
		git --no-pager diff --stat -- "$dir/go.mod" "$dir/go.sum"
		fail=1
	fi
	cp "$tmp/go.mod" "$tmp/go.sum" "$dir/"
	rm -rf "$tmp"
done
exit $fail
