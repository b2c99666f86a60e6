// Package dockerapi is a small Docker Engine API of the project's own, on a unix socket, for
// Tinkerbell's real tink-worker (DOCKER_HOST=unix://...): it answers the calls the worker makes
// (ping, image pull and inspect, container create, start, inspect, wait, logs and remove) and
// runs each started container through a Runner, which the development stack implements (the
// enrollment action as the real `fleetd enroll`, the others simulated).
//
// It is for tests and the development stack only. Trust assumptions: the socket is a file of
// mode 0600 in a directory the caller owns; nothing is pulled and no container is isolated.
package dockerapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"

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
	done    chan struct{} // closed when the runner returned
	output  string
	exit    int
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
		select {
		case <-c.done:
			writeJSON(w, http.StatusOK, map[string]any{"StatusCode": c.exit})
		case <-r.Context().Done():
		}
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
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	c := &container{Container: Container{ID: hex.EncodeToString(raw), Name: r.URL.Query().Get("name"), Image: b.Image,
		Cmd: b.Cmd, Env: b.Env, Binds: b.HostConfig.Binds, Privileged: b.HostConfig.Privileged, PidMode: b.HostConfig.PidMode},
		done: make(chan struct{})}
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
		close(c.done)
		// The output is logged as a Docker daemon keeps a container's log: tink-worker v0.12.2
		// reports no action output to tink-server, and fetches it only sometimes itself.
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
