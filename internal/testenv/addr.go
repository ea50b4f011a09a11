package testenv

import (
	"net"
	"testing"
)

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a server a test starts later (StartScheduler(addr)) at an
// address it must hand out first. Another process may take the port in
// between; StartScheduler retries its listen for a few seconds.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free address: %v", err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatalf("free address: %v", err)
	}
	return addr
}
