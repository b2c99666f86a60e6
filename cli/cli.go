// Package cli holds the fleetd binary's commands other than `fleetd serve`: the operator's
// (`check`, `policy learn`, `plan`, `inventory check`) and the agents' (`enroll`, `boot-check`).
// The root package dispatches to them and composes the server; cli never imports it
// (docs/design.md, "Packages").
//
// Every command answers -h or --help with its usage on standard output and exit status 0, and
// a misuse (a flag it does not know, a bad flag value, a missing or extra argument) with the
// problem and its usage on standard error and exit status 2.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
)

// NewFlagSet is a command's flag set; usage is the first lines of its help, before the flags.
func NewFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		if hasFlags(fs) {
			fmt.Fprintln(fs.Output(), "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// Parse parses a command's flags, which may stand anywhere among its positional arguments, and
// returns the positional arguments. When it returns ok false the command is over and code is
// its exit status: 0 after -h or --help, whose usage went to stdout; 2 after a misuse, whose
// complaint and usage went to stderr.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	var out bytes.Buffer
	fs.SetOutput(&out)
	defer fs.SetOutput(stderr)
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			_, _ = stdout.Write(out.Bytes())
			return nil, 0, false
		case err != nil:
			_, _ = stderr.Write(out.Bytes()) // the flag package's complaint, then the usage
			return nil, 2, false
		}
		if fs.NArg() == 0 {
			return pos, 0, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// Misuse ends a command whose arguments are wrong: the problem, then the usage, on stderr.
func Misuse(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "fleetd %s: %s\n\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.SetOutput(stderr)
	fs.Usage()
	return 2
}

// NoArgs ends, as a misuse, a command that takes no positional arguments and was given some.
func NoArgs(fs *flag.FlagSet, pos []string, stderr io.Writer) (code int, ok bool) {
	if len(pos) > 0 {
		return Misuse(fs, stderr, "unexpected arguments %q", pos), false
	}
	return 0, true
}

// Subcommand checks that args start with sub, the one subcommand of command name, and returns
// the rest. -h or --help instead print usage on stdout (0); anything else is a misuse (2).
func Subcommand(name, sub, usage string, args []string, stdout, stderr io.Writer) (rest []string, code int, ok bool) {
	switch {
	case len(args) > 0 && args[0] == sub:
		return args[1:], 0, true
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "--h"):
		fmt.Fprintln(stdout, usage)
		return nil, 0, false
	case len(args) == 0:
		fmt.Fprintf(stderr, "fleetd %s: name the subcommand (%s)\n\n%s\n", name, sub, usage)
	default:
		fmt.Fprintf(stderr, "fleetd %s: unknown subcommand %q (%s)\n\n%s\n", name, args[0], sub, usage)
	}
	return nil, 2, false
}
