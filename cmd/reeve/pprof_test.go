package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/testenv"
)

func TestPprofEndpoints(t *testing.T) {
	addr, stop, err := startPprof(context.Background(), "127.0.0.1:0", testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1"} {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("GET %s: %d, %d bytes", path, resp.StatusCode, len(body))
		}
	}
	// Nothing but pprof is served.
	resp, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /: %d, want 404", resp.StatusCode)
	}
	stop()
	if _, err := client.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Fatal("pprof still served after stop")
	}
}

func TestPprofOffByDefault(t *testing.T) {
	var f pprofFlag
	addr, stop, err := f.start(context.Background(), testenv.Logger())
	if err != nil || addr != "" {
		t.Fatalf("pprof started without the flag: %q %v", addr, err)
	}
	stop()
	for _, cmd := range []string{"dev", "scheduler", "bench"} {
		var out strings.Builder
		code := run(context.Background(), []string{cmd, "--help"}, &out, io.Discard, func(string) string { return "" })
		if code != 0 || !strings.Contains(out.String(), "--pprof-listen") {
			t.Errorf("reeve %s --help (exit %d) does not document --pprof-listen", cmd, code)
		}
	}
}

func TestPprofBadAddress(t *testing.T) {
	if _, _, err := startPprof(context.Background(), "256.1.1.1:bad", testenv.Logger()); err == nil {
		t.Fatal("want an error for a bad --pprof-listen")
	}
}
