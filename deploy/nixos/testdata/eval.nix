# Evaluates deploy/nixos/fleetd.nix without nixpkgs, for deploy/nixos_test.go: a stand-in for the
# few `lib` functions the module uses (same results as nixpkgs' lib for the values tested), option
# defaults filled in the way the module system does, and the module's `config` returned as JSON.
#   nix-instantiate --eval --strict --json --readonly-mode --argstr values '<json>' eval.nix
# values: {"fleetd": {...}, "fleetd-boot-check": {...}}, option values by name.
{ values }:
let
  user = builtins.fromJSON values;
  safe = s: builtins.match "[[:alnum:],._+:@%/-]+" s != null;
  escapeShellArg = s:
    if safe s then s else "'" + builtins.replaceStrings [ "'" ] [ "'\\''" ] s + "'";
  recursiveUpdate = a: b:
    a // builtins.mapAttrs
      (n: v: if builtins.isAttrs v && a ? ${n} && builtins.isAttrs a.${n} then recursiveUpdate a.${n} v else v)
      b;
  type = name: { inherit name; };
  lib = {
    mkEnableOption = description: { _type = "option"; default = false; inherit description; };
    mkOption = attrs: attrs // { _type = "option"; };
    mkIf = cond: value: if cond then value else { };
    mkMerge = builtins.foldl' recursiveUpdate { };
    types = {
      bool = type "bool";
      str = type "str";
      path = type "path";
      package = type "package";
      attrsOf = type;
      listOf = type;
      nullOr = type;
    };
    toInt = s:
      if builtins.match "[0-9]+" s != null then builtins.fromJSON s
      else throw "toInt: ${s} is not a number";
    last = l: builtins.elemAt l (builtins.length l - 1);
    splitString = sep: s: builtins.filter builtins.isString (builtins.split sep s);
    optional = cond: x: if cond then [ x ] else [ ];
    optionals = cond: l: if cond then l else [ ];
    optionalAttrs = cond: attrs: if cond then attrs else { };
    mapAttrsToList = f: attrs: map (n: f n attrs.${n}) (builtins.attrNames attrs);
    filterAttrs = pred: attrs:
      builtins.removeAttrs attrs (builtins.filter (n: !pred n attrs.${n}) (builtins.attrNames attrs));
    attrValues = attrs: map (n: attrs.${n}) (builtins.attrNames attrs);
    concatLists = builtins.concatLists;
    escapeShellArgs = l: builtins.concatStringsSep " " (map escapeShellArg l);
  };
  # Options may nest (listen.http); an attribute set that is not an option is a group of them.
  fill = options: given:
    builtins.mapAttrs
      (n: o:
        if (o._type or null) != "option" then fill o (given.${n} or { })
        else if given ? ${n} then given.${n}
        else o.default)
      options;
  # pkgs: only what the module takes a default from, as a store path stands for a package.
  pkgs = { cloud-init = "/nix/store/00000000000000000000000000000000-cloud-init-24.1.4"; };
  module = import ../fleetd.nix { inherit config lib pkgs; };
  config.services = builtins.mapAttrs (n: options: fill options (user.${n} or { })) module.options.services;
in
{
  inherit (module) config;
  options = builtins.mapAttrs (n: builtins.attrNames) module.options.services;
}
