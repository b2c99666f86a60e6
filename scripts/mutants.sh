#!/bin/sh
# Mutation testing of fleetd's security-relevant packages with gremlins (docs/testing.md,
# "Mutation testing"): each of the PACKAGES given is copied, mutated one operator at a time, and
# its own tests run against each mutant. The figures are written into docs/testing.md.
#
#   scripts/mutants.sh OUT PACKAGE...      e.g. scripts/mutants.sh /tmp/fleetd-mutants attest pki
#
# Environment: GO (go), MUTANTS_WORKERS (mutants tested at once, 2), MUTANTS_TIMEOUT (the
# timeout of one mutant's test run, as a multiple of the package's coverage run: 10),
# MUTANTS_TARGETS ("attest=90 pki=90 ...": the efficacy each package must reach), MUTANTS_DOC
# (docs/testing.md; "" writes nothing), MUTANTS_FILES (an extended regexp: only the package's
# files whose name matches are mutated, e.g. 'bootcheck|addrindex', to iterate on a few files;
# such a run's figures are of those files only, so it writes nothing into the document and has
# no target).
#
# What gremlins does per mutant, and what this script adds to keep the figures honest:
#   - gremlins copies the module and runs `go test -timeout T -failfast PKG` in the copy, PKG
#     being the mutant's package (its own tests only: a mutant of fleet that only a handlers
#     test would see is counted as not covered, or lived), T the package's coverage run
#     (`go test -cover`) times MUTANTS_TIMEOUT. A run past T is TIMED OUT, left out of the
#     efficacy as gremlins leaves it out.
#   - The package is taken from a copy of the checkout's files (tracked, and new files git does
#     not ignore), made before the run: editing the checkout while it runs changes nothing, and
#     a dev stack's state or build output is never copied.
#   - GOFLAGS=-count=1 (the coverage run, which sets T, is never a cached result),
#     -trimpath (every copy shares the build cache), -vet=off (vet's findings are not tests).
#   - gremlins counts every failing `go test` as KILLED, a mutant that does not compile (a
#     string's + turned into -) included. A `go` in front of the real one on PATH turns a build
#     failure into exit 2, which gremlins counts NOT VIABLE, left out of every figure.
#   - Only the package's own files are mutated, not its subpackages' (fleet/fleettest,
#     handlers/handlerstest: test helpers). Tests run as make test runs them, swtpm and the TPM
#     simulator included; nothing is skipped.
set -eu

GO=${GO:-go}
WORKERS=${MUTANTS_WORKERS:-2}
TIMEOUT=${MUTANTS_TIMEOUT:-10}
TARGETS=${MUTANTS_TARGETS:-}
root=$(cd "$(dirname "$0")/.." && pwd)
DOC=${MUTANTS_DOC-$root/docs/testing.md}
FILES=${MUTANTS_FILES:-}
if [ -n "$FILES" ]; then
	DOC= TARGETS=
fi

[ $# -ge 2 ] || { echo "usage: $0 OUT PACKAGE..." >&2; exit 2; }
out=$1
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)

gremlins=$("$root/scripts/tools.sh" build gremlins)
realgo=$(command -v "$GO") || { echo "mutants.sh: no $GO on PATH" >&2; exit 1; }
commit=$(git -C "$root" describe --always --dirty --abbrev=7)
date=$(date -u +%Y-%m-%d)

work=$(mktemp -d "${TMPDIR:-/tmp}/fleetd-mutants.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

# The go gremlins runs: a build failure (exit 1 with "[build failed]" or "[setup failed]") is
# exit 2, NOT VIABLE.
mkdir "$work/bin"
cat >"$work/bin/go" <<EOF
#!/bin/sh
[ "\${1:-}" = test ] || exec "$realgo" "\$@"
log=\$(mktemp "$work/go-test.XXXXXX")
"$realgo" "\$@" >"\$log" 2>&1 && rc=0 || rc=\$?
if [ \$rc -eq 1 ] && grep -Eq '\[(build|setup) failed\]' "\$log"; then rc=2; fi
cat "\$log"
rm -f "\$log"
exit \$rc
EOF
chmod 755 "$work/bin/go"

# The checkout's files, as they are now.
mkdir "$work/src"
(cd "$root" && git ls-files -z -co --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) |
	tar -xf - -C "$work/src"

pkgs=$*
for pkg in $pkgs; do
	[ -d "$work/src/$pkg" ] || { echo "mutants.sh: no package directory $pkg" >&2; exit 2; }
	# gremlins has no list of files to mutate, only regexps of files to leave out (matched against
	# the path under the package): every one of the package's files MUTANTS_FILES does not name.
	set -- --exclude-files '/'
	if [ -n "$FILES" ]; then
		for f in $(cd "$work/src/$pkg" && ls -- *.go | grep -v '_test\.go$' | grep -Ev -- "$FILES" || true); do
			set -- "$@" --exclude-files "^$(printf %s "$f" | sed 's/\./\\./g')\$"
		done
		echo "== $pkg: only the files matching '$FILES' ($(($# / 2 - 1)) left out)"
	fi
	echo "== $pkg: gremlins $(basename "$(dirname "$gremlins")"), $WORKERS workers, timeout ${TIMEOUT}x the coverage run"
	start=$(date +%s)
	# Lived and timed-out mutants are listed as they come; the JSON has every one.
	(cd "$work/src/$pkg" && PATH="$work/bin:$PATH" GOFLAGS="-count=1 -trimpath -vet=off" TMPDIR="$work" \
		nice -n 10 "$gremlins" unleash --workers "$WORKERS" --timeout-coefficient "$TIMEOUT" \
		"$@" --output-statuses lt --output "$out/$pkg.json")
	echo "== $pkg: $(($(date +%s) - start)) s"
done

set --
for pkg in $pkgs; do set -- "$@" "$out/$pkg.json"; done
"$GO" run "$root/dev/mutants" -targets "$TARGETS" -commit "$commit" -date "$date" ${DOC:+-doc "$DOC"} "$@"
