package cluster

import (
	"net"
	"strconv"
	"testing"
)

// The cluster's processes get ports below the kernel's ephemeral range, so
// that a port freed by a killed process is not taken by an outgoing
// connection before the process restarts on it.
func TestFreeAddrIsBelowTheEphemeralRange(t *testing.T) {
	low, ok := ephemeralPortsFrom()
	if !ok || low <= minPickedPort+1000 {
		t.Skipf("ephemeral range unknown or too low here (%d, %v)", low, ok)
	}
	for range 20 {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if port < minPickedPort || port >= low {
			t.Fatalf("freeAddr gave port %d, want one in [%d, %d)", port, minPickedPort, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is not free: %v", addr, err)
		}
		l.Close()
	}
}
