package main

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// timeFlag is a flag holding an RFC 3339 time ("" when unset) and where
// its value goes.
type timeFlag struct {
	name, value string
	dst         **timestamppb.Timestamp
}

// parseTimeFlags sets each set flag's destination, or returns a usage
// error naming the flag.
func parseTimeFlags(flags ...timeFlag) error {
	for _, f := range flags {
		if f.value == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, f.value)
		if err != nil {
			return usagef("%s: want an RFC 3339 time (2026-01-02T15:04:05Z): %v", f.name, err)
		}
		*f.dst = timestamppb.New(at)
	}
	return nil
}
