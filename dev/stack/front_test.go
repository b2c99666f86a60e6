package stack

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// echoBackend answers each connection with "<name> <peer IP>\n" and then echoes one line back.
func echoBackend(t *testing.T, name string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr().(*net.TCPAddr).IP)
				line, _ := bufio.NewReader(c).ReadString('\n')
				// A client that hung up gets no echo; its test fails on the missing line.
				_, _ = io.WriteString(c, line)
			}()
		}
	}()
	return ln
}

// through connects to the front from the address from and returns the backend's greeting, after
// checking that a line written travels there and back.
func through(t *testing.T, front, from string) (string, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	greeting, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	fmt.Fprintln(c, "ping from", from)
	echo, err := r.ReadString('\n')
	if err != nil || echo != "ping from "+from+"\n" {
		return "", fmt.Errorf("echo %q, %v", echo, err)
	}
	return strings.TrimSpace(greeting), nil
}

// TestFront: the front hands connections to the instances in turn, each dialed from the client's
// own address (the machines' 127.0.1.N reach fleetd as themselves); an instance that refuses is
// skipped; with none left the client's connection is closed.
func TestFront(t *testing.T) {
	a, b := echoBackend(t, "a"), echoBackend(t, "b")
	f, err := startFront("127.0.0.1:0", []string{a.Addr().String(), b.Addr().String()}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	addr := f.ln.Addr().String()
	var got []string
	for _, from := range []string{"127.0.1.7", "127.0.1.8", "127.0.0.1", "127.0.1.7"} {
		g, err := through(t, addr, from)
		if err != nil {
			t.Fatalf("from %s: %v", from, err)
		}
		got = append(got, g)
	}
	want := []string{"a 127.0.1.7", "b 127.0.1.8", "a 127.0.0.1", "b 127.0.1.7"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the instances saw %q, want %q (in turn, from the client's address)", got, want)
	}

	a.Close() // instance a is down: every connection goes to b
	for range 2 {
		if g, err := through(t, addr, "127.0.1.9"); err != nil || g != "b 127.0.1.9" {
			t.Errorf("with a down: %q, %v; want b 127.0.1.9", g, err)
		}
	}

	b.Close() // none left: the client's connection ends without a byte
	if g, err := through(t, addr, "127.0.1.9"); err == nil {
		t.Errorf("with every instance down the client got %q, want the connection closed", g)
	}
	if err := f.close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
