package main

import "strings"

// parseLabels turns repeated --label k=v flags into a map; the scheduler
// validates keys and values.
func parseLabels(flag string, values []string) (map[string]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(values))
	for _, kv := range values {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("%s: want KEY=VALUE, got %q", flag, kv)
		}
		if _, dup := out[k]; dup {
			return nil, usagef("%s: key %q given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}
