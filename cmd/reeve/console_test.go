package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// reeve console serves the console in front of a scheduler and prints its
// URL; it stops when its context ends.
func TestConsoleCommand(t *testing.T) {
	addr := demoEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "--address", addr, "--listen", "127.0.0.1:0"}, &out, &errOut, func(string) string { return "" })
	}()
	urlRe := regexp.MustCompile(`reeve console: (http://\S+)`)
	var url string
	for deadline := time.Now().Add(30 * time.Second); url == ""; {
		if m := urlRe.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no URL printed; stdout %q stderr %q", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get(url + "workflows")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "demo.orders") {
		t.Fatalf("workflows page: status %d", resp.StatusCode)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("reeve console did not stop")
	}
}

func TestConsoleCommandUsage(t *testing.T) {
	code, _, errOut := reeve(t, "127.0.0.1:1", "console", "--address", "a:1,no-port")
	if code != 2 || !strings.Contains(errOut, `--address: "no-port"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}
