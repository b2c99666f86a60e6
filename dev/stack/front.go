package stack

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// frontDialTimeout bounds one dial of an instance: a loopback dial is refused at once when the
// instance is down, so this only matters for an instance that accepts nothing (stopped).
const frontDialTimeout = 2 * time.Second

// front is the stack's layer-4 front before several fleetd instances (Options.FleetdInstances,
// docs/operate.md "Several instances"): one listener that hands each connection to the next
// instance in turn, skipping an instance that refuses it (down or restarting), and copies bytes
// both ways. It never reads what it copies: TLS ends at the instance.
//
// It keeps the client's source address the way a direct-routing balancer does: the connection to
// the instance is dialed from the client's own address (the machines' 127.0.1.N, every one of
// them local on loopback), so fleetd sees the node's address as the TCP peer, which its address
// binding of a configuration fetch and its per-address rate limit read. A front that dialed from
// its own address would make every node look like one.
type front struct {
	ln       net.Listener
	backends []string // host:port of each instance, in instance order
	log      zerolog.Logger

	mu    sync.Mutex
	next  int
	conns map[net.Conn]struct{} // open client and instance connections, closed by close
	done  bool
	wg    sync.WaitGroup
}

// startFront listens on addr (host:port) and serves until close.
func startFront(addr string, backends []string, log zerolog.Logger) (*front, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("start the front of fleetd's instances on %s: %w", addr, err)
	}
	f := &front{ln: ln, backends: backends, log: log, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *front) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				f.log.Error().Err(err).Str("front", f.ln.Addr().String()).Msg("the front stopped accepting")
			}
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go f.relay(c)
	}
}

// track adds c to the open connections, or reports false once the front is closing.
func (f *front) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *front) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// relay dials an instance for client c from c's own address and copies both ways until both
// sides closed. When no instance takes the connection, the client's is closed (the client sees a
// reset or EOF, as with a balancer that has no healthy backend).
func (f *front) relay(c net.Conn) {
	defer f.wg.Done()
	defer f.untrack(c)
	up, err := f.dial(c.RemoteAddr())
	if err != nil {
		f.log.Warn().Err(err).Str("client", c.RemoteAddr().String()).Msg("the front found no fleetd instance to take a connection")
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(up, c) }()
	go func() { defer wg.Done(); pipe(c, up) }()
	wg.Wait()
}

// pipe copies from src to dst, then half-closes dst so the far side sees the end of the stream.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	dst.Close()
}

// dial connects to the next instance that accepts, from the client's IP (any port).
func (f *front) dial(client net.Addr) (net.Conn, error) {
	from, ok := client.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("client address %s is not TCP", client)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.IP}, Timeout: frontDialTimeout}
	f.mu.Lock()
	first := f.next
	f.next = (f.next + 1) % len(f.backends)
	f.mu.Unlock()
	var errs []error
	for i := range f.backends {
		b := f.backends[(first+i)%len(f.backends)]
		c, err := d.Dial("tcp", b)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("every instance refused the connection: %w", errors.Join(errs...))
}

// close stops accepting, closes every open connection and waits for the relays to end.
func (f *front) close() error {
	err := f.ln.Close()
	f.mu.Lock()
	f.done = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
