package dockerapi_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/dev/dockerapi"
)

// engine starts an engine whose containers run run, and an HTTP client of its socket.
func engine(t *testing.T, run dockerapi.Runner) (string, *http.Client) {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "docker.sock")
	e, err := dockerapi.Start(socket, run, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	return socket, c
}

func post(t *testing.T, c *http.Client, path, body string) *http.Response {
	t.Helper()
	resp, err := c.Post("http://docker/v1.47"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func create(t *testing.T, c *http.Client, name, body string) string {
	t.Helper()
	resp := post(t, c, "/containers/create?name="+name, body)
	defer resp.Body.Close()
	var out struct{ Id string }
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("create %s: %s", name, resp.Status)
	}
	return out.Id
}

// TestEngineCalls: what tink-agent v0.25's docker runtime needs of the engine besides what
// tink-worker v0.12.2 does, and Docker's refusal of two binds onto one path.
func TestEngineCalls(t *testing.T) {
	release := make(chan struct{})
	socket, c := engine(t, func(ctx context.Context, ctr dockerapi.Container) (string, int) {
		if ctr.Name == "hang" {
			<-ctx.Done()
			return "stopped\n", 137
		}
		<-release
		return "2 disks have serial S1\n", 3
	})
	t.Run("refuse/two binds onto one path", func(t *testing.T) {
		resp := post(t, c, "/containers/create?name=dup", `{"Image":"alpine","HostConfig":{"Binds":["/worker/ns/wf:/workflow","/var/lib/fleetd/r:/workflow"]}}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "Duplicate mount point: /workflow") {
			t.Errorf("create with two binds onto /workflow: %s %s, want 400 Duplicate mount point", resp.Status, b)
		}
	})
	id := create(t, c, "act", `{"Image":"alpine","Cmd":["/bin/sh","-c","x"],"HostConfig":{"Binds":["/dev:/dev"]}}`)
	t.Run("ok/a wait answers its headers before the container starts", func(t *testing.T) {
		// The agent asks for next-exit before it starts the container, and its client returns
		// only once the headers came: headers held back until the end would never come.
		got := make(chan *http.Response, 1)
		go func() {
			resp, err := c.Post("http://docker/v1.47/containers/"+id+"/wait?condition=next-exit", "application/json", nil)
			if err == nil {
				got <- resp
			}
		}()
		var wait *http.Response
		select {
		case wait = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("the wait's headers did not come while the container was not started")
		}
		defer wait.Body.Close()
		if r := post(t, c, "/containers/"+id+"/start", ""); r.StatusCode != http.StatusNoContent {
			t.Fatalf("start: %s", r.Status)
		}
		// Attached as the agent does: the connection is taken over, and carries the output in
		// Docker's multiplexed stream (a stdout frame).
		conn, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "POST /v1.47/containers/"+id+"/attach?stream=1&stdout=1&stderr=1&logs=1 HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		status, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(status, "HTTP/1.1 101") {
			t.Fatalf("attach answered %q, %v; want 101", status, err)
		}
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if l == "\r\n" {
				break
			}
		}
		close(release)
		head := make([]byte, 8)
		if _, err := io.ReadFull(br, head); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, binary.BigEndian.Uint32(head[4:]))
		if _, err := io.ReadFull(br, out); err != nil || head[0] != 1 || string(out) != "2 disks have serial S1\n" {
			t.Errorf("attach stream: header %v, %q, %v; want one stdout frame with the output", head, out, err)
		}
		var res struct{ StatusCode int }
		if err := json.NewDecoder(wait.Body).Decode(&res); err != nil || res.StatusCode != 3 {
			t.Errorf("wait: %+v, %v; want exit code 3", res, err)
		}
	})
	t.Run("ok/stop ends a running container", func(t *testing.T) {
		hang := create(t, c, "hang", `{"Image":"alpine"}`)
		if r := post(t, c, "/containers/"+hang+"/start", ""); r.StatusCode != http.StatusNoContent {
			t.Fatalf("start: %s", r.Status)
		}
		if r := post(t, c, "/containers/"+hang+"/stop?t=5", ""); r.StatusCode != http.StatusNoContent {
			t.Fatalf("stop: %s, want 204", r.Status)
		}
		resp, err := c.Get("http://docker/v1.47/containers/" + hang + "/json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct {
			State struct {
				Status   string
				ExitCode int
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.State.Status != "exited" || got.State.ExitCode != 137 {
			t.Errorf("after stop: %+v, %v; want exited 137", got.State, err)
		}
		if r := post(t, c, "/containers/"+hang+"/stop", ""); r.StatusCode != http.StatusNotModified {
			t.Errorf("stop of an exited container: %s, want 304", r.Status)
		}
	})
}
