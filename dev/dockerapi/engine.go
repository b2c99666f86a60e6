// Package dockerapi is a small Docker Engine API of the project's own, on a unix socket, for
// Tinkerbell's real tink-worker v0.12.2 (DOCKER_HOST=unix://...) and tink-agent v0.25.0 with its
// docker runtime (--docker-socket): it answers the calls they make (ping, image pull and
// inspect, container create, start, inspect, wait, attach, logs, stop and remove) and runs each
// started container through a Runner, which the development stack implements (the enrollment
// action as the real `fleetd enroll`, the others simulated).
//
// It is for tests and the development stack only. Trust assumptions: the socket is a file of
// mode 0600 in a directory the caller owns; nothing is pulled and no container is isolated.
package dockerapi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// APIVersion is the Engine API version served (Docker 27's; the worker's client negotiates down
// to it).
const APIVersion = "1.47"

// Container is what a worker asked to run.
type Container struct {
	ID, Name, Image string
	Cmd, Env        []string
	Binds           []string
	Privileged      bool
	PidMode         string
}

// EnvMap is the container's environment as a map (a later duplicate wins, as in Docker).
func (c Container) EnvMap() map[string]string {
	m := map[string]string{}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// Runner runs one started container and returns its output and exit code. ctx ends when the
// container is removed (force) or the engine is closed; the runner should stop then.
type Runner func(ctx context.Context, c Container) (output string, exitCode int)

// Engine is a running Docker Engine API.
type Engine struct {
	socket string
	run    Runner
	log    zerolog.Logger
	srv    *http.Server
	ln     net.Listener

	mu         sync.Mutex
	containers map[string]*container
}

type container struct {
	Container
	started bool
	cancel  context.CancelFunc
	exited  chan struct{} // closed when the runner returned: output and exit are set
	done    chan struct{} // closed once the output reached the attached streams: the container has ended
	output  string
	exit    int

	attached int           // attach streams taken (under Engine.mu)
	streamed chan struct{} // closed when an attach stream has carried the output
	once     sync.Once
}

// Start serves the API on a unix socket at socket (an old socket file is replaced).
func Start(socket string, run Runner, log zerolog.Logger) (*Engine, error) {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("docker API: listen on %s: %w", socket, err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("docker API: %w", err)
	}
	e := &Engine{socket: socket, run: run, log: log, ln: ln, containers: map[string]*container{}}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve)}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

// Host is the DOCKER_HOST value for this engine.
func (e *Engine) Host() string { return "unix://" + e.socket }

// Close stops serving and ends every running container.
func (e *Engine) Close() error {
	e.mu.Lock()
	for _, c := range e.containers {
		if c.cancel != nil {
			c.cancel()
		}
	}
	e.mu.Unlock()
	err := e.srv.Close()
	_ = os.Remove(e.socket)
	return err
}

var (
	versionPrefix = regexp.MustCompile(`^/v[0-9]+\.[0-9]+`)
	containerPath = regexp.MustCompile(`^/containers/([^/]+)(/[a-z]+)?$`)
)

func (e *Engine) serve(w http.ResponseWriter, r *http.Request) {
	p := versionPrefix.ReplaceAllString(r.URL.Path, "")
	log := e.log.With().Str("method", r.Method).Str("path", p).Logger()
	switch {
	case p == "/_ping":
		w.Header().Set("Api-Version", APIVersion)
		w.Header().Set("Ostype", "linux")
		w.Header().Set("Docker-Experimental", "false")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("OK"))
		return
	case p == "/images/create" && r.Method == http.MethodPost:
		img := r.URL.Query().Get("fromImage")
		if t := r.URL.Query().Get("tag"); t != "" {
			img += ":" + t
		}
		log.Info().Str("image", img).Str("decision", "pulled").Msg("image pull (nothing is fetched)")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "Status: Image is up to date for " + img})
		return
	case strings.HasPrefix(p, "/images/") && strings.HasSuffix(p, "/json") && r.Method == http.MethodGet:
		name := strings.TrimSuffix(strings.TrimPrefix(p, "/images/"), "/json")
		writeJSON(w, http.StatusOK, map[string]any{"Id": "sha256:" + hex.EncodeToString([]byte(name)), "RepoTags": []string{name}})
		return
	case p == "/containers/create" && r.Method == http.MethodPost:
		e.create(w, r, log)
		return
	}
	m := containerPath.FindStringSubmatch(p)
	if m == nil {
		log.Warn().Str("decision", "refused").Msg("not an endpoint this engine serves")
		writeError(w, http.StatusNotFound, fmt.Sprintf("page not found: %s %s is not served by the development stack's Docker API", r.Method, p))
		return
	}
	id, op := m[1], m[2]
	c := e.find(id)
	if c == nil {
		writeError(w, http.StatusNotFound, "No such container: "+id)
		return
	}
	switch {
	case op == "/start" && r.Method == http.MethodPost:
		e.start(c, log)
		w.WriteHeader(http.StatusNoContent)
	case op == "/json" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, e.inspect(c))
	case op == "/wait" && r.Method == http.MethodPost:
		e.wait(w, r, c)
	case op == "/attach" && r.Method == http.MethodPost:
		e.attach(w, c, log)
	case op == "/stop" && r.Method == http.MethodPost:
		e.stop(w, r, c, log)
	case op == "/logs" && r.Method == http.MethodGet:
		<-c.done
		w.Header().Set("Content-Type", "application/vnd.docker.raw-stream")
		_, _ = w.Write([]byte(c.output))
	case op == "" && r.Method == http.MethodDelete:
		e.remove(c, log)
		w.WriteHeader(http.StatusNoContent)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("page not found: %s %s", r.Method, p))
	}
}

// createBody is the part of a container create request the engine reads.
type createBody struct {
	Image      string
	Cmd        []string
	Env        []string
	HostConfig struct {
		Binds      []string
		Privileged bool
		PidMode    string
	}
}

func (e *Engine) create(w http.ResponseWriter, r *http.Request, log zerolog.Logger) {
	var b createBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		writeError(w, http.StatusBadRequest, "decode the container config: "+err.Error())
		return
	}
	if b.Image == "" {
		writeError(w, http.StatusBadRequest, "config.Image is empty")
		return
	}
	if err := distinctMounts(b.HostConfig.Binds); err != nil {
		log.Warn().Strs("binds", b.HostConfig.Binds).Str("decision", "refused").Msg(err.Error())
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	c := &container{Container: Container{ID: hex.EncodeToString(raw), Name: r.URL.Query().Get("name"), Image: b.Image,
		Cmd: b.Cmd, Env: b.Env, Binds: b.HostConfig.Binds, Privileged: b.HostConfig.Privileged, PidMode: b.HostConfig.PidMode},
		exited: make(chan struct{}), done: make(chan struct{}), streamed: make(chan struct{})}
	e.mu.Lock()
	for _, o := range e.containers {
		if c.Name != "" && o.Name == c.Name {
			e.mu.Unlock()
			writeError(w, http.StatusConflict, fmt.Sprintf("Conflict. The container name %q is already in use by container %q", c.Name, o.ID))
			return
		}
	}
	e.containers[c.ID] = c
	e.mu.Unlock()
	log.Info().Str("container", c.Name).Str("image", c.Image).Str("decision", "created").Msg("container created")
	writeJSON(w, http.StatusCreated, map[string]any{"Id": c.ID, "Warnings": []string{}})
}

// distinctMounts refuses two binds onto one container path, as Docker does ("Duplicate mount
// point"): tink-worker v0.12.2 binds its own /workflow, so a Template that declares a volume at
// /workflow cannot run there.
func distinctMounts(binds []string) error {
	seen := map[string]bool{}
	for _, b := range binds {
		parts := strings.Split(b, ":")
		if len(parts) < 2 {
			continue
		}
		dest := parts[1]
		if seen[dest] {
			return fmt.Errorf("Duplicate mount point: %s", dest)
		}
		seen[dest] = true
	}
	return nil
}

// BindTarget is the container path of a bind ("src:dest[:options]"), or "" when it has none.
func BindTarget(bind string) string {
	parts := strings.Split(bind, ":")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// wait answers POST /containers/{id}/wait: its headers at once, as Docker sends them (tink-agent
// v0.25 asks with condition next-exit before it starts the container, and its client returns
// only once the headers arrived), then the exit code when the container ends.
func (e *Engine) wait(w http.ResponseWriter, r *http.Request, c *container) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	select {
	case <-c.done:
		_ = json.NewEncoder(w).Encode(map[string]any{"StatusCode": c.exit})
	case <-r.Context().Done():
	}
}

// attach answers POST /containers/{id}/attach as Docker does for a container without a TTY: the
// connection is taken over (101 UPGRADED) and carries the container's output in Docker's
// multiplexed stream (one stdout frame), sent when the runner returns and before the container's
// wait answers, then closes.
func (e *Engine) attach(w http.ResponseWriter, c *container, log zerolog.Logger) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		writeError(w, http.StatusInternalServerError, "attach: the connection cannot be taken over")
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		log.Warn().Err(err).Msg("attach: take over the connection")
		return
	}
	defer conn.Close()
	e.mu.Lock()
	c.attached++
	e.mu.Unlock()
	defer c.once.Do(func() { close(c.streamed) })
	_, _ = buf.WriteString("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	if buf.Flush() != nil {
		return
	}
	<-c.exited
	frame := make([]byte, 8, 8+len(c.output))
	frame[0] = 1 // stdout
	binary.BigEndian.PutUint32(frame[4:], uint32(len(c.output)))
	_, _ = conn.Write(append(frame, c.output...))
}

// stop answers POST /containers/{id}/stop: the runner's context ends, and the answer waits for
// the container to exit, up to the request's t seconds (10 by default); 304 when it was not
// running.
func (e *Engine) stop(w http.ResponseWriter, r *http.Request, c *container, log zerolog.Logger) {
	e.mu.Lock()
	cancel := c.cancel
	e.mu.Unlock()
	select {
	case <-c.done:
		w.WriteHeader(http.StatusNotModified)
		return
	default:
	}
	if cancel == nil {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	grace := 10 * time.Second
	if t, err := strconv.Atoi(r.URL.Query().Get("t")); err == nil && t >= 0 {
		grace = time.Duration(t) * time.Second
	}
	cancel()
	select {
	case <-c.done:
	case <-time.After(grace):
	}
	log.Info().Str("container", c.Name).Str("decision", "stopped").Msg("container stopped")
	w.WriteHeader(http.StatusNoContent)
}

func (e *Engine) find(id string) *container {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c, ok := e.containers[id]; ok {
		return c
	}
	for _, c := range e.containers {
		if c.Name == id || c.Name == strings.TrimPrefix(id, "/") {
			return c
		}
	}
	return nil
}

func (e *Engine) start(c *container, log zerolog.Logger) {
	e.mu.Lock()
	if c.started {
		e.mu.Unlock()
		return
	}
	c.started = true
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	e.mu.Unlock()
	log.Info().Str("container", c.Name).Str("image", c.Image).Str("decision", "started").Msg("container started")
	go func() {
		out, code := e.run(ctx, c.Container)
		c.output, c.exit = out, code
		close(c.exited)
		// As a Docker daemon streams a container's output while it runs, the output reaches an
		// attached client before the container's wait answers: tink-agent v0.25 closes its
		// attach stream as soon as the wait answers.
		e.mu.Lock()
		attached := c.attached > 0
		e.mu.Unlock()
		if attached {
			select {
			case <-c.streamed:
				// The client reads the stream on a goroutine of its own: give it the moment a
				// daemon's exit handling takes before the wait answers.
				time.Sleep(streamGrace)
			case <-time.After(2 * time.Second):
			}
		}
		close(c.done)
		// The output is logged as a Docker daemon keeps a container's log: neither tink-worker
		// v0.12.2 nor tink-agent v0.25 reports an action's output to the server.
		e.log.Info().Str("container", c.Name).Int("exit_code", code).Str("output", capped(out)).Str("decision", "exited").Msg("container exited")
	}()
}

func (e *Engine) inspect(c *container) map[string]any {
	status, running, exit := "created", false, 0
	if c.started {
		status, running = "running", true
	}
	select {
	case <-c.done:
		status, running, exit = "exited", false, c.exit
	default:
	}
	return map[string]any{"Id": c.ID, "Name": "/" + c.Name, "Image": c.Image,
		"State":  map[string]any{"Status": status, "Running": running, "ExitCode": exit},
		"Config": map[string]any{"Image": c.Image, "Cmd": c.Cmd, "Env": c.Env}}
}

func (e *Engine) remove(c *container, log zerolog.Logger) {
	e.mu.Lock()
	delete(e.containers, c.ID)
	cancel := c.cancel
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	log.Info().Str("container", c.Name).Str("decision", "removed").Msg("container removed")
}

// streamGrace is how long after an attach stream carried the output the container's wait
// answers.
const streamGrace = 100 * time.Millisecond

// maxLoggedOutput caps a container's output in the engine's log.
const maxLoggedOutput = 4 << 10

func capped(out string) string {
	if len(out) <= maxLoggedOutput {
		return out
	}
	return out[:maxLoggedOutput] + fmt.Sprintf("… (%d bytes more)", len(out)-maxLoggedOutput)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"message": msg})
}
