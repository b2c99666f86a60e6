#!/bin/sh
# Third-party tools the tests run for real, built once per machine from their Go modules into a
# cache keyed by each tool's version, outside the checkout (docs/design.md, "Development stack").
#
#   scripts/tools.sh build NAME   build NAME unless its version is cached; print the binary's path
#   scripts/tools.sh path NAME    print the cached binary's path; fail (exit 1) if it is not built
#   scripts/tools.sh list         print every NAME with its version (and "opt-in" after the tools
#                                 only an opt-in make target runs, which make tools leaves unbuilt)
#
# The cache is ${FLEETD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetd-tools}/NAME-VERSION/.
# A fresh clone on the same machine (CI) reuses it; a new version is a new directory, so changing
# a version below rebuilds that tool and nothing else. Builds go to a temporary directory that is
# renamed into place only when complete, under a lock, so a killed or concurrent build never
# leaves a half-built tool behind. Each build prints its wall time on stderr.
#
# Adding a tool: a line in versions(), and a case in build_one() that leaves the binary at
# "$out/NAME". Modules come through the Go module proxy only (the build needs nothing else).
set -eu

cache="${FLEETD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetd-tools}"
GO="${GO:-go}"
root=$(cd "$(dirname "$0")/.." && pwd)

# NAME VERSION [opt-in], one a line. An opt-in tool is built the first time its make target runs
# (Tinkerbell v0.12.2's: make test-compat; gremlins: make mutants; golangci-lint: make lint, which
# make test runs), not by make tools, so make test never waits for the first two and make run
# never waits for golangci-lint.
versions() {
	cat <<-EOF
	tofu v1.12.6
	terraform-provider-restapi v1.20.0
	tinkerbell v0.25.0
	tink-agent v0.25.0
	kube-apiserver v1.36.3
	kube-controller-manager v1.36.3
	tink-controller v0.12.2 opt-in
	tink-server v0.12.2 opt-in
	tink-worker v0.12.2 opt-in
	golangci-lint v2.15.0 opt-in
	gremlins v0.6.0 opt-in
	talos-meta v1.11.5-fleetd2
	EOF
}

version_of() {
	versions | awk -v n="$1" '$1 == n { print $2; found = 1 } END { exit !found }' ||
		{ echo "tools.sh: unknown tool '$1' (known: $(versions | awk '{printf "%s ", $1}'))" >&2; exit 2; }
}

# modcopy MODULE VERSION DIR: a writable copy of the module's source from the module cache.
# Building inside the module (not with `go install M@V`) keeps its own go.mod, replace
# directives included (OpenTofu's go.mod replaces hcl/v2, which `go install` refuses).
modcopy() {
	src=$("$GO" mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
	[ -n "$src" ] || { echo "tools.sh: go mod download $1@$2 gave no directory" >&2; exit 1; }
	cp -R "$src/." "$3"
	chmod -R u+w "$3"
}

# build_one NAME VERSION OUT: build NAME at VERSION, leaving the binary at OUT/NAME.
build_one() {
	work="$3/src"
	mkdir -p "$work"
	case "$1" in
	tofu)
		# reference: OpenTofu's own release build (ldflags drop the -dev suffix).
		modcopy github.com/opentofu/opentofu "$2" "$work"
		(cd "$work" && CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false \
			-ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "$3/tofu" ./cmd/tofu)
		;;
	terraform-provider-restapi)
		modcopy github.com/Mastercard/terraform-provider-restapi "$2" "$work"
		(cd "$work" && CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false -ldflags "-s -w" \
			-o "$3/terraform-provider-restapi" .)
		;;
	tinkerbell | tink-agent)
		# The current Tinkerbell's own programs, built from interop/tinkerbell: that module's
		# go.mod and go.sum pin tinkerbell/tinkerbell and every dependency (its version must be
		# the one above). No build tags: `tinkerbell` is built without its embedded etcd,
		# kube-apiserver and controller-manager, which the development stack does not run.
		# Kubernetes' own programs (k8s.io/kubernetes, which this module requires at v1.36.3)
		# build the same way: a line in versions() and a package path below.
		mod="$root/interop/tinkerbell"
		case "$1" in
		tinkerbell) pkg=github.com/tinkerbell/tinkerbell/cmd/tinkerbell ;;
		tink-agent) pkg=github.com/tinkerbell/tinkerbell/cmd/agent ;;
		esac
		grep -Eq "^[[:space:]]*(require[[:space:]]+)?github.com/tinkerbell/tinkerbell $2([[:space:]]|\$)" "$mod/go.mod" ||
			{ echo "tools.sh: $mod/go.mod does not require github.com/tinkerbell/tinkerbell $2: change both together" >&2; exit 1; }
		(cd "$mod" && CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false -ldflags "-s -w" -o "$3/$1" "$pkg")
		;;
	kube-apiserver | kube-controller-manager)
		# Kubernetes' own programs, which the cluster tests run for real (dev/kubecluster), built
		# from interop/tinkerbell: Tinkerbell v0.25.0 requires k8s.io/kubernetes at exactly this
		# version, so that module's go.mod and go.sum already pin it and every dependency, and the
		# two share most of their compile with each other. The version is stamped the way
		# Kubernetes' own release build does (hack/lib/version.sh), so /version and the logs say
		# which Kubernetes this is rather than v0.0.0-master.
		mod="$root/interop/tinkerbell"
		grep -Eq "^[[:space:]]*(require[[:space:]]+)?k8s.io/kubernetes $2([[:space:]]|\$)" "$mod/go.mod" ||
			{ echo "tools.sh: $mod/go.mod does not require k8s.io/kubernetes $2: change both together" >&2; exit 1; }
		minor=${2#v1.}
		minor=${minor%%.*}
		ldflags="-s -w"
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ldflags="$ldflags -X $p.gitVersion=$2 -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
		done
		(cd "$mod" && CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false -ldflags "$ldflags" \
			-o "$3/$1" "k8s.io/kubernetes/cmd/$1")
		;;
	tink-controller | tink-server | tink-worker)
		# Tinkerbell v0.12.2's components (make test-compat), built from interop/tink: that
		# module's go.mod and go.sum pin tink and every dependency (its version must be the one
		# above). The three share one compile in the build cache, so the second and third cost
		# little more than a link.
		mod="$root/interop/tink"
		grep -Eq "^[[:space:]]*(require[[:space:]]+)?github.com/tinkerbell/tink $2([[:space:]]|\$)" "$mod/go.mod" ||
			{ echo "tools.sh: $mod/go.mod does not require github.com/tinkerbell/tink $2: change both together" >&2; exit 1; }
		(cd "$mod" && CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false -ldflags "-s -w" \
			-o "$3/$1" "github.com/tinkerbell/tink/cmd/$1")
		;;
	golangci-lint)
		# reference: golangci-lint's own release build (.goreleaser.yml: ./cmd/golangci-lint,
		# the version stamped into main; a date, or it reports the build info's "(devel)").
		modcopy github.com/golangci/golangci-lint/v2 "$2" "$work"
		(cd "$work" && CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false \
			-ldflags "-s -w -X main.version=${2#v} -X main.date=unknown" -o "$3/golangci-lint" ./cmd/golangci-lint)
		;;
	gremlins)
		# The mutation tester behind make mutants (docs/testing.md). Its releases (goreleaser's
		# default flags) set main.version to the version without its v; so does this.
		modcopy github.com/go-gremlins/gremlins "$2" "$work"
		(cd "$work" && CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false \
			-ldflags "-s -w -X main.version=${2#v}" -o "$3/gremlins" ./cmd/gremlins)
		;;
	talos-meta)
		# Talos's own META reader (interop/talosmeta/main.go), which the tests hold fleetd's META
		# writer against. Go lets only a package under internal/pkg/meta/ import Talos's ADV
		# package, so the program is built inside a copy of the talos module; that module's
		# go.mod replaces pkg/machinery with ./pkg/machinery, a module of its own that the talos
		# module's zip leaves out, so its copy goes there. The module's go.work names Talos's
		# development modules, which the zip leaves out too: the build runs without it. The
		# version's -fleetdN suffix is the program's own revision (the cache is keyed by the
		# version): raise it with every change of interop/talosmeta/main.go.
		tv=${2%%-fleetd*}
		modcopy github.com/siderolabs/talos "$tv" "$work"
		rm -rf "$work/pkg/machinery"
		mkdir -p "$work/pkg/machinery" "$work/internal/pkg/meta/fleetdread"
		modcopy github.com/siderolabs/talos/pkg/machinery "$tv" "$work/pkg/machinery"
		cp "$root/interop/talosmeta/main.go" "$work/internal/pkg/meta/fleetdread/main.go"
		(cd "$work" && GOWORK=off CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false -ldflags "-s -w" \
			-o "$3/talos-meta" ./internal/pkg/meta/fleetdread)
		;;
	*) echo "tools.sh: no build recipe for '$1'" >&2; exit 2 ;;
	esac
	rm -rf "$work"
}

path_of() { echo "$cache/$1-$(version_of "$1")/$1"; }

build() {
	v=$(version_of "$1")
	dir="$cache/$1-$v"
	if [ -x "$dir/$1" ]; then
		echo "tools.sh: $1 $v is cached ($dir/$1)" >&2
		echo "$dir/$1"
		return
	fi
	mkdir -p "$cache"
	# One builder at a time per tool; the loser of the race finds the winner's binary.
	exec 9>"$cache/.$1.lock"
	flock 9
	if [ ! -x "$dir/$1" ]; then
		tmp=$(mktemp -d "$cache/.$1-$v.XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		start=$(date +%s)
		echo "tools.sh: building $1 $v into $dir (once per machine)" >&2
		build_one "$1" "$v" "$tmp"
		chmod 755 "$tmp"
		rm -rf "$dir"
		mv "$tmp" "$dir"
		trap - EXIT
		echo "tools.sh: built $1 $v in $(($(date +%s) - start)) s" >&2
	fi
	exec 9>&-
	echo "$dir/$1"
}

case "${1:-}" in
build) [ $# -eq 2 ] || { echo "usage: $0 build NAME" >&2; exit 2; }; build "$2" ;;
path)
	[ $# -eq 2 ] || { echo "usage: $0 path NAME" >&2; exit 2; }
	p=$(path_of "$2")
	[ -x "$p" ] || { echo "tools.sh: $2 $(version_of "$2") is not built at $p: run 'make tools' (or '$0 build $2')" >&2; exit 1; }
	echo "$p"
	;;
list) versions ;;
*) echo "usage: $0 build NAME | path NAME | list" >&2; exit 2 ;;
esac
