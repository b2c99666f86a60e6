package main

import (
	"context"
	"fmt"
	"io"
)

// enroll and bootCheck are wired to agent/ when it lands; until then they say so and fail.
func enroll(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "fleetd enroll: not built into this version yet")
	return 2
}

func bootCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "fleetd boot-check: not built into this version yet")
	return 2
}
