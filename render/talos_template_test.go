package render

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// TestValidateTalosInMemory: what a config made from a loaded template gets (validateTalos on the
// merged config, no trip through its bytes) refuses what ValidateTalosConfig refuses of the same
// config's bytes, with the same message. Each row patches a worker template as a node patch
// would.
func TestValidateTalosInMemory(t *testing.T) {
	_, tpl := workerTemplate(t, []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil)
	install := `"install":{"diskSelector":{"serial":"S1"}}`
	cases := []struct {
		name, patch, want string
	}{
		{"ok/installable", `{"machine":{` + install + `}}`, ""},
		{"refuse/no-install-disk", `{"machine":{"network":{"hostname":"node-a"}}}`, "either install disk or diskSelector should be defined"},
		{"refuse/create-outside-var", `{"machine":{` + install + `,"files":[{"path":"/etc/fleetd/x","op":"create","content":"x","permissions":420}]}}`,
			"Talos creates machine files only under /var"},
		{"refuse/unknown-op", `{"machine":{` + install + `,"files":[{"path":"/var/x","op":"remove","content":"x","permissions":420}]}}`,
			`has op "remove"`},
		{"refuse/bad-address", `{"machine":{` + install + `,"network":{"interfaces":[{"deviceSelector":{"hardwareAddr":"3c:ec:ef:4c:4f:54"},"addresses":["10.0.0.300/24"]}]}}}`,
			"networking.os.device.addresses"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := configpatcher.LoadPatch([]byte(tc.patch))
			if err != nil {
				t.Fatal(err)
			}
			out, err := configpatcher.Apply(configpatcher.WithConfig(tpl.cfg), []configpatcher.Patch{p})
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := out.Config()
			if err != nil {
				t.Fatal(err)
			}
			body, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
			if err != nil {
				t.Fatal(err)
			}
			_, memErr := validateTalos(cfg)
			_, loadErr := ValidateTalosConfig(body)
			if tc.want == "" {
				if memErr != nil || loadErr != nil {
					t.Fatalf("in memory: %v; loaded: %v; want both accepted", memErr, loadErr)
				}
				return
			}
			if memErr == nil || !errors.Is(memErr, fleet.ErrConfigRejected) || !strings.Contains(memErr.Error(), tc.want) {
				t.Errorf("in memory = %v, want a rejection saying %q", memErr, tc.want)
			}
			if loadErr == nil || memErr == nil || loadErr.Error() != memErr.Error() {
				t.Errorf("loaded = %v\nin memory = %v\nwant the same refusal", loadErr, memErr)
			}
		})
	}
	// The template is not changed by the configs made from it.
	raw, err := tpl.cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "diskSelector") || strings.Contains(string(raw), "/var/x") {
		t.Errorf("a node patch reached the template:\n%s", raw)
	}
}

// TestNodePatchAsTalosLoadsIt: the node patch fleetd builds as a typed document merges into a
// class's template exactly as Talos's own loader makes of the same patch written as a document
// (configpatcher.LoadPatch), byte for byte in the encoded config, with and without time servers.
func TestNodePatchAsTalosLoadsIt(t *testing.T) {
	files := []api.NodeFile{
		{Name: fleet.NodeFileLAKBlob, Mode: 0o600, Data: []byte(`{"KeyEncoding":1,"TPMVersion":2}`)},
		{Name: fleet.NodeFileLDevIDPriv, Mode: 0o600, Data: []byte{0, 1, 2, 0xff}},
	}
	d := fleet.Device{ID: 7, Name: "node-a", Address: netip.MustParsePrefix("10.0.0.21/24"),
		MACs: []fleet.MAC{"3c:ec:ef:4c:4f:54"}, Declared: fleet.Declaration{DiskSerial: "S3Z9NB0K"}}
	for _, ntp := range [][]string{{"spore.lan", "10.0.0.1"}, nil} {
		r, tpl := workerTemplate(t, []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("9.9.9.9")}, ntp)
		time := ""
		if ntp != nil {
			time = `,"time":{"servers":["spore.lan","10.0.0.1"]}`
		}
		doc := `{"machine":{"install":{"diskSelector":{"serial":"S3Z9NB0K"}},` +
			`"network":{"hostname":"node-a","nameservers":["10.0.0.1","9.9.9.9"],"interfaces":[{"deviceSelector":{"hardwareAddr":"3c:ec:ef:4c:4f:54"},` +
			`"dhcp":false,"addresses":["10.0.0.21/24"],"routes":[{"network":"0.0.0.0/0","gateway":"10.0.0.1"}]}]}` + time + `,` +
			`"files":[{"path":"/var/lib/fleetd-node/lak.blob","permissions":384,"op":"create","content":"{\"KeyEncoding\":1,\"TPMVersion\":2}"},` +
			`{"path":"/var/lib/fleetd-node/ldevid.priv.b64","permissions":384,"op":"create","content":"AAEC/w==\n"}]},"cluster":{"token":"abcdef.0123456789abcdef"}}`
		loaded, err := configpatcher.LoadPatch([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		typed, err := r.talosNodePatch(d, fleet.NodeIdentity{Files: files, BootstrapToken: fleet.BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}})
		if err != nil {
			t.Fatal(err)
		}
		var got [2]string
		for i, p := range []configpatcher.Patch{loaded, typed} {
			out, err := configpatcher.Apply(configpatcher.WithConfig(tpl.cfg), []configpatcher.Patch{p})
			if err != nil {
				t.Fatal(err)
			}
			body, err := out.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			got[i] = string(body)
		}
		if got[0] != got[1] {
			t.Errorf("NTP %v: the typed node patch makes\n%s\nTalos's loader makes of the same patch\n%s", ntp, got[1], got[0])
		}
		if !strings.Contains(got[1], "S3Z9NB0K") || !strings.Contains(got[1], "ldevid.priv.b64") {
			t.Errorf("NTP %v: the patched config lacks the node's fields:\n%s", ntp, got[1])
		}
	}
}

// workerTemplate is a renderer with the given DNS and time servers, gateway 10.0.0.1, and its
// template of a Talos worker class.
func workerTemplate(t *testing.T, dns []netip.Addr, ntp []string) (*Renderer, *talosTemplate) {
	t.Helper()
	sec, err := GenerateTalosSecrets(fleet.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{TalosSecrets: sec, ClusterName: "folly", ClusterEndpoint: "https://10.0.0.2:6443",
		DNS: dns, NTP: ntp, Gateway: netip.MustParseAddr("10.0.0.1"), Clock: fleet.SystemClock{}, Random: rand.NewChaCha8([32]byte{1})})
	if err != nil {
		t.Fatal(err)
	}
	class := fleet.Class{Name: "talos-worker", Kind: fleet.KindTalos, Talos: &fleet.TalosClass{MachineType: "worker"}}
	tpl, err := r.talos.template(class, machine.TypeWorker)
	if err != nil {
		t.Fatal(err)
	}
	return r, tpl
}
