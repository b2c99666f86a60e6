package workflows_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/folly-infra/fleetd/workflows"
)

// templateText is a minimal Template whose rendering carries its hardware map and a version.
func templateText(version string) string {
	return fmt.Sprintf(`version: "0.1"
name: wf-%s
global_timeout: 600
tasks:
  - name: os
    worker: "{{.device_1}}"
    actions:
      - name: write-%s
        image: quay.io/tinkerbell/actions/image2disk:latest
        timeout: 60
        environment:
          MAC_UPPER: "{{ .device_1 | upper }}"
`, version, version)
}

// Parsed Templates are kept by their text: many Workflows rendered at once from one text each
// get their own machine's values, and a changed text is rendered as it is now, also after more
// texts than are kept.
func TestRenderTemplateParsedOnce(t *testing.T) {
	render := func(text, mac string) (workflows.Rendered, error) {
		return workflows.RenderTemplate(workflows.DefaultVersion, text, map[string]string{"device_1": mac}, nil)
	}
	v1 := templateText("v1")
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			mac := fmt.Sprintf("02:00:00:00:00:%02x", i)
			r, err := render(v1, mac)
			if err != nil {
				t.Error(err)
				return
			}
			if r.Name != "wf-v1" || r.Tasks[0].WorkerAddr != mac || r.Tasks[0].Actions[0].Environment["MAC_UPPER"] != strings.ToUpper(mac) {
				t.Errorf("machine %s rendered as %+v", mac, r)
			}
		})
	}
	wg.Wait()
	for i := range 40 { // more texts than the cache keeps, then the first again
		v := fmt.Sprintf("v%d", i+2)
		if r, err := render(templateText(v), "02:00:00:00:00:01"); err != nil || r.Name != "wf-"+v {
			t.Fatalf("Template %s rendered as %q, %v", v, r.Name, err)
		}
	}
	if r, err := render(v1, "02:00:00:00:00:02"); err != nil || r.Name != "wf-v1" || r.Tasks[0].Actions[0].Name != "write-v1" {
		t.Fatalf("Template v1 again rendered as %+v, %v", r, err)
	}
	// A text that does not parse is refused every time, not kept as a success.
	for range 2 {
		if _, err := render("tasks: {{ .device_1", "02:00:00:00:00:03"); err == nil {
			t.Fatal("an unparsable Template rendered")
		}
	}
}
