package load_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
)

// The steady state (LOAD_MODE=steady, docs/performance.md "The steady state at 10,000
// devices"): a fleet that is installed and running, as fleetd spends most of its life, at
// fleetd's default intervals.
const (
	// steadyInterval is fleetd's default reconcile.interval, which the steady state runs at.
	steadyInterval = 2 * time.Minute
	// pageObjects scales the NetBox emulator's latency with a list's page: a page of n objects
	// takes LOAD_NETBOX_LATENCY × n/50 (50 is NetBox's default page size).
	pageObjects = 50
	// stormSize is the steady state's storm: provisions asked at once through NetBox.
	stormSize = 500
	// sarWindow and sarPerKubelet model the authorization webhook's traffic: the API server
	// asks fleetd once per distinct request of a node per unauthorizedTTL (30 s in the Talos
	// configuration fleetd renders: fleetd never allows, so every answer is cached that long),
	// and a kubelet running a few pods makes about five distinct requests in that time (its
	// Lease, its Node's status, its Node, its pods' list, a Secret or ConfigMap of a pod).
	sarWindow     = 30 * time.Second
	sarPerKubelet = 5
	sarDuration   = 2 * time.Minute
)

// steadyConfig is the steady state's shape, from the environment (TestMain).
type steadyConfig struct {
	pool      int           // LOAD_POOL: machines installed for real, whose boot checks run (default 32)
	instances int           // LOAD_INSTANCES: fleetd instances (default 1)
	minutes   time.Duration // LOAD_STEADY_MINUTES: the boot checks' phase (default 15 minutes)
}

var steady *steadyConfig // nil in the lifecycle mode

// steadyOptions are the stack's options for the steady state.
func steadyOptions(o stack.Options) stack.Options {
	o.ExtraDevices = steady.pool
	o.ReconcileInterval = steadyInterval
	o.NetBoxLatencyObjects = pageObjects
	o.FleetdInstances = steady.instances
	o.DebugListen = true // heap profiles into LOAD_PROFILE_DIR (heapProfiles)
	// The authorization webhook needs the workload cluster, whose API server asks one fleetd.
	o.WorkloadCluster = steady.instances == 1
	return o
}

// testSteady: LOAD_DEVICES active devices, sealed (LOAD_POOL of them installed for real on the
// stack's machines, the rest AddSealedDevices' copies of one of those), and besides them 500
// declared devices for the storm. Phases: at rest over one reconcile interval; the boot checks
// of the whole fleet at its hourly rate (LOAD_DEVICES/3600 a second, run by the pool's machines
// in turn) for LOAD_STEADY_MINUTES; the authorization webhook's traffic of as many kubelets
// (with one instance); the storm of 500 provisions through NetBox; a renewal wave (every pool
// node's certificates due, checked at the hourly rate). Each phase reports fleetd's CPU (each
// instance's), its RSS, NetBox's requests by endpoint per device-hour and the reconcile passes'
// wall time; the test fails when anything was dropped or made twice, when fleetd wrote to a
// device in the steady state without a boot check asking, or when the webhook denied a node in
// good standing.
func testSteady(t *testing.T) {
	s := needStack(t)
	ctx := context.Background()
	if devices < steady.pool {
		t.Fatalf("LOAD_DEVICES=%d is fewer than LOAD_POOL=%d", devices, steady.pool)
	}
	var report []string
	say := func(lines ...string) {
		for _, l := range lines {
			fmt.Fprintf(os.Stdout, "load: %s\n", l)
		}
		report = append(report, lines...)
	}
	defer func() { t.Log("load report:\n  " + strings.Join(report, "\n  ")) }()
	say(fmt.Sprintf("steady state: %d active devices (%d installed machines, the rest sealed copies), %d fleetd instance(s), NetBox latency %s a request (× objects/%d for a larger page), reconcile every %s; stack started in %s",
		devices, steady.pool, steady.instances, latency, pageObjects, steadyInterval, startTook.Round(time.Second)))
	m := &meter{s: s}
	phase := func(name string, run func() []string) {
		p, err := m.start(name)
		if err != nil {
			t.Fatal(err)
		}
		lines := run()
		say(append(lines, p.stop()...)...)
	}

	pool := make([]string, steady.pool)
	for i := range pool {
		pool[i] = fmt.Sprintf("extra-%03d", i+1)
	}
	created := watchCreations(t, s)
	phase("install-pool", func() []string { return installPool(t, ctx, s, created, pool) })

	sealed, err := s.AddSealedDevices(pool[0], devices-len(pool), "sealed", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	storm, err := s.AddDeclaredDevices(stormSize, "storm")
	if err != nil {
		t.Fatal(err)
	}
	took := waitSealed(t, s, devices)
	say(fmt.Sprintf("%d sealed devices and %d declared ones added to NetBox; every fleetd instance counted %d sealed devices after %s", len(sealed), len(storm), devices, took.Round(time.Second)))
	if s.Info().WorkloadCluster != nil {
		start := time.Now()
		if err := addNodes(ctx, s, names(sealed)); err != nil {
			t.Fatal(err)
		}
		say(fmt.Sprintf("a Ready Node for each sealed device created in the workload cluster in %s (fleetd watches them)", time.Since(start).Round(time.Second)))
	}
	// One whole pass after that, so the rest measures passes over a fleet fleetd has seen.
	m.waitPasses(t, 1)

	rss := sampleRSS(s, 250*time.Millisecond)
	defer close(rss.stop)
	phase("rest", func() []string {
		rest, err := restRSS(s.FleetdPID(), steadyInterval)
		if err != nil {
			t.Fatal(err)
		}
		size, err := metricsSize(s)
		if err != nil {
			t.Fatal(err)
		}
		heapProfiles(t, s, "rest")
		return []string{fmt.Sprintf("at rest over one reconcile interval: fleetd RSS %s; /metrics %d KiB", rest, size/1024)}
	})
	var writes atomic.Int64 // boot checks that ran in the steady phase: fleetd writes for those only
	phase("steady", func() []string { return steadyChecks(t, ctx, s, pool, &writes) })
	if steady.instances == 1 {
		phase("authorization", func() []string { return sarTraffic(t, ctx, s, append(names(sealed), pool...)) })
	}
	stormIDs := make([]int64, len(storm))
	for i, d := range storm {
		stormIDs[i] = d.ID
	}
	// The renewal wave before the storm: the storm leaves 500 requests running (no machine
	// netboots them), which every pass after it reads.
	phase("renewal", func() []string { return renewalWave(t, ctx, s, pool) })
	phase("storm", func() []string { return stormViaNetBox(t, s, created, stormIDs) })
	say(fmt.Sprintf("fleetd RSS peak %s from the rest on", mib(rss.Peak())))
	say(verifySteady(t, ctx, s, created, pool, sealed, stormIDs)...)
}

func names(ds []stack.AddedDevice) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return out
}

// installPool provisions the pool's devices through NetBox, waits until Tinkerbell prepared
// their Workflows, installs every machine (netboot with the real enrollment, first boot, and
// with the workload cluster its kubelet's join), waits until each device is active, and runs
// each node's first boot check.
func installPool(t *testing.T, ctx context.Context, s *stack.Stack, created *creations, pool []string) []string {
	for _, id := range ids(s, pool) {
		if _, err := s.Owner().Patch(ctx, id, map[string]any{"custom_fields": map[string]any{"desired_action": "provision"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, missing := created.wait(ids(s, pool), 5*time.Minute); len(missing) > 0 {
		t.Fatalf("%d of the pool's %d provisions have no Workflow after 5 minutes", len(missing), len(pool))
	}
	out := waitPrepared(t, ctx, s, len(pool))
	out = append(out, installAll(t, ctx, s, pool)...)
	for _, name := range pool {
		waitField(t, ctx, s, name, "fleet_state", "active", 5*time.Minute)
	}
	// One boot check each, so that the template of the sealed copies carries what a running
	// node's fields do: its boot baseline, its last check and its facts from a check.
	return append(out, bootCheckAll(t, ctx, s, pool)...)
}

// addNodes creates a Node named after each device in the workload cluster, Ready, as their
// kubelets would have registered them: fleetd's Node watch holds them all. The cluster runs no
// node lifecycle controller, so they stay Ready without heartbeats.
func addNodes(ctx context.Context, s *stack.Stack, nodes []string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Info().WorkloadCluster.AdminKubeconfig)
	if err != nil {
		return fmt.Errorf("the workload cluster's admin kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, name := range nodes {
		g.Go(func() error {
			n, err := cs.CoreV1().Nodes().Create(gctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
				Labels: map[string]string{"kubernetes.io/hostname": name}}}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Node %s: %w", name, err)
			}
			now := metav1.Now()
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}}
			if _, err := cs.CoreV1().Nodes().UpdateStatus(gctx, n, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("Node %s Ready: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// heapProfiles writes each fleetd instance's heap profile (its debug listener's) into
// LOAD_PROFILE_DIR as NAME-heap-K.pprof, when that is set: `go tool pprof -sample_index
// inuse_space` says what fleetd holds.
func heapProfiles(t *testing.T, s *stack.Stack, name string) {
	dir := os.Getenv("LOAD_PROFILE_DIR")
	if dir == "" {
		return
	}
	for k, in := range s.Info().Fleetd.Instances {
		resp, err := http.Get(in.DebugURL + "/debug/pprof/heap?gc=1")
		if err != nil {
			t.Fatalf("fleetd instance %d's heap profile: %v", k+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("fleetd instance %d's heap profile: %s, %v", k+1, resp.Status, err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-heap-%d.pprof", name, k+1)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// cpuProfile writes d of each fleetd instance's CPU profile (its debug listener's) into
// LOAD_PROFILE_DIR as NAME-cpu-K.pprof, when that is set.
func cpuProfile(t *testing.T, s *stack.Stack, name string, d time.Duration) {
	dir := os.Getenv("LOAD_PROFILE_DIR")
	if dir == "" {
		return
	}
	var wg sync.WaitGroup
	for k, in := range s.Info().Fleetd.Instances {
		wg.Go(func() {
			resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", in.DebugURL, int(d.Seconds())))
			if err != nil {
				t.Errorf("fleetd instance %d's CPU profile: %v", k+1, err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("fleetd instance %d's CPU profile: %s, %v", k+1, resp.Status, err)
				return
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-cpu-%d.pprof", name, k+1)), b, 0o644); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// waitField waits until the device's custom field has the value.
func waitField(t *testing.T, ctx context.Context, s *stack.Stack, name, field, want string, d time.Duration) {
	t.Helper()
	var got string
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		dev, err := s.Owner().Device(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got = dev.Field(field); got == want {
			return
		}
	}
	t.Fatalf("%s: %s is %q after %s, want %q", name, field, got, d, want)
}

// waitSealed waits until every fleetd instance counts n devices sealed with the stack's key
// (fleetd_sealed_devices, set by each pass's listing) and returns how long that took.
func waitSealed(t *testing.T, s *stack.Stack, n int) time.Duration {
	start := time.Now()
	for _, in := range s.Info().Fleetd.Instances {
		for {
			mfs, _, err := scrape(in.HTTPURL)
			if err != nil {
				t.Fatal(err)
			}
			if sum(mfs, "fleetd_sealed_devices") >= float64(n) {
				break
			}
			if time.Since(start) > 3*steadyInterval {
				t.Fatalf("fleetd (%s) counts %g sealed devices after %s, want %d: a pass did not see them as sealed",
					in.HTTPURL, sum(mfs, "fleetd_sealed_devices"), time.Since(start).Round(time.Second), n)
			}
			time.Sleep(2 * time.Second)
		}
	}
	return time.Since(start)
}

// steadyChecks runs the fleet's boot checks at its hourly rate (devices/3600 a second) for the
// steady phase, each by the next pool machine that is not checking already, and counts them in
// checks.
func steadyChecks(t *testing.T, ctx context.Context, s *stack.Stack, pool []string, checks *atomic.Int64) []string {
	info := s.Info()
	rate := float64(devices) / 3600
	every := time.Duration(float64(time.Second) / rate)
	busy := make([]atomic.Bool, len(pool))
	var mu sync.Mutex
	var lat latencies
	failed := map[string]error{}
	skipped := 0
	var wg sync.WaitGroup
	profiled := make(chan struct{})
	go func() { // a minute of fleetd's CPU profile, from the third on, when LOAD_PROFILE_DIR is set
		defer close(profiled)
		time.Sleep(2 * time.Minute)
		cpuProfile(t, s, "steady", time.Minute)
	}()
	defer func() { <-profiled }()
	tick := time.NewTicker(every)
	defer tick.Stop()
	next := 0
	for end := time.Now().Add(steady.minutes); time.Now().Before(end); <-tick.C {
		k := -1
		for j := range pool {
			if c := (next + j) % len(pool); busy[c].CompareAndSwap(false, true) {
				k = c
				break
			}
		}
		if k < 0 {
			skipped++ // every machine still checking: the pool is too small for the rate
			continue
		}
		next = k + 1
		checks.Add(1)
		wg.Go(func() {
			defer busy[k].Store(false)
			start := time.Now()
			err := stack.BootCheck(ctx, info, pool[k], stack.StepOptions{})
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, time.Since(start))
			if err != nil {
				failed[pool[k]] = err
			}
		})
	}
	wg.Wait()
	for name, err := range failed {
		t.Errorf("boot check %s: %v", name, err)
		break
	}
	if skipped > 0 {
		t.Errorf("%d boot checks not started: every pool machine was still checking (raise LOAD_POOL)", skipped)
	}
	return []string{fmt.Sprintf("the fleet's boot checks at its hourly rate (%.2f a second, by the pool's %d machines in turn) for %s: %s; %d failed",
		rate, len(pool), steady.minutes, lat, len(failed))}
}

// sarTraffic POSTs SubjectAccessReviews to fleetd's authorization webhook, as the workload
// cluster's API server would for as many kubelets as devices (sarPerKubelet distinct requests
// per node per sarWindow), for sarDuration, with the API server's client certificate, and
// reports the answers' times and decisions. Every node named is in good standing: a denial fails
// the test.
func sarTraffic(t *testing.T, ctx context.Context, s *stack.Stack, nodes []string) []string {
	wc := s.Info().WorkloadCluster
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(wc.Dir, "authz-webhook.kubeconfig"))
	if err != nil {
		t.Fatalf("the API server's webhook kubeconfig: %v", err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc.Transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	rate := float64(devices) * sarPerKubelet / sarWindow.Seconds()
	const workers = 32 // the API server's connections to the webhook
	total := int(rate * sarDuration.Seconds())
	start := time.Now()
	var (
		mu      sync.Mutex
		lat     latencies
		answers = map[string]int{}
		denied  []string
		n       atomic.Int64
		wg      sync.WaitGroup
	)
	attrs := []authzv1.ResourceAttributes{
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"},
		{Verb: "patch", Resource: "nodes", Subresource: "status"},
		{Verb: "get", Resource: "nodes"},
		{Verb: "list", Resource: "pods"},
		{Verb: "get", Resource: "secrets", Namespace: "kube-system"},
	}
	wg.Go(func() { // 30 s of fleetd's CPU profile, from the 30th on, when LOAD_PROFILE_DIR is set
		time.Sleep(30 * time.Second)
		cpuProfile(t, s, "authorization", 30*time.Second)
	})
	for range workers {
		wg.Go(func() {
			for {
				i := n.Add(1) - 1
				if i >= int64(total) {
					return
				}
				if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
					time.Sleep(wait)
				}
				node := nodes[rand.IntN(len(nodes))]
				a := attrs[i%int64(len(attrs))]
				if a.Resource == "nodes" || a.Resource == "leases" {
					a.Name = node
				}
				body, _ := json.Marshal(authzv1.SubjectAccessReview{
					TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
					Spec: authzv1.SubjectAccessReviewSpec{User: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"},
						ResourceAttributes: &a}})
				at := time.Now()
				answer, err := postSAR(ctx, hc, wc.Webhook, body)
				took := time.Since(at)
				mu.Lock()
				lat = append(lat, took)
				switch {
				case err != nil:
					answers["error"]++
					if len(denied) < 5 {
						denied = append(denied, fmt.Sprintf("%s: %v", node, err))
					}
				case answer.Status.Denied:
					answers["denied"]++
					if len(denied) < 5 {
						denied = append(denied, fmt.Sprintf("%s: denied: %s", node, answer.Status.Reason))
					}
				case answer.Status.Allowed:
					answers["allowed"]++
				default:
					answers["no opinion"]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	for _, d := range denied {
		t.Errorf("authorization webhook, a node in good standing: %s", d)
	}
	return []string{fmt.Sprintf("authorization webhook: %d SubjectAccessReviews (%.0f a second asked, %.0f answered: %d kubelets × %d requests per %s) from %d connections over %s: %s; answers %v",
		len(lat), rate, float64(len(lat))/took.Seconds(), devices, sarPerKubelet, sarWindow, workers, took.Round(time.Second), lat, answers)}
}

// postSAR posts one review and decodes the answer.
func postSAR(ctx context.Context, hc *http.Client, url string, body []byte) (authzv1.SubjectAccessReview, error) {
	var out authzv1.SubjectAccessReview
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, err
	}
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return out, json.Unmarshal(b, &out)
}

// renewalWave makes every pool node's certificates due (fleetd restarted with certificate
// lifetimes of two minutes: a renewal is due from half of it, and the pool's were issued longer
// ago) and runs each node's boot check once, at the fleet's hourly rate, as a fleet installed in
// one week renews in one hour: each check renews its LDevID and LAK. Each device's serials must
// have changed, once.
func renewalWave(t *testing.T, ctx context.Context, s *stack.Stack, pool []string) []string {
	before := map[string]string{}
	for _, name := range pool {
		d, err := s.Owner().Device(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = d.Field("ldevid_serial")
	}
	restore, err := s.ReconfigureFleetd(ctx, func(o *stack.Options) { o.CertLifetime = 2 * time.Minute })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := restore(ctx); err != nil {
			t.Errorf("restore fleetd's certificate lifetimes: %v", err)
		}
	}()
	renewals := func() float64 { // every instance's, since the restart above
		n := 0.0
		for _, in := range s.Info().Fleetd.Instances {
			mfs, _, err := scrape(in.HTTPURL)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range mfs["fleetd_cert_renewals_total"].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == "renewed" {
						n += m.GetCounter().GetValue()
					}
				}
			}
		}
		return n
	}
	// The restarted instances' first passes (the change log read back over its retention, the
	// whole fleet listed) before the wave, so that its CPU is the renewals'.
	(&meter{s: s}).waitPasses(t, 1)
	issued := renewals()
	cpuBefore := (&meter{s: s}).instanceCPU()
	info := s.Info()
	every := time.Duration(float64(time.Second) * 3600 / float64(devices))
	var mu sync.Mutex
	var lat latencies
	var wg sync.WaitGroup
	for _, name := range pool {
		wg.Go(func() {
			start := time.Now()
			err := stack.BootCheck(ctx, info, name, stack.StepOptions{})
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, time.Since(start))
			if err != nil {
				t.Errorf("renewal wave, boot check %s: %v", name, err)
			}
		})
		time.Sleep(every)
	}
	wg.Wait()
	renewed := 0
	for _, name := range pool {
		d, err := s.Owner().Device(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Field("ldevid_serial"); got != before[name] && got != "" {
			renewed++
		} else {
			t.Errorf("renewal wave: %s's LDevID serial is still %s", name, got)
		}
	}
	// Each check renews its LDevID and its LAK once, whichever instance answers it: a certificate
	// issued twice for one check would be a renewal more.
	if got := renewals() - issued; got != float64(2*len(pool)) {
		t.Errorf("renewal wave: fleetd_cert_renewals_total{result=renewed} grew by %g over every instance, want %d (an LDevID and a LAK for each of %d nodes)",
			got, 2*len(pool), len(pool))
	}
	var spent time.Duration
	for k, c := range (&meter{s: s}).instanceCPU() {
		spent += c.cpu - cpuBefore[k].cpu
	}
	return []string{fmt.Sprintf("renewal wave: %d boot checks, each with its certificates due, at the hourly rate: %s; %d of %d renewed their LDevID; %g certificates issued over every instance; fleetd's CPU over the wave %.1f s",
		len(lat), lat, renewed, len(pool), renewals()-issued, spent.Seconds())}
}

// verifySteady checks that nothing was dropped or made twice: each storm request with exactly
// one Workflow and pending, each pool device active, no sealed device written by fleetd or given
// a journal entry (nothing asked for one), no device with the same journal entry twice, and no
// violation of the promise.
func verifySteady(t *testing.T, ctx context.Context, s *stack.Stack, created *creations, pool []string, sealed []stack.AddedDevice, storm []int64) []string {
	created.mu.Lock()
	twice := 0
	for _, id := range storm {
		if created.n[id] != 1 {
			twice++
			if twice <= 5 {
				t.Errorf("storm device %d has %d Workflows, want 1", id, created.n[id])
			}
		}
	}
	created.mu.Unlock()
	emu := s.NetBox()
	written, journaled := 0, 0
	for _, d := range sealed {
		if j := emu.Journal(d.ID); len(j) > 0 {
			journaled++
			if journaled <= 5 {
				t.Errorf("sealed device %s has %d journal entries, e.g. %s: %s; nothing asked fleetd for anything", d.Name, len(j), j[0].Kind, j[0].Comments)
			}
		}
		if n := len(slices.DeleteFunc(emu.Changes("dcim.device", d.ID), func(c netboxemu.ObjectChange) bool { return c.User != stack.ServiceUser })); n > 0 {
			written++
			if written <= 5 {
				t.Errorf("sealed device %s was written by fleetd %d times; nothing asked it to", d.Name, n)
			}
		}
	}
	dup := 0
	for _, id := range append(ids(s, pool), storm...) {
		seen := map[string]bool{}
		for _, j := range emu.Journal(id) {
			k := j.Kind + "\x00" + j.Comments
			if seen[k] {
				dup++
				t.Errorf("device %d has the journal entry %q twice", id, j.Comments)
			}
			seen[k] = true
		}
	}
	for _, name := range pool {
		if d, err := s.Owner().Device(ctx, name); err != nil || d.Field("fleet_state") != "active" {
			t.Errorf("pool device %s: %v, fleet_state %q; want active", name, err, d.Field("fleet_state"))
		}
	}
	return []string{fmt.Sprintf("nothing dropped or made twice: %d storm requests without exactly one Workflow, %d sealed devices written by fleetd, %d journaled, %d journal entries twice",
		twice, written, journaled, dup)}
}

// meter measures one phase: each process's CPU time (cpuPhase, with each fleetd instance's own),
// the NetBox requests by endpoint, and the reconcile passes each instance made and their wall
// time (fleetd_reconcile_pass_seconds).
type meter struct {
	s *stack.Stack
}

type meterPhase struct {
	m        *meter
	cpu      *cpuPhase
	began    time.Time
	requests map[string]int64
	passes   []passes // per instance
	inst     []instanceCPU
}

// instanceCPU is one fleetd instance's process and the CPU time it had spent.
type instanceCPU struct {
	pid int
	cpu time.Duration
}

// passes is a scrape of fleetd_reconcile_pass_seconds.
type passes struct {
	n   float64
	sum float64
}

func (m *meter) start(name string) (*meterPhase, error) {
	cpu, err := startCPU(name)
	if err != nil {
		return nil, err
	}
	p := &meterPhase{m: m, cpu: cpu, began: time.Now(), requests: m.s.NetBox().RequestCounts()}
	p.passes, err = m.passes()
	if err != nil {
		return nil, err
	}
	p.inst = m.instanceCPU()
	return p, nil
}

// instanceCPU is each fleetd instance's process and CPU time so far.
func (m *meter) instanceCPU() []instanceCPU {
	out := make([]instanceCPU, m.s.FleetdInstances())
	for k := range out {
		if pid := m.s.FleetdInstancePID(k + 1); pid != 0 {
			out[k].pid = pid
			_, _, out[k].cpu, _, _ = procStat(pid)
		}
	}
	return out
}

func (m *meter) passes() ([]passes, error) {
	var out []passes
	for _, in := range m.s.Info().Fleetd.Instances {
		mfs, _, err := scrape(in.HTTPURL)
		if err != nil {
			return nil, err
		}
		var p passes
		if mf, ok := mfs["fleetd_reconcile_pass_seconds"]; ok && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			p = passes{float64(h.GetSampleCount()), h.GetSampleSum()}
		}
		out = append(out, p)
	}
	return out, nil
}

// waitPasses waits until every instance has made n more reconcile passes.
func (m *meter) waitPasses(t *testing.T, n int) {
	start, err := m.passes()
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(time.Duration(n+2) * steadyInterval); ; time.Sleep(time.Second) {
		now, err := m.passes()
		if err != nil {
			t.Fatal(err)
		}
		done := true
		for k := range now {
			done = done && now[k].n >= start[k].n+float64(n)
		}
		if done {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("fleetd made fewer than %d reconcile passes in %s: %v then %v", n, time.Duration(n+2)*steadyInterval, start, now)
		}
	}
}

// stop ends the phase: its CPU line (cpuPhase.stop), each instance's CPU time when there are
// several, the reconcile passes and NetBox's requests by endpoint per device-hour.
func (p *meterPhase) stop() []string {
	out := []string{"  " + p.cpu.stop()}
	wall := time.Since(p.began)
	inst := p.m.instanceCPU()
	parts := make([]string, len(inst))
	var all time.Duration
	for k := range inst {
		d := inst[k].cpu - p.inst[k].cpu
		if inst[k].pid != p.inst[k].pid { // restarted in the phase: the new process's time (the old one's end is lost)
			d = inst[k].cpu
		}
		all += d
		parts[k] = fmt.Sprintf("instance %d %.1f s", k+1, d.Seconds())
	}
	out = append(out, fmt.Sprintf("  fleetd's CPU: %.1f s over %s, %.0f s an hour at this pace (%s)", all.Seconds(), wall.Round(time.Second),
		all.Seconds()/wall.Hours(), strings.Join(parts, ", ")))
	if now, err := p.m.passes(); err == nil {
		for k := range now {
			n, sum := now[k].n-p.passes[k].n, now[k].sum-p.passes[k].sum
			if n > 0 {
				out = append(out, fmt.Sprintf("  reconcile passes (instance %d): %.0f, %.2f s of wall time each on average", k+1, n, sum/n))
			}
		}
	}
	after := p.m.s.NetBox().RequestCounts()
	var total int64
	routes := slices.Sorted(maps.Keys(after))
	parts = nil
	for _, r := range routes {
		d := after[r] - p.requests[r]
		if d == 0 {
			continue
		}
		total += d
		parts = append(parts, fmt.Sprintf("%s %d (%.3f)", r, d, perDeviceHour(d, wall)))
	}
	out = append(out, fmt.Sprintf("  NetBox requests: %d over %s (%.3f per device-hour): %s", total, wall.Round(time.Second),
		perDeviceHour(total, wall), strings.Join(parts, ", ")))
	return out
}

// perDeviceHour is n requests over wall as a rate per device per hour of the fleet.
func perDeviceHour(n int64, wall time.Duration) float64 {
	return float64(n) / wall.Hours() / float64(devices)
}

// scrape reads one fleetd's /metrics on its plain listener: the families and the page's size.
func scrape(baseURL string) (map[string]*dto.MetricFamily, int, error) {
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(baseURL + "/metrics")
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("GET %s/metrics: %s", baseURL, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	return mfs, len(b), err
}

// sum is the sum of a gauge's or counter's series.
func sum(mfs map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	for _, m := range mfs[name].GetMetric() {
		v += m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	return v
}

// metricsSize is the size of the first instance's /metrics page.
func metricsSize(s *stack.Stack) (int, error) {
	_, n, err := scrape(s.Info().Fleetd.Instances[0].HTTPURL)
	return n, err
}
