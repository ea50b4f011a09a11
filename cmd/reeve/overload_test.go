package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// Overload flags out of range are usage errors naming the flag, before
// anything starts.
func TestOverloadBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"scheduler", "--etcd-endpoints", "http://127.0.0.1:1", "--overload-interval", "1ms"}, "--overload-interval"},
		{[]string{"scheduler", "--etcd-endpoints", "http://127.0.0.1:1", "--overload-target", "-1s"}, "--overload-target"},
		{[]string{"dev", "--overload-target", "2m"}, "--overload-target"},
		{[]string{"scheduler", "--etcd-endpoints", "http://127.0.0.1:1", "--overload-cpu-target", "-1ms"}, "--overload-cpu-target"},
		{[]string{"dev", "--overload-cpu-target", "2s"}, "--overload-cpu-target"},
		{[]string{"dev", "--overload-cpu-target", "1ms", "--overload-target", "0"}, "--overload-cpu-target"},
	} {
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := run(ctx, tc.args, &out, &errOut, func(string) string { return "" })
		cancel()
		if code != exitUsage || !strings.Contains(errOut.String(), tc.flag) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %s", tc.args, code, errOut.String(), exitUsage, tc.flag)
		}
	}
}
