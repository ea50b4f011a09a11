package main

import (
	"net"
	"strings"
	"testing"
)

// --address takes a list: requests go to the schedulers that are up, so a
// dead address in the list does not fail them.
func TestAddressListSkipsADeadScheduler(t *testing.T) {
	live := demoEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nothing listens there now
	for range 4 {
		code, out, stderr := reeve(t, dead+","+live, "task", "submit", "--workflow", "demo.orders", "--input", `{"order_id":"l"}`, "--wait", "-o", "json")
		if code != 0 || !strings.Contains(out, "TASK_STATE_SUCCEEDED") {
			t.Fatalf("exit %d, stdout %s, stderr %s", code, out, stderr)
		}
	}
}

func TestAddressListMustNameAnAddress(t *testing.T) {
	for _, addr := range []string{",", " , ", "no-port,127.0.0.1:1"} {
		if code, _, stderr := reeve(t, addr, "task", "get", "x"); code != exitUsage || !strings.Contains(stderr, "--address") {
			t.Errorf("--address %q: exit %d, stderr %q; want a usage error naming --address", addr, code, stderr)
		}
	}
}
