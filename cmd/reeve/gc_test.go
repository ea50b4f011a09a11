package main

import (
	"errors"
	"math"
	"runtime/debug"
	"testing"

	"github.com/spf13/cobra"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"512MiB", 512 << 20},
		{"2GiB", 2 << 30},
		{"1.5GiB", 3 << 29},
		{"100MB", 100e6},
		{"16777216", 16 << 20},
		{" 64 MiB ", 64 << 20},
	} {
		if got, err := parseBytes(c.in); err != nil || got != c.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "0", "-1GiB", "1KiB", "15MiB", "lots", "1XB", "NaN", "+Inf", "1e30GiB"} {
		if got, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) = %d; want an error", bad, got)
		}
	}
}

// The flags (or their REEVE_ variables, which a flag overrides) set the Go
// runtime's memory limit and GC percentage.
func TestPerfFlagsSetTheRuntime(t *testing.T) {
	oldLimit, oldPercent := debug.SetMemoryLimit(-1), debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetMemoryLimit(oldLimit); debug.SetGCPercent(oldPercent) })
	for _, c := range []struct {
		name        string
		args        []string
		env         map[string]string
		wantLimit   int64
		wantPercent int
	}{
		{"flags", []string{"--memory-limit", "256MiB", "--gc-percent", "300"}, nil, 256 << 20, 300},
		{"env", nil, map[string]string{"REEVE_MEMORY_LIMIT": "300MiB", "REEVE_GC_PERCENT": "250"}, 300 << 20, 250},
		{"flag over env", []string{"--gc-percent", "150"}, map[string]string{"REEVE_GC_PERCENT": "250"}, -1, 150},
		{"off", []string{"--memory-limit", "off", "--gc-percent", "100"}, nil, math.MaxInt64, 100},
		{"collect only at the limit", []string{"--memory-limit", "512MiB", "--gc-percent", "-1"}, nil, 512 << 20, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f perfFlags
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			f.register(cmd, func(k string) string { return c.env[k] }, 400, false)
			if err := cmd.ParseFlags(c.args); err != nil {
				t.Fatal(err)
			}
			limit, percent, err := f.apply(cmd)
			if err != nil {
				t.Fatal(err)
			}
			if percent != c.wantPercent || debug.SetGCPercent(percent) != c.wantPercent {
				t.Errorf("GC percent %d; want %d", percent, c.wantPercent)
			}
			if got := debug.SetMemoryLimit(-1); got != limit || (c.wantLimit != -1 && got != c.wantLimit) {
				t.Errorf("memory limit %d (apply said %d); want %d", got, limit, c.wantLimit)
			}
		})
	}
}

// Record compression is on by default with an archive, and off without
// one; the flag or REEVE_RECORD_COMPRESSION, when given, decides either way.
func TestRecordCompressionDefaultsOnWithAnArchive(t *testing.T) {
	for _, c := range []struct {
		name    string
		args    []string
		env     map[string]string
		archive bool
		want    bool
	}{
		{"no archive", nil, nil, false, false},
		{"archive", nil, nil, true, true},
		{"archive, flag off", []string{"--record-compression=false"}, nil, true, false},
		{"archive, env off", nil, map[string]string{"REEVE_RECORD_COMPRESSION": "false"}, true, false},
		{"no archive, flag on", []string{"--record-compression"}, nil, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f perfFlags
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			f.register(cmd, func(k string) string { return c.env[k] }, 400, false)
			if err := cmd.ParseFlags(c.args); err != nil {
				t.Fatal(err)
			}
			f.compressWithArchive(cmd, c.archive)
			if f.compress != c.want {
				t.Errorf("compress %v; want %v", f.compress, c.want)
			}
		})
	}
}

// Outside a container the default limit is half of the machine's memory,
// never below 1 GiB, and 1 GiB when the machine's memory is unknown.
func TestSystemMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		total uint64
		err   error
		want  int64
	}{
		{24 << 30, nil, 12 << 30},
		{1 << 30, nil, 1 << 30},
		{0, nil, 1 << 30},
		{8 << 30, errors.New("unknown"), 1 << 30},
		{math.MaxUint64, nil, 1 << 30},
	} {
		if got := systemMemoryLimit(c.total, c.err); got != c.want {
			t.Errorf("systemMemoryLimit(%d, %v) = %d, want %d", c.total, c.err, got, c.want)
		}
	}
}
