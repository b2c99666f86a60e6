// Package deploy holds the files that install fleetd (README.md lists them: the NixOS module,
// the systemd units, the Alpine script, the Talos CronJob, the agent's Containerfile) and, in its
// tests, the checks each of them must pass. It has no code: nothing imports it.
//
// To test a new deploy file, add a _test.go file here that reads it by its path relative to
// deploy/ (readFile), checks it with the real tool where one runs here, and shows that each check
// can fail by breaking the shipped text in a subtest ("refuse/..."). The helpers:
//   - systemd units: parseUnit, checkDirectives with serviceRules or bootCheckRules,
//     verifyUnits (systemd-analyze verify) and exposure (systemd-analyze security);
//   - the NixOS module: evalNixOS (must evaluate), wantNixError (must fail with a message),
//     nixPackage and sporeValues for option values; nixos/testdata/lib.nix declares the option
//     types the module may use, each as nixpkgs' lib/types.nix has it (nixos_types_test.go);
//   - Kubernetes manifests: decode strictly into k8s.io/api types (decodeCronJobFile);
//   - Tinkerbell Templates: checkAgentActions (fleetd's own Template check);
//   - the flags a file passes: add them to TestDeployFlagsExist, which asks a freshly built fleetd;
//   - bootCheckArgs is the boot check's command line every node file must run.
//
// A tool that `make deps` installs (systemd-analyze, nix-instantiate) is required: its absence
// fails the test, it never skips it.
package deploy
