# Evaluates a NixOS module (../fleetd.nix unless `module` names another) with ./lib.nix in place of
# nixpkgs' lib, for the deploy tests (deploy/nixos_*_test.go), and returns the module's `config`:
#   nix-instantiate --eval --strict --json --readonly-mode --argstr values '<json>' eval.nix
# values: {"fleetd": {...}, "fleetd-boot-check": {...}}, option values under services.<name>.
# It fails as NixOS's evaluation does (lib/modules.nix, nixos/modules/system/activation/top-level.nix):
#   - a value for an option that is not declared: "The option `…' does not exist";
#   - a value its option's type refuses, when the option is used: "A definition for option `…' is
#     not of type `…'" (lazily, as nixpkgs: an option nothing reads is not checked);
#   - an option with neither a value nor a default, when it is used: "The option `…' was accessed
#     but has no value defined";
#   - a false assertion: "Failed assertions:" and its message.
{ values, module ? ../fleetd.nix }:
let
  lib = import ./lib.nix;
  given = builtins.fromJSON values;
  file = "the test's values";
  typeOf = o: o.type or lib.types.unspecified;

  # The given values that no declared option takes, with their paths.
  unmatched = loc: options: given: builtins.concatMap
    (n:
      let l = loc ++ [ n ]; in
      if options ? ${n} && lib.isOption options.${n} then [ ]
      else if options ? ${n} && builtins.isAttrs given.${n} then unmatched l options.${n} given.${n}
      else [{ loc = l; value = given.${n}; }])
    (builtins.attrNames given);

  # Each option's value (the given one, else its default) checked against its type when read.
  evalOptions = loc: options: given: builtins.mapAttrs
    (n: o:
      let l = loc ++ [ n ]; in
      if !(lib.isOption o) then evalOptions l o (given.${n} or { })
      else if given ? ${n} then lib.checked l (typeOf o) { inherit file; value = given.${n}; }
      else if o ? default then lib.checked l (typeOf o) { file = toString module; value = o.default; }
      else throw "The option `${lib.showOption l}' was accessed but has no value defined. Try setting the option.")
    options;

  # pkgs: only what the module takes a default from, a store path standing for each package.
  pkgs = { cloud-init = "/nix/store/00000000000000000000000000000000-cloud-init-24.1.4"; };
  m = import module { inherit config lib pkgs; };
  config.services = evalOptions [ "services" ] m.options.services given;
  extra = unmatched [ "services" ] m.options.services given;
  failed = map (a: a.message) (builtins.filter (a: !a.assertion) (m.config.assertions or [ ]));
in
if extra != [ ] then
  let e = builtins.head extra; in
  throw "The option `${lib.showOption e.loc}' does not exist. Definition values:\n- In `${file}': ${builtins.toJSON e.value}"
else if failed != [ ] then
  throw "\nFailed assertions:\n${builtins.concatStringsSep "\n" (map (x: "- ${x}") failed)}"
else { inherit (m) config; }
