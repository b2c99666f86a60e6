// Package exampletemplates embeds the example Tinkerbell Templates of this directory (docs/design.md §3),
// so that the development stack and the tests install exactly the files documented in
// README.md. Production Templates belong to the infrastructure repo.
package exampletemplates

import "embed"

// FS holds every *.yaml Template manifest of this directory.
//
//go:embed *.yaml
var FS embed.FS
