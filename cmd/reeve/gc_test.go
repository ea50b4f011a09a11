package main

import "testing"

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
