#!/bin/sh
# Builds fleetd's release binaries: static (no cgo), -trimpath, no VCS stamp, an empty
# build id and the version from git, for linux/arm64 (spore) and linux/amd64 (the HookOS action
# image and amd64 nodes). Writes to $DIST: fleetd-linux-arm64, fleetd-linux-amd64, SHA256SUMS.
# The same commit built with the same Go toolchain gives the same bytes, on any machine and in any
# checkout path; `scripts/release.sh check` builds twice and fails unless the sums agree.
#   VERSION  stamped into main.version (default: git describe --tags --always --dirty)
#   DIST     the output directory (default: dist)
#   GO       the go command (default: go)
set -eu
cd "$(dirname "$0")/.."
GO="${GO:-go}"
DIST="${DIST:-dist}"
VERSION="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
ARCHES="arm64 amd64"

case "$VERSION" in
"" | *[!A-Za-z0-9._+-]*)
	echo "release: VERSION \"$VERSION\" may hold only letters, digits and . _ + -" >&2
	exit 2
	;;
esac

build() { # build DIR: both binaries and SHA256SUMS into DIR
	mkdir -p "$1"
	for arch in $ARCHES; do
		# Pin everything that changes the output; GOFLAGS from the environment is not trusted.
		env CGO_ENABLED=0 GOOS=linux GOARCH="$arch" GOAMD64=v1 GOARM64=v8.0 \
			GOFLAGS=-mod=readonly GOEXPERIMENT= \
			"$GO" build -trimpath -buildvcs=false \
			-ldflags "-s -w -buildid= -X main.version=$VERSION" \
			-o "$1/fleetd-linux-$arch" .
	done
	(cd "$1" && sha256sum $(for a in $ARCHES; do echo "fleetd-linux-$a"; done) >SHA256SUMS)
}

case "${1:-build}" in
build)
	build "$DIST"
	echo "release: fleetd $VERSION ($("$GO" env GOVERSION)) in $DIST/:"
	(cd "$DIST" && for f in fleetd-linux-*; do printf '  %-20s %9d bytes\n' "$f" "$(wc -c <"$f")"; done)
	sed 's/^/  /' "$DIST/SHA256SUMS"
	;;
check)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	build "$tmp/a"
	build "$tmp/b"
	if ! cmp -s "$tmp/a/SHA256SUMS" "$tmp/b/SHA256SUMS"; then
		echo "release: two builds of $VERSION differ:" >&2
		diff "$tmp/a/SHA256SUMS" "$tmp/b/SHA256SUMS" >&2 || true
		exit 1
	fi
	echo "release: two builds of $VERSION are byte-identical:"
	sed 's/^/  /' "$tmp/a/SHA256SUMS"
	;;
*)
	echo "usage: scripts/release.sh [build|check]" >&2
	exit 2
	;;
esac
