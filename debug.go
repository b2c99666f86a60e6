package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// The debug listener (serve --debug-listen, docs/operate.md "Profiles"): Go's runtime profiles,
// net/http/pprof's, for reading where a running fleetd spends its CPU and holds its memory. They
// tell what fleetd is doing to anyone who can reach them and a CPU profile costs while it runs, so
// the listener takes a loopback address only and has no other route.

// checkDebugListen refuses a debug address that is not loopback.
func checkDebugListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--debug-listen %q is not HOST:PORT: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--debug-listen %q is not a loopback address: the profiles say what fleetd is doing to anyone who reaches them; use 127.0.0.1:PORT and reach it on the host (ssh -L)", addr)
	}
	return nil
}

// startDebug serves the profiles on addr until the returned server is closed.
func startDebug(addr string) (*http.Server, net.Addr, error) {
	if err := checkDebugListen(addr); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--debug-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ends with Close; a failed listener ends the profiles, not fleetd
	return srv, ln.Addr(), nil
}
