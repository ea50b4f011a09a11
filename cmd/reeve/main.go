// Command reeve runs Reeve (dev mode, schedulers) and talks to it (tasks,
// workflows). See docs/cli.md.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}
