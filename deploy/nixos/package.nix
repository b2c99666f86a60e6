# fleetd as a Nix package, from a release binary (`make release`, dist/fleetd-linux-<arch>): the
# binary is static, so it needs no patching. `binary` is a path; check it against dist/SHA256SUMS
# before using it. Example (configuration.nix):
#   services.fleetd.package = pkgs.callPackage ./fleetd/package.nix {
#     binary = ./fleetd/fleetd-linux-arm64;
#     version = "v0.1.0";
#   };
{ lib, stdenvNoCC, binary, version }:

stdenvNoCC.mkDerivation {
  pname = "fleetd";
  inherit version;
  dontUnpack = true;
  dontStrip = true;
  dontPatchELF = true;
  installPhase = ''
    runHook preInstall
    install -D -m 0555 ${binary} $out/bin/fleetd
    runHook postInstall
  '';
  meta = {
    description = "NetBox-driven enrollment and provisioning of bare machines with TPM attestation";
    homepage = "https://github.com/folly-infra/fleetd";
    mainProgram = "fleetd";
    platforms = [ "aarch64-linux" "x86_64-linux" ];
  };
}
