package stack

import (
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestFleetdPortOutsideEphemeralRange: fleetd's listener ports are drawn below the kernel's
// ephemeral range, where no outgoing connection or ":0" listener can take one while fleetd
// restarts.
func TestFleetdPortOutsideEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	low, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		raw, err := freeLoopbackURL("https")
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" || u.Hostname() != "127.0.0.1" {
			t.Fatalf("freeLoopbackURL = %q (%v), want https://127.0.0.1:<port>", raw, err)
		}
		if p, _ := strconv.Atoi(u.Port()); p < reservedBelow || p >= low {
			t.Fatalf("freeLoopbackURL = %q: port outside [%d, %d), the range below the ephemeral ports", raw, reservedBelow, low)
		}
	}
}
