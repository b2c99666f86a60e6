package runbooks_test

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A doc command is one shell command of a ```sh block of the docs, with the output the doc shows
// for it: the "# " lines that follow it. An expected line is matched against a whole line of
// the command's output, "…" standing for any text; the expected lines must appear in order
// (other output may come between them). "# exit N" says the command fails with status N; a
// command with no such line must succeed.
type docCommand struct {
	file  string
	line  int
	cmd   string
	want  []string
	exit  int
	block int  // index of its block in the file
	setup bool // a block that only sets variables and helpers
	spore bool // a block that sets up the real fleet ("# on spore: …"); swapped for the stack's
}

func (c docCommand) where() string { return c.file + ":" + strconv.Itoa(c.line) }

// docBlocks reads the ```sh blocks of a Markdown file, as commands; a block's leading comment
// lines are the block's own words, not output.
func docBlocks(t *testing.T, path string) [][]docCommand {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks [][]docCommand
	var cur []docCommand
	in, first, lead := false, "", true
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && line == "```sh":
			in, cur, lead, first = true, nil, true, ""
			continue
		case in && line == "```":
			in = false
			spore := strings.HasPrefix(first, "# on spore:")
			setup := strings.HasPrefix(first, "# development stack:") || spore
			for i := range cur {
				cur[i].block, cur[i].setup, cur[i].spore = len(blocks), setup, spore
			}
			blocks = append(blocks, cur)
			continue
		case !in:
			continue
		}
		if first == "" {
			first = line
		}
		if text, ok := strings.CutPrefix(line, "# "); ok || line == "#" {
			if lead || len(cur) == 0 {
				continue
			}
			c := &cur[len(cur)-1]
			if m := regexp.MustCompile(`^exit (\d+)$`).FindStringSubmatch(text); m != nil {
				c.exit, _ = strconv.Atoi(m[1])
			} else {
				c.want = append(c.want, text)
			}
			continue
		}
		lead = false
		if strings.TrimSpace(line) == "" {
			continue
		}
		if len(cur) > 0 && strings.HasSuffix(cur[len(cur)-1].cmd, "\\") {
			cur[len(cur)-1].cmd += "\n" + line
			continue
		}
		cur = append(cur, docCommand{file: path, line: n, cmd: line})
	}
	if in {
		t.Fatalf("%s: a ```sh block is not closed", path)
	}
	return blocks
}

// pattern is an expected line as a regular expression over a whole output line.
func pattern(want string) *regexp.Regexp {
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// matches reports whether the expected lines appear in order among the output's lines, and the
// first one that does not.
func matches(out string, want []string) (bool, string) {
	lines := strings.Split(out, "\n")
	i := 0
	for _, w := range want {
		re := pattern(w)
		for i < len(lines) && !re.MatchString(lines[i]) {
			i++
		}
		if i == len(lines) {
			return false, w
		}
		i++
	}
	return true, ""
}

func TestPattern(t *testing.T) {
	rows := []struct {
		out  string
		want []string
		ok   bool
	}{
		{`{"state":"pending","status":"staged"}`, []string{`{"state":"pending",…}`}, true},
		{"a\nb\nc", []string{"a", "c"}, true},
		{"a\nb\nc", []string{"c", "a"}, false},
		{`{"state":"pending"}`, []string{`{"state":"active"…`}, false},
		{"x (y) [z]", []string{"x (y) [z]"}, true},
	}
	for _, r := range rows {
		if ok, _ := matches(r.out, r.want); ok != r.ok {
			t.Errorf("matches(%q, %q) = %v, want %v", r.out, r.want, ok, r.ok)
		}
	}
}
