package swtpm

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/folly-infra/fleetd/attest/eventlogs"
)

// TestStartOnATakenDataPort: the data port picked for swtpm is taken by another listener (another
// machine's swtpm, on a busy machine) before swtpm binds it. Start must not call ready the other
// listener: swtpm exits on its failed bind, and Start retries on another port. Before the fix the
// readiness probe reached the other listener, and the machine's first TPM command read EOF.
func TestStartOnATakenDataPort(t *testing.T) {
	m, err := Manufacture(context.Background(), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	taken := other.Addr().(*net.TCPAddr).Port
	picks := 0
	pickPorts = func(n int) ([]int, error) {
		picks++
		if picks == 1 {
			return []int{taken}, nil
		}
		return freePorts(n)
	}
	defer func() { pickPorts = freePorts }()
	inst, err := Start(context.Background(), m.Dir)
	if err != nil {
		t.Fatalf("Start after a taken port: %v, want a retry on another port", err)
	}
	defer func() {
		if err := inst.Stop(); err != nil {
			t.Errorf("stop swtpm: %v", err)
		}
	}()
	if inst.Addr() == net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)) {
		t.Fatalf("Start called ready the other process's listener at %s", inst.Addr())
	}
	if picks < 2 {
		t.Errorf("Start picked ports %d times, want a retry after the taken one", picks)
	}
	if err := inst.ReplayEventLog(eventlogs.RHEL8SecureBoot); err != nil {
		t.Errorf("first command on the started swtpm: %v", err)
	}
}
