# The project's own stand-in for the parts of nixpkgs' `lib` that ../fleetd.nix uses, for
# the deploy tests (deploy/nixos_*_test.go; nixpkgs' lib is not available to them). It is written from
# nixpkgs' documented behaviour, not copied; each declaration names what it stands for
# (lib/types.nix, lib/modules.nix, lib/options.nix, lib/strings.nix, lib/lists.nix,
# lib/attrsets.nix). A type checks a definition as nixpkgs' does and fails with nixpkgs' message,
# naming the option. What it leaves out: priorities (mkDefault, mkForce, mkOrder) and several
# definitions of one option (./eval.nix gives each option at most one, from the test's values).
let
  inherit (builtins) attrNames concatStringsSep elem filter foldl' genList isAttrs isBool isInt
    isList isPath isString length mapAttrs match toJSON;

  imap1 = f: l: genList (i: f (i + 1) (builtins.elemAt l i)) (length l);

  # lib.strings.isStringLike: a string, a path, or a set that string interpolation accepts.
  isStringLike = x: isString x || isPath x || x ? outPath || x ? __toString;

  # lib.options.showOption: the option's path joined by ".", a part that is not a plain Nix
  # identifier (lib.strings.escapeNixIdentifier) in double quotes.
  showOption = loc: concatStringsSep "." (map
    (p: if match "[a-zA-Z_][a-zA-Z0-9_'-]*" p != null then p else toJSON p)
    loc);

  # lib.options.showDefs: each failing definition with the file it came from.
  showDefs = defs: concatStringsSep "" (map (d: "\n- In `${d.file}': ${toJSON d.value}") defs);

  # lib.modules.mergeDefinitions: a definition the type's check refuses fails the evaluation,
  # naming the option and the type's description; nested values are checked by the type's merge.
  checked = loc: type: def:
    if type.check def.value then type.merge loc def
    else throw "A definition for option `${showOption loc}' is not of type `${type.description}'. Definition values:${showDefs [ def ]}";

  # lib.types.mkOptionType; descriptionClass decides where a nested description needs
  # parentheses (optionDescriptionPhrase). merge defaults to the value itself (mergeEqualOption
  # with one definition).
  mkOptionType = { name, description ? name, descriptionClass ? "noun", check, merge ? loc: def: def.value }:
    { _type = "option-type"; inherit name description descriptionClass check merge; };
  phrase = classes: t: if elem t.descriptionClass classes then t.description else "(${t.description})";

  # lib.attrsets.isDerivation and lib.isStorePath (a top-level path right under the store).
  isDerivation = x: isAttrs x && (x.type or null) == "derivation";
  isStorePath = x:
    isStringLike x && (let s = toString x; in builtins.substring 0 1 s == "/" && dirOf s == builtins.storeDir);

  types = rec {
    # types.unspecified: what an option without a type gets; it accepts anything.
    unspecified = mkOptionType { name = "unspecified"; description = "unspecified value"; check = isBool; };
    # types.bool, types.str, types.int: isBool, isString (a path is not a string), isInt.
    bool = mkOptionType { name = "bool"; description = "boolean"; check = isBool; };
    str = mkOptionType { name = "str"; description = "string"; check = isString; };
    int = mkOptionType { name = "int"; description = "signed integer"; check = isInt; };
    # types.port = types.ints.u16: an int from 0 to 65535.
    port = int // {
      name = "unsignedInt16";
      description = "16 bit unsigned integer; between 0 and 65535 (both inclusive)";
      check = x: isInt x && x >= 0 && x <= 65535;
    };
    # types.path: anything string-like whose text starts with "/" (an absolute path, a Nix path
    # or a package); it need not exist.
    path = mkOptionType { name = "path"; check = x: isStringLike x && builtins.substring 0 1 (toString x) == "/"; };
    # types.package: a derivation or a store path; a plain store-path string becomes a
    # derivation-shaped set (lib.toDerivation), so "${pkg}/bin/x" works for both.
    package = mkOptionType {
      name = "package";
      check = x: isDerivation x || isStorePath x;
      merge = loc: def:
        if isDerivation def.value then def.value
        else { type = "derivation"; outPath = toString def.value; name = baseNameOf (toString def.value); };
    };
    # types.enum: one of the listed values, shown quoted (strings) or as is (ints, bools).
    enum = values:
      let show = v: if isString v then "\"${v}\"" else if isBool v then (if v then "true" else "false") else toString v;
      in mkOptionType {
        name = "enum";
        description =
          if values == [ ] then "impossible (empty enum)"
          else if length values == 1 then "value ${show (builtins.head values)} (singular enum)"
          else "one of ${concatStringsSep ", " (map show values)}";
        descriptionClass = if length values < 2 then "noun" else "conjunction";
        check = x: elem x values;
      };
    # types.listOf: a list, each element checked as option `<loc>."[definition 1-entry N]"`.
    listOf = t: mkOptionType {
      name = "listOf";
      description = "list of ${phrase [ "noun" "composite" ] t}";
      descriptionClass = "composite";
      check = isList;
      merge = loc: def: imap1 (n: v: checked (loc ++ [ "[definition 1-entry ${toString n}]" ]) t { inherit (def) file; value = v; }) def.value;
    };
    # types.attrsOf: an attribute set, each value checked as option `<loc>.<name>`.
    attrsOf = t: mkOptionType {
      name = "attrsOf";
      description = "attribute set of ${phrase [ "noun" "composite" ] t}";
      descriptionClass = "composite";
      check = isAttrs;
      merge = loc: def: mapAttrs (n: v: checked (loc ++ [ n ]) t { inherit (def) file; value = v; }) def.value;
    };
    # types.nullOr: null, or a value of the inner type (checked and merged by it).
    nullOr = t: mkOptionType {
      name = "nullOr";
      description = "null or ${phrase [ "noun" "conjunction" ] t}";
      descriptionClass = "conjunction";
      check = x: x == null || t.check x;
      merge = loc: def: if def.value == null then null else t.merge loc def;
    };
  };

  # lib.modules' config merge as NixOS options of these kinds do it: lists concatenate (listOf),
  # attribute sets merge by name (attrsOf, submodules), and any other value must be the same in
  # every definition (mergeEqualOption's "conflicting definition values").
  mergeConfig = loc: a: b:
    if isList a && isList b then a ++ b
    else if isAttrs a && isAttrs b && !(isDerivation a) then
      a // mapAttrs (n: v: if a ? ${n} then mergeConfig (loc ++ [ n ]) a.${n} v else v) b
    else if a == b then a
    else throw "The option `${showOption loc}' has conflicting definition values:\n- ${toJSON a}\n- ${toJSON b}";

  escapeShellArg = s:
    if match "[[:alnum:],._+:@%/-]+" s != null then s
    else "'" + builtins.replaceStrings [ "'" ] [ "'\\''" ] s + "'";
in
{
  inherit types showOption checked;

  # lib.options.mkOption and mkEnableOption (a bool option, default false).
  mkOption = attrs: attrs // { _type = "option"; };
  mkEnableOption = name: { _type = "option"; type = types.bool; default = false; example = true; description = "Whether to enable ${name}."; };
  isOption = x: isAttrs x && (x._type or null) == "option";

  # lib.modules.mkIf (its condition must be a boolean) and mkMerge (see mergeConfig).
  mkIf = cond: value:
    if !(isBool cond) then throw "‘mkIf’ called with a non-Boolean condition"
    else if cond then value else { };
  mkMerge = foldl' (mergeConfig [ ]) { };

  # lib.strings.toInt: a decimal integer or an error naming the string.
  toInt = s:
    if match "[0-9]+" s != null then builtins.fromJSON s
    else throw "toInt: Could not convert ${toJSON s} to int.";
  splitString = sep: s: filter isString (builtins.split sep s);
  escapeShellArgs = l: concatStringsSep " " (map escapeShellArg l);

  # lib.lists and lib.attrsets, as named.
  last = l: builtins.elemAt l (length l - 1);
  optional = cond: x: if cond then [ x ] else [ ];
  optionals = cond: l: if cond then l else [ ];
  concatLists = builtins.concatLists;
  optionalAttrs = cond: attrs: if cond then attrs else { };
  mapAttrsToList = f: attrs: map (n: f n attrs.${n}) (attrNames attrs);
  filterAttrs = pred: attrs: removeAttrs attrs (filter (n: !pred n attrs.${n}) (attrNames attrs));
  attrValues = attrs: map (n: attrs.${n}) (attrNames attrs);
}
