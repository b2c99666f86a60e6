#!/bin/sh
# Installs the Debian packages fleetd's tests and development stack need, when they are missing.
# Called by `make test`, `make run` and CI; it does nothing when everything is present.
#   swtpm, swtpm-tools  software TPMs for simulated machines (swtpm, swtpm_setup, swtpm_localca)
#   tpm2-tools          reading a TPM by hand in tests and runbooks
#   kea-dhcp4-server    the real Kea that checks and reloads the reservations file
#   prometheus          promtool, which checks and unit-tests the alert rules
#   gcc, libc6-dev      the C toolchain cgo needs: the go-tpm-tools TPM simulator (C sources) and
#                       the race detector (make test runs -race); without gcc, Go turns cgo off
#                       and the packages that start the simulator do not build
#   libssl-dev          libcrypto for the simulator's cgo build
#   nix-bin             nix-instantiate, which parses the NixOS module
#   systemd             systemd-analyze, which verifies the units (the deploy tests fail without it)
#   cloud-init          the real cloud-init that validates the cloud-init classes and fleetd's NoCloud seeds
#   jq, curl            the docs' commands, which the runbook test runs as written
#   python3-pynetbox    pynetbox, a real NetBox client that drives the NetBox emulator in its tests
#                       (under Debian's /usr/bin/python3, which sees Debian's Python packages)
set -eu
need=""
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
have_cmd swtpm || need="$need swtpm"
have_cmd swtpm_setup || need="$need swtpm-tools"
have_cmd tpm2_nvread || need="$need tpm2-tools"
have_cmd kea-dhcp4 || need="$need kea-dhcp4-server"
have_cmd promtool || need="$need prometheus"
have_cmd gcc || need="$need gcc"
have_pkg libc6-dev || need="$need libc6-dev"
have_pkg libssl-dev || need="$need libssl-dev"
have_cmd nix-instantiate || need="$need nix-bin"
have_cmd systemd-analyze || need="$need systemd"
have_cmd cloud-init || need="$need cloud-init"
have_cmd jq || need="$need jq"
have_cmd curl || need="$need curl"
/usr/bin/python3 -c 'import pynetbox' >/dev/null 2>&1 || need="$need python3-pynetbox"
[ -z "$need" ] && exit 0

echo "install-deps: installing missing Debian packages:$need" >&2
sudo=""
if [ "$(id -u)" != 0 ]; then
	if have_cmd sudo; then sudo="sudo"; else
		echo "install-deps: need root (or sudo) to apt-get install:$need" >&2
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
# kea's and prometheus's packages try to start services; there is no init system in CI.
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends $need >/dev/null
