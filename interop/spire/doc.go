// Package spire holds the interoperability tests of fleetd's LDevID with SPIRE's tpm_devid node
// attestor (docs/design.md §2 "LDevID", §4). It is a module of its own so that SPIRE's dependency
// tree (gRPC, the plugin SDK, go-plugin, HCL, …) stays out of fleetd's go.mod; `make test` and
// `make bench` run it after the main module.
//
// What the tests run is the real thing on both sides: a swtpm with an EK certificate from a local
// EK CA (dev/swtpm), enrolled through fleetd's handlers and fleet service by the real agent
// (`fleetd enroll`), which writes ldevid.pem, ldevid.pub and ldevid.priv; then SPIRE v1.13.3's own
// tpm_devid agent plugin, reading those files and talking to the same swtpm, attests to SPIRE's
// own tpm_devid server plugin, both loaded through SPIRE's plugin catalog as SPIRE loads its
// built-ins. TestSPIREBan also runs SPIRE's server itself, in the test's process as
// `spire-server run` runs it, and bans through fleetd's spire adapter on its admin socket
// (docs/operate.md, "SPIRE"). The package has no code outside its tests.
//
//	cd interop/spire && go test ./...
//	cd interop/spire && go test -run '^$' -bench . -benchmem ./...
package spire
