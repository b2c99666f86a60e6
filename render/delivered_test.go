package render_test

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/render"
)

// deliveredFiles are the LAK files and the LDevID files (binary blobs among them) a provision's
// configuration carries; asText is what a Talos config carries of them, the certificates and the
// LDevID blobs in their text form.
var (
	ldevidFiles = fleet.LDevIDFiles([]byte("-----BEGIN CERTIFICATE-----\nMIIBtjCCAVygAwIBAgIR: #ld\n-----END CERTIFICATE-----\n"),
		[]byte{0x00, 0x23, 0x00, 0x0b, 0x00, 0x04, 0x00, 0x72, 0xff, 0xfe}, []byte{0x00, 0x20, 0x80, 0x00, 0xc3, 0x28})
	deliveredFiles = append(append([]api.NodeFile{}, renderFiles...), ldevidFiles...)
	asText         = []api.NodeFile{renderFiles[0].TextForm(), renderFiles[1], ldevidFiles[0].TextForm(), ldevidFiles[1].TextForm(), ldevidFiles[2].TextForm()}
)

// TestRenderDeliversNodeFiles renders every kind with the LAK and LDevID files and reads them back
// the way the node's OS finds them: each kind delivers exactly the files, bytes and modes given,
// at /var/lib/fleetd-node/<name> (docs/design.md §5: what `fleetd boot-check` reads; docs/enrollment.md:
// what SPIRE's tpm_devid agent reads), Talos the LDevID files in their text form, one base64
// line each with the file's mode, which is what `fleetd boot-check` installs them from.
func TestRenderDeliversNodeFiles(t *testing.T) {
	r := newTestRenderer(t, nil)
	id := renderID
	id.Files = deliveredFiles
	d := renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	classFile := patch(t, `{"machine":{"files":[{"path":"/var/lib/class/motd","op":"create","permissions":420,"content":"hello"}]}}`)
	cases := []struct {
		name  string
		class fleet.Class
		want  []api.NodeFile
		raw   func(t *testing.T, body []byte) // what the kind's own reader sees
	}{
		{"ok/talos: machine.files, op create, validates in metal mode", talosWorker, asText, checkTalosFiles(1)},
		{"ok/talos: the class's own machine.files stay next to the node files", withPatches(talosCP, classFile), asText, checkTalosFiles(2)},
		{"ok/nixos-image: seed files", nixosClass, deliveredFiles, nil}, // the exact JSON is TestRenderSeed's
		{"ok/alpine-image: seed files", alpineClass, deliveredFiles, nil},
		{"ok/cloud-init-nocloud: vendor-data write_files", nocloudClass, deliveredFiles, checkVendorData},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := r.Render(d, tc.class, id)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			got, err := render.DeliveredFiles(tc.class.Kind, nc.Body)
			if err != nil {
				t.Fatalf("DeliveredFiles: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("delivered node files (-given +delivered):\n%s", diff)
			}
			for _, f := range got {
				if want := "/var/lib/fleetd-node/" + f.Name; f.Path() != want {
					t.Errorf("%s is delivered to %s, want %s", f.Name, f.Path(), want)
				}
			}
			if tc.raw != nil {
				tc.raw(t, nc.Body)
			}
		})
	}
}

// checkTalosFiles checks the config as machined reads it: it validates in metal mode, and the
// node files are machine files created (and so rewritten at every boot) under /var.
func checkTalosFiles(otherFiles int) func(t *testing.T, body []byte) {
	return func(t *testing.T, body []byte) {
		p, err := configloader.NewFromBytes(body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Validate(metal{}); err != nil {
			t.Errorf("the config does not validate in metal mode: %v", err)
		}
		files, err := p.Machine().Files()
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != otherFiles-1+len(asText) {
			t.Errorf("%d machine files, want %d", len(files), otherFiles-1+len(asText))
		}
		for _, f := range files {
			if f.Op() != "create" || !strings.HasPrefix(f.Path(), "/var/") {
				t.Errorf("machine file %s: op %q, want create under /var", f.Path(), f.Op())
			}
		}
	}
}

// checkVendorData checks vendor-data as cloud-init's write_files reads it.
func checkVendorData(t *testing.T, body []byte) {
	_, files, _ := readTar(t, body)
	vd := files["vendor-data"]
	if !strings.HasPrefix(vd, "#cloud-config\n") {
		t.Fatalf("vendor-data does not start with #cloud-config:\n%s", vd)
	}
	wf, _ := yamlMap(t, []byte(vd))["write_files"].([]any)
	if len(wf) != len(deliveredFiles) {
		t.Fatalf("vendor-data write_files = %v, want %d entries", wf, len(deliveredFiles))
	}
	for i, e := range wf {
		m, _ := e.(map[string]any)
		want := map[string]any{"path": deliveredFiles[i].Path(), "owner": "root:root", "encoding": "b64",
			"permissions": []string{"0644", "0600", "0644", "0600", "0600"}[i]}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("write_files[%d].%s = %v, want %v (a string: cloud-init reads permissions as octal text)", i, k, m[k], v)
			}
		}
	}
	if files["user-data"] != nocloudClass.CloudInit.UserData {
		t.Errorf("user-data changed: %q", files["user-data"])
	}
}

// TestRenderNodeFileRefusals: node files an OS would lose or refuse fail the render, naming why.
func TestRenderNodeFileRefusals(t *testing.T) {
	r := newTestRenderer(t, nil)
	d := renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	withFiles := func(files ...api.NodeFile) fleet.NodeIdentity { id := renderID; id.Files = files; return id }
	userData := func(ud string) fleet.Class {
		c := nocloudClass
		c.CloudInit = &fleet.CloudInitClass{UserData: ud}
		return c
	}
	blob := api.NodeFile{Name: "lak.blob", Mode: 0o600, Data: []byte("{}")}
	cases := []struct {
		name     string
		c        fleet.Class
		id       fleet.NodeIdentity
		rejected bool // wraps ErrConfigRejected (the class is wrong) or not (fleetd is)
		want     string
	}{
		{"refuse/nocloud user-data with its own write_files drops vendor-data's", userData("#cloud-config\nwrite_files:\n  - path: /etc/x\n    content: y\n"),
			renderID, true, "user-data sets write_files, so cloud-init would ignore the vendor-data's write_files"},
		{"refuse/nocloud user-data turns vendor-data off", userData("#cloud-config\nvendor_data:\n  enabled: false\n"),
			renderID, true, "turns vendor-data off"},
		{"refuse/talos node file that is not UTF-8", talosWorker, withFiles(api.NodeFile{Name: "lak.blob", Mode: 0o600, Data: []byte{0xff, 0xfe}}),
			true, "lak.blob is not UTF-8 text"},
		{"refuse/talos class creates a file outside /var", withPatches(talosWorker,
			patch(t, `{"machine":{"files":[{"path":"/etc/iscsi/iscsid.conf","op":"create","permissions":420,"content":"x"}]}}`)),
			renderID, true, "create /etc/iscsi/iscsid.conf: Talos creates machine files only under /var"},
		{"refuse/talos class file with an unknown op", withPatches(talosWorker,
			patch(t, `{"machine":{"files":[{"path":"/var/x","op":"replace","permissions":420,"content":"x"}]}}`)),
			renderID, true, `/var/x has op "replace"`},
		{"refuse/node file name with a slash", nixosClass, withFiles(api.NodeFile{Name: "../lak.pem", Mode: 0o644, Data: []byte("x")}),
			false, `check the node files: "../lak.pem" is not a plain file name`},
		{"refuse/node file given twice", alpineClass, withFiles(blob, blob), false, "check the node files: lak.blob is given twice"},
		{"refuse/empty node file", talosWorker, withFiles(api.NodeFile{Name: "lak.blob", Mode: 0o600}), false, "check the node files: lak.blob is empty"},
		{"refuse/node file mode beyond permission bits", nocloudClass, withFiles(api.NodeFile{Name: "lak.blob", Mode: 0o600 | fs.ModeSetuid, Data: []byte("x")}),
			false, "lak.blob has mode urw-------: only permission bits can be delivered and installed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := r.Render(d, tc.c, tc.id)
			if err == nil {
				t.Fatalf("Render returned a %d-byte config, want a refusal", len(nc.Body))
			}
			if got := errors.Is(err, fleet.ErrConfigRejected); got != tc.rejected {
				t.Errorf("errors.Is(err, ErrConfigRejected) = %v, want %v (err: %v)", got, tc.rejected, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}

	// ok/user-data cloud-init does not read as cloud-config is passed as it is.
	script := userData("#!/bin/sh\n# write_files: is only text in a script\necho hi\n")
	if _, err := r.Render(d, script, renderID); err != nil {
		t.Errorf("ok/a script user-data mentioning write_files: %v", err)
	}
}

// TestDeliveredFilesRefusals: a configuration whose node files cannot be read back is an error,
// not an empty list.
func TestDeliveredFilesRefusals(t *testing.T) {
	cases := []struct {
		name string
		kind fleet.Kind
		body string
		want string
	}{
		{"refuse/talos not a config", fleet.KindTalos, "machine: [", "load the Talos config"},
		{"refuse/seed not JSON", fleet.KindNixOS, "{", "decode the seed"},
		{"refuse/seed mode not octal", fleet.KindAlpine, `{"files":[{"path":"/var/lib/fleetd-node/lak.pem","mode":"rw-r--r--","content_base64":""}]}`, `mode "rw-r--r--"`},
		{"refuse/nocloud not a tar", fleet.KindCloudInit, strings.Repeat("x", 600), "read the NoCloud tar"},
		{"refuse/unknown kind", "windows", "", `kind "windows"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, err := render.DeliveredFiles(tc.kind, []byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DeliveredFiles = %v, %v; want an error saying %q", files, err, tc.want)
			}
		})
	}
}

// TestIdentityNodeFiles: recorded identity material gives the LAK files and, when both LDevID
// blobs were recorded, the LDevID files (an older fleetd recorded no private blob: its nodes get
// the LAK files only, as before).
func TestIdentityNodeFiles(t *testing.T) {
	m := fleet.IdentityMaterial{
		LAK:    fleet.LAKMaterial{Chain: [][]byte{[]byte("lak leaf"), []byte("lak ca")}, Blob: []byte(`{"KeyEncoding":1}`)},
		LDevID: fleet.LDevIDMaterial{Chain: [][]byte{[]byte("ldevid leaf"), []byte("ldevid ca")}, Public: []byte{0, 0x23}, Private: []byte{0, 0x20}},
	}
	var names []string
	for _, f := range m.NodeFiles() {
		names = append(names, fmt.Sprintf("%s %04o", f.Name, f.Mode))
	}
	want := []string{"lak.pem 0644", "lak.blob 0600", "ldevid.pem 0644", "ldevid.pub 0600", "ldevid.priv 0600"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("node files (-want +got):\n%s", diff)
	}
	if got := string(m.NodeFiles()[2].Data); strings.Count(got, "-----BEGIN CERTIFICATE-----") != 2 {
		t.Errorf("ldevid.pem is not the LDevID chain as PEM, leaf first:\n%s", got)
	}
	m.LDevID.Private = nil
	if got := m.NodeFiles(); len(got) != 2 {
		t.Errorf("without the private blob: %d node files, want the 2 LAK files", len(got))
	}
}
