package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written as "90s", "2h".
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return &durationError{line: n.Line, column: n.Column}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &durationError{line: n.Line, column: n.Column, value: s}
	}
	*d = Duration(v)
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// durationError is a value that is not a duration, where it stands in the file; Parse names its
// key (namedKey), which the value's own decoder does not know.
type durationError struct {
	line, column int
	value        string // "" when the value is not even a string
	key          string // the dotted key, once known
}

func (e *durationError) Error() string {
	what := fmt.Sprintf("%q is not a duration such as \"90s\" or \"2h\"", e.value)
	if e.value == "" {
		what = "want a duration such as \"90s\" or \"2h\""
	}
	if e.key == "" {
		return fmt.Sprintf("line %d: %s", e.line, what)
	}
	return fmt.Sprintf("%s: %s (line %d)", e.key, what, e.line)
}

// namedKey is err with the dotted key of the value it is about, when it is a durationError whose
// value can be found in raw; err unchanged otherwise.
func namedKey(raw []byte, err error) error {
	var de *durationError
	if !errors.As(err, &de) {
		return err
	}
	var root yaml.Node
	if yaml.Unmarshal(raw, &root) != nil {
		return err
	}
	if key := keyAt(&root, "", de.line, de.column); key != "" {
		named := *de
		named.key = key
		return &named
	}
	return err
}

// keyAt is the dotted path of the mapping key whose value node stands at line and column in the
// tree under n, or "".
func keyAt(n *yaml.Node, path string, line, column int) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if k := keyAt(c, path, line, column); k != "" {
				return k
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			p := strings.TrimPrefix(path+"."+key.Value, ".")
			if val.Line == line && val.Column == column {
				return p
			}
			if k := keyAt(val, p, line, column); k != "" {
				return k
			}
		}
	}
	return ""
}
