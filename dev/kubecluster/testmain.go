package kubecluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Main is a test binary's TestMain body for tests that share one cluster: it starts the cluster
// of o (a cold build of its programs included in the bound), hands it to set, runs the tests and
// stops the cluster, and returns the exit code. A cluster that does not start fails the binary:
// no test is skipped for want of it.
func Main(m *testing.M, o Options, set func(*Cluster)) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	c, err := Start(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the cluster:", err)
		return 1
	}
	set(c)
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the cluster:", err)
		code = 1
	}
	return code
}

// Clientset is client-go's clientset for cfg; t fails when it cannot be made.
func Clientset(t testing.TB, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
