package dial_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/internal/dial"
)

// Each transport error gRPC gives for a TLS mismatch gets its hint, naming
// the caller's settings; other errors get none.
func TestHintNamesTheCallersSettings(t *testing.T) {
	s := dial.Settings{CA: "CA-SETTING", ClientCert: "CERT-SETTING", Plaintext: "drop TLS-SETTINGS"}
	cases := []struct {
		code codes.Code
		msg  string
		want []string
	}{
		{codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`, []string{"may serve TLS: set CA-SETTING", "CERT-SETTING"}},
		{codes.Unavailable, `connection error: desc = "tls: first record does not look like a TLS handshake"`, []string{"serves plaintext: drop TLS-SETTINGS"}},
		{codes.Unavailable, `connection error: desc = "error reading server preface: remote error: tls: bad certificate"`, []string{"refused this client certificate"}},
		{codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`, nil},
		{codes.InvalidArgument, `server preface`, nil},
	}
	for _, tc := range cases {
		got := dial.Hint(status.Error(tc.code, tc.msg), s)
		if (got == "") != (len(tc.want) == 0) {
			t.Errorf("%s %q: hint %q, want one with %q", tc.code, tc.msg, got, tc.want)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %q: hint %q, want one with %q", tc.code, tc.msg, got, w)
			}
		}
	}
}
