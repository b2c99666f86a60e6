package netboxemu

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// BenchmarkFilteredList is one device's interfaces, and its MAC addresses, read from a NetBox of 1,000 devices, as
// fleetd's device read asks for them (GET /api/dcim/interfaces/?device_id=N, and
// /api/dcim/mac-addresses/?device_id=N): the emulator's
// cost of answering it, which a storm of decisions pays three times per device (device,
// interfaces, MAC addresses). Rows are filtered before they are sorted into the model's order.
func BenchmarkFilteredList(b *testing.B) {
	e, err := Start(Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	tok, err := e.AddToken(TokenSpec{User: "fleetd"})
	if err != nil {
		b.Fatal(err)
	}
	var ids []int64
	for i := range 1000 {
		id, err := e.AddDevice(DeviceSpec{Name: fmt.Sprintf("node-%04d", i), PrimaryIPv4: fmt.Sprintf("10.1.%d.%d/16", i/250, i%250+1),
			Interfaces: []InterfaceSpec{{Name: "eth0", MACs: []string{fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256)}}}})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, list := range []string{"interfaces", "mac-addresses"} {
		b.Run(list, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/api/dcim/%s/?device_id=%d", e.URL(), list, ids[i%len(ids)]), nil)
				req.Header.Set("Authorization", "Token "+tok)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"count":1,`)) {
					b.Fatalf("status %d: %.200s", resp.StatusCode, body)
				}
			}
		})
	}
}
