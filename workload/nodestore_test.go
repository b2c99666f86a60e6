package workload

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/folly-infra/fleetd/fleet"
)

// kubeletNode is a Node as a running kubelet keeps it: its labels, addresses, capacity, images
// and the five conditions it posts (a real one is some 4–20 KB of JSON).
func kubeletNode(b *testing.B, name string) any {
	b.Helper()
	now := metav1.NewTime(time.Now())
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "123456", UID: "0c6f3c1e-2d51-4c3e-9d2e-5b1f0a7d8e9f",
		Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
			"node.kubernetes.io/instance-type": "talos-worker"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "RouteController created a route"),
		},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.20.1.17"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.34.1", OSImage: "Talos (v1.11.5)", ContainerRuntimeVersion: "containerd://2.1.4"}},
	}
	u, err := toUnstructured(n, "Node", "v1")
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// BenchmarkNodeStore measures what the Node watch holds per Node (the informer's store, each Node
// as the watch's transform keeps it): live-KiB/node, the heap the store of 10,000 kubelets'
// Nodes holds, after a collection, per Node. docs/performance.md has the figure.
func BenchmarkNodeStore(b *testing.B) {
	const nodes = 10000
	for b.Loop() {
		raw := make([]any, nodes)
		for i := range raw {
			raw[i] = kubeletNode(b, fmt.Sprintf("node-%05d", i))
		}
		store := cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc)
		for i, obj := range raw {
			slim, err := summarizeNode(obj)
			if err != nil {
				b.Fatal(err)
			}
			if err := store.Add(slim); err != nil {
				b.Fatal(err)
			}
			raw[i] = nil // the watch's decoded object is garbage once transformed
		}
		runtime.GC()
		var with, without runtime.MemStats
		runtime.ReadMemStats(&with)
		if n := len(store.ListKeys()); n != nodes {
			b.Fatalf("the store holds %d Nodes, want %d", n, nodes)
		}
		if r, ok := (&Nodes{store: store}).Node("node-00042"); !ok || !r.Ready || r.Name != "node-00042" {
			b.Fatalf("node-00042 from the store: %+v, %v; want it Ready", r, ok)
		}
		store = nil
		runtime.GC()
		runtime.ReadMemStats(&without)
		b.ReportMetric(float64(int64(with.HeapAlloc)-int64(without.HeapAlloc))/1024/nodes, "live-KiB/node")
	}
}

// TestSummarizeNode: the Node watch keeps of a Ready Node its name, Ready and last heartbeat,
// and of a Node not Ready its line of conditions as well (a join deadline journals it); the
// store keys a summary by the Node's name; a deletion's tombstone passes as it is.
func TestSummarizeNode(t *testing.T) {
	heartbeat := metav1.NewTime(time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC))
	node := func(status corev1.ConditionStatus) any {
		u, err := toUnstructured(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", ResourceVersion: "42"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "KubeletNotReady",
				Message: "container runtime network not ready", LastHeartbeatTime: heartbeat}}}}, "Node", "v1")
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	store := cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc)
	for _, tc := range []struct {
		name   string
		status corev1.ConditionStatus
		want   fleet.NodeReport
	}{
		{"ok/ready", corev1.ConditionTrue, fleet.NodeReport{Name: "node-a", Ready: true, ReadyAt: heartbeat.Time}},
		{"ok/not-ready", corev1.ConditionFalse, fleet.NodeReport{Name: "node-a", ReadyAt: heartbeat.Time,
			Conditions: "Ready=False (KubeletNotReady: container runtime network not ready)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := summarizeNode(node(tc.status))
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Update(obj); err != nil {
				t.Fatal(err)
			}
			got, ok := (&Nodes{store: store}).Node("node-a")
			if !ok || got.Name != tc.want.Name || got.Ready != tc.want.Ready || !got.ReadyAt.Equal(tc.want.ReadyAt) || got.Conditions != tc.want.Conditions {
				t.Errorf("the store's node-a: %+v, %v; want %+v", got, ok, tc.want)
			}
			if keys := store.ListKeys(); len(keys) != 1 || keys[0] != "node-a" {
				t.Errorf("store keys %q, want node-a once", keys)
			}
		})
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "node-a"}
	if obj, err := summarizeNode(tomb); err != nil || obj != any(tomb) {
		t.Errorf("a tombstone: %v, %v; want it as it was", obj, err)
	}
}
