package retryinfo_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/internal/retryinfo"
)

func TestDelayReadsTheSchedulersRetryInfo(t *testing.T) {
	refused, err := status.New(codes.ResourceExhausted, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(750 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		err    error
		want   time.Duration
		wantOK bool
	}{
		{"refusal with a delay", refused.Err(), 750 * time.Millisecond, true},
		{"wrapped refusal", fmt.Errorf("submit: %w", refused.Err()), 750 * time.Millisecond, true},
		{"refusal without a delay", status.Error(codes.Unavailable, "down"), 0, false},
		{"not a status", errors.New("plain"), 0, false},
		{"no error", nil, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d, ok := retryinfo.Delay(c.err); d != c.want || ok != c.wantOK {
				t.Fatalf("Delay = %v, %v; want %v, %v", d, ok, c.want, c.wantOK)
			}
		})
	}
}
