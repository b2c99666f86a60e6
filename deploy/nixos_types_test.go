package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A probe module declares one option of the type under test and returns its value as config.
const probeModule = `{ config, lib, ... }:
{
  options.services.probe.value = lib.mkOption { type = with lib.types; %s; };
  config.value = config.services.probe.value;
}
`

// typeRefusal is a value a type refuses: at is the option the message names ("" for the option
// itself), desc the type description it names.
type typeRefusal struct {
	value    any
	at, desc string
}

// nixosTypes are the option types of deploy/nixos/testdata/lib.nix, each with the nixpkgs
// behaviour it stands for (lib/types.nix), values it takes and values it refuses. The module
// uses some of them; the others are there for the options to come, and tested alike.
var nixosTypes = []struct {
	expr, nixpkgs string
	accept        []any
	refuse        []typeRefusal
}{
	{expr: "bool", nixpkgs: "types.bool: isBool, described as \"boolean\"",
		accept: []any{true, false},
		refuse: []typeRefusal{{value: "true", desc: "boolean"}, {value: 1, desc: "boolean"}, {value: nil, desc: "boolean"}}},
	{expr: "str", nixpkgs: "types.str: isString, described as \"string\"",
		accept: []any{"", "fleetd"},
		refuse: []typeRefusal{{value: 1, desc: "string"}, {value: false, desc: "string"}, {value: []any{"a"}, desc: "string"}, {value: nil, desc: "string"}}},
	{expr: "int", nixpkgs: "types.int: isInt (not a float), described as \"signed integer\"",
		accept: []any{-3, 0, 8443},
		refuse: []typeRefusal{{value: 1.5, desc: "signed integer"}, {value: "80", desc: "signed integer"}}},
	{expr: "port", nixpkgs: "types.port = types.ints.u16: an int from 0 to 65535",
		accept: []any{0, 8443, 65535},
		refuse: []typeRefusal{{value: -1, desc: u16}, {value: 65536, desc: u16}, {value: "8443", desc: u16}}},
	{expr: "path", nixpkgs: "types.path: string-like and starting with \"/\"; it need not exist",
		accept: []any{"/", "/etc/fleetd/fleetd.yaml", "/does/not/exist"},
		refuse: []typeRefusal{{value: "etc/fleetd.yaml", desc: "path"}, {value: "", desc: "path"}, {value: 5, desc: "path"}}},
	{expr: "package", nixpkgs: "types.package: isDerivation (type = \"derivation\") or a store path (lib.isStorePath)",
		accept: []any{nixPackage("/tmp/fleetd"), "/nix/store/0c2jd4ljx4wg3yk0g4fbbs1m4dpiaxfx-fleetd"},
		refuse: []typeRefusal{{value: "/usr/local", desc: "package"}, {value: "/nix/store/x/bin", desc: "package"},
			{value: map[string]any{"outPath": "/tmp/fleetd"}, desc: "package"}, {value: 5, desc: "package"}}},
	{expr: `enum [ "tpm" "none" ]`, nixpkgs: "types.enum: one of the values, listed quoted in the description",
		accept: []any{"tpm", "none"},
		refuse: []typeRefusal{{value: "TPM", desc: `one of "tpm", "none"`}, {value: 1, desc: `one of "tpm", "none"`}}},
	{expr: `enum [ "tpm" ]`, nixpkgs: "types.enum of one value: a \"singular enum\"",
		accept: []any{"tpm"},
		refuse: []typeRefusal{{value: "none", desc: `value "tpm" (singular enum)`}}},
	{expr: "listOf str", nixpkgs: "types.listOf: isList, then each element as option <loc>.\"[definition 1-entry N]\"",
		accept: []any{[]any{}, []any{"adm", "kea"}},
		refuse: []typeRefusal{{value: "adm", desc: "list of string"}, {value: map[string]any{}, desc: "list of string"},
			{value: []any{"adm", 4}, at: `."[definition 1-entry 2]"`, desc: "string"}}},
	{expr: "attrsOf str", nixpkgs: "types.attrsOf: isAttrs, then each value as option <loc>.<name> (quoted unless an identifier)",
		accept: []any{map[string]any{}, map[string]any{"netbox-token": "/run/token"}},
		refuse: []typeRefusal{{value: []any{"a"}, desc: "attribute set of string"},
			{value: map[string]any{"netbox-token": 5}, at: ".netbox-token", desc: "string"},
			{value: map[string]any{"a b": true}, at: `."a b"`, desc: "string"}}},
	{expr: "nullOr str", nixpkgs: "types.nullOr: null, or what the inner type takes",
		accept: []any{nil, "127.0.0.1:8080"},
		refuse: []typeRefusal{{value: 8080, desc: "null or string"}}},
	{expr: "nullOr (listOf str)", nixpkgs: "types.nullOr passes a value on to the inner type's own checks",
		accept: []any{nil, []any{"a"}},
		refuse: []typeRefusal{{value: "a", desc: "null or (list of string)"}, {value: []any{nil}, at: `."[definition 1-entry 1]"`, desc: "string"}}},
	{expr: "listOf (nullOr str)", nixpkgs: "a description in parentheses where it would be ambiguous (optionDescriptionPhrase)",
		accept: []any{[]any{nil, "a"}},
		refuse: []typeRefusal{{value: true, desc: "list of (null or string)"}}},
	{expr: `nullOr (enum [ "a" "b" ])`, nixpkgs: "nullOr joins an enum's \"one of\" without parentheses",
		accept: []any{nil, "b"},
		refuse: []typeRefusal{{value: "c", desc: `null or one of "a", "b"`}}},
	{expr: "attrsOf (listOf port)", nixpkgs: "types nest: attrsOf, then listOf, then port, each naming its own part of the option",
		accept: []any{map[string]any{"https": []any{8443}}},
		refuse: []typeRefusal{{value: map[string]any{"https": 8443}, at: ".https", desc: "list of " + u16},
			{value: map[string]any{"https": []any{8443, 70000}}, at: `.https."[definition 1-entry 2]"`, desc: u16}}},
}

const u16 = "16 bit unsigned integer; between 0 and 65535 (both inclusive)"

// TestNixOSTypes checks every type declaration of the stand-in lib as nixpkgs' own behaves:
// through a module with one option of that type, a value it takes comes back as given, and one it
// refuses fails the evaluation with nixpkgs' message naming the option and the type.
func TestNixOSTypes(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range nixosTypes {
		module := filepath.Join(dir, "probe"+strconv.Itoa(i)+".nix")
		if err := os.WriteFile(module, []byte(fmt.Sprintf(probeModule, tc.expr)), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Run(tc.expr, func(t *testing.T) {
			for _, v := range tc.accept {
				out, err := nixEval(t, module, probe(v))
				if err != nil {
					t.Errorf("%s (%s) refused %s: %v", tc.expr, tc.nixpkgs, js(v), err)
					continue
				}
				var got struct{ Config struct{ Value any } }
				if err := json.Unmarshal(out, &got); err != nil {
					t.Fatalf("decode %s: %v", out, err)
				}
				if diff := cmp.Diff(asEvaluated(v), got.Config.Value); diff != "" {
					t.Errorf("%s took %s but gave back (-want +got):\n%s", tc.expr, js(v), diff)
				}
			}
			for _, r := range tc.refuse {
				wantNixError(t, module, probe(r.value),
					"A definition for option `services.probe.value"+r.at+"' is not of type `"+r.desc+"'")
			}
		})
	}
}

func probe(v any) map[string]map[string]any {
	return map[string]map[string]any{"probe": {"value": v}}
}

// asEvaluated is v as the evaluator prints it back: JSON numbers as float64, and a derivation as
// its outPath (builtins.toJSON of a set with outPath).
func asEvaluated(v any) any {
	if d, ok := v.(map[string]string); ok && d["type"] == "derivation" {
		return d["outPath"]
	}
	var out any
	if err := json.Unmarshal([]byte(js(v)), &out); err != nil {
		panic(err)
	}
	return out
}

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// mergeModule merges two config definitions with lib.mkMerge, as the module's mkIf blocks are.
const mergeModule = `{ lib, ... }:
{
  options.services = { };
  config = lib.mkMerge [
    { rules = [ "a" ]; unit.User = "fleetd"; }
    (lib.mkIf true { rules = [ "b" ]; unit.User = %q; unit.Group = "kea"; })
    (lib.mkIf false { rules = [ "c" ]; })
  ];
}
`

// TestNixOSMerge: definitions merge as NixOS options of those kinds do: lists concatenate
// (types.listOf), attribute sets merge by name, a false mkIf adds nothing, and one value defined
// twice differently is a conflict (mergeEqualOption).
func TestNixOSMerge(t *testing.T) {
	dir := t.TempDir()
	write := func(name, user string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(fmt.Sprintf(mergeModule, user)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out, err := nixEval(t, write("same.nix", "fleetd"), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"config":{"rules":["a","b"],"unit":{"Group":"kea","User":"fleetd"}}}`
	if string(out) != want {
		t.Errorf("merged config %s, want %s", out, want)
	}
	wantNixError(t, write("conflict.nix", "root"), map[string]any{},
		"The option `unit.User' has conflicting definition values")
}
