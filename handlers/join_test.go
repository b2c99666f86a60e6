package handlers_test

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"sigs.k8s.io/yaml"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/dev/fakehw"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// TestJoiningNodesToken: the real agent on the TPM simulator enrolls node-a of a class that
// joins Kubernetes. The attestation creates the Secret of node-a's own bootstrap token in the
// workload cluster (kube-system's bootstrap-token-<id>, authentication only, Talos's bootstrap
// group, expiring with the configuration's TTL plus the join deadline, its description naming
// the device and the request); the configuration fetched carries that token in cluster.token;
// the delivery leaves node-a joining. A cluster that cannot take the Secret, or no cluster at
// all, fails the enrollment before anything is recorded: node-a stays pending, no certificate
// recorded, nothing wiped.
func TestJoiningNodesToken(t *testing.T) {
	member, _ := fleettest.Catalog().Class("talos-member")
	enroll := func(t *testing.T, cluster fleet.Cluster) (*handlerstest.Fleetd, string, error) {
		sim, ch := simulatorBoot(t)
		t.Cleanup(func() { sim.Close() })
		d := fleettest.Declared(12, "node-a")
		d.Declared.Class, d.Declared.EKHashes = member.Name, []string{simulatorEK(t, ch)}
		d.Address = netip.MustParsePrefix("127.0.0.1/8")
		d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-k3f9x2mq", Workflow: "node-a-provision-k3f9x2mq"}
		f := handlerstest.New(t, handlerstest.Config{Catalog: fleet.NewCatalog(member), Devices: []fleet.Device{d}, Cluster: cluster})
		workflow := t.TempDir()
		disk := fakehw.Disk{Dev: "nvme0n1", Serial: "S4EWNX0R123456", Model: "Samsung_SSD_980_1TB", Bus: "nvme"}
		sysRoot, devRoot, err := fakehw.Write(t.TempDir(), fakehw.Machine{UUID: machineUUID, Serial: "SN-1", TPMMajor: "2", Disks: []fakehw.Disk{disk}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err = agent.Enroll(ctx, agent.EnrollConfig{Conn: agent.Conn{FleetdURL: f.URL, RetryWait: time.Millisecond, Retries: -1}, Device: "node-a", Request: "provision-k3f9x2mq", Channel: ch,
			SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: workflow, Log: zerolog.Nop()})
		return f, workflow, err
	}
	t.Run("ok/its own token, created at the attestation and delivered", func(t *testing.T) {
		cluster := fleettest.NewCluster()
		f, workflow, err := enroll(t, cluster)
		if err != nil {
			t.Fatalf("enroll: %v", err)
		}
		want, err := fleettest.SealKeys().BootstrapToken(fleettest.SealKey().ID, 12, "provision-k3f9x2mq")
		if err != nil {
			t.Fatal(err)
		}
		sec, ok := cluster.Tokens[want.ID]
		if !ok || len(cluster.Tokens) != 1 {
			t.Fatalf("token Secrets %v, want node-a's %s only", cluster.Tokens, want.ID)
		}
		if sec.Token != want || sec.Group != "system:bootstrappers:nodes" ||
			!strings.Contains(sec.Description, "node-a") || !strings.Contains(sec.Description, "provision-k3f9x2mq") {
			t.Errorf("Secret %+v", sec)
		}
		d := f.Inv.Get(12)
		if ttl := sec.Expires.Sub(d.Owned.Identity.Issued); ttl > fleet.DefaultConfigTTL+fleet.DefaultJoinDeadline || ttl < fleet.DefaultConfigTTL+fleet.DefaultJoinDeadline-time.Second {
			t.Errorf("the token lives %s after the attestation, want the configuration's TTL plus the join deadline", ttl)
		}
		body := fetchConfig(t, f.URL, fleet.KindTalos, filepath.Join(workflow, agent.FileFetchSecret))
		var cfg struct {
			Cluster struct {
				Token string `json:"token"`
			} `json:"cluster"`
		}
		if err := yaml.Unmarshal(body, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Cluster.Token != want.String() {
			t.Errorf("cluster.token %q, want node-a's own %s", cfg.Cluster.Token, want)
		}
		if d := f.Inv.Get(12); d.Owned.State != fleet.StateJoining || d.Status != fleet.StatusActive {
			t.Errorf("after the delivery: %s/%s, want joining/active", d.Owned.State, d.Status)
		}
	})
	for _, r := range []struct {
		name    string
		cluster fleet.Cluster
	}{
		{"refuse/the cluster refuses the Secret", &fleettest.Cluster{Fail: errors.New("secrets is forbidden")}},
		{"refuse/no workload cluster configured", nil},
	} {
		t.Run(r.name, func(t *testing.T) {
			f, _, err := enroll(t, r.cluster)
			if err == nil {
				t.Fatal("the enrollment succeeded")
			}
			d := f.Inv.Get(12)
			if d.Owned.State != fleet.StatePending || d.Owned.LAKSerial != "" || !d.Owned.Identity.Empty() {
				t.Errorf("after the refusal: state %s, lak %q, identity %v; want pending, nothing recorded", d.Owned.State, d.Owned.LAKSerial, !d.Owned.Identity.Empty())
			}
		})
	}
}
