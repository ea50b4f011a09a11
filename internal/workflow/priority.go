package workflow

import (
	"unicode"
	"unicode/utf8"
)

// Priority and fairness (issue 36, item 3): a task's priority orders the
// ready steps of a queue, its fairness key shares each priority fairly
// among tenants (docs/architecture.md, "Dispatch: priority and fairness").
const (
	// HighestPriority and LowestPriority bound a task's priority; a
	// submission without one (0) runs at DefaultPriority.
	HighestPriority = 1
	LowestPriority  = 5
	DefaultPriority = 3
	// MaxFairnessKeyBytes bounds a fairness key: any valid UTF-8 without
	// control characters, at most this many bytes (63 characters of ASCII).
	MaxFairnessKeyBytes = 63
)

// ValidatePriority checks a submission's priority: 0 (the default, 3) or
// 1 (highest) to 5.
func ValidatePriority(field string, p int32) error {
	if p != 0 && (p < HighestPriority || p > LowestPriority) {
		return fieldErr(field, "%d is not a priority: 1 (highest) to 5, or 0 for the default %d", p, DefaultPriority)
	}
	return nil
}

// ValidateFairnessKey checks a fairness key: empty (the shared key), or
// valid UTF-8 of at most MaxFairnessKeyBytes bytes without control
// characters. It is kept in the task record and the ready entry's value,
// never in an etcd key, so no separator is excluded.
func ValidateFairnessKey(field, k string) error {
	if len(k) > MaxFairnessKeyBytes {
		return fieldErr(field, "%d bytes, more than %d", len(k), MaxFairnessKeyBytes)
	}
	if !utf8.ValidString(k) {
		return fieldErr(field, "not valid UTF-8")
	}
	for _, r := range k {
		if unicode.IsControl(r) {
			return fieldErr(field, "contains the control character %U", r)
		}
	}
	return nil
}

// NormalPriority is the priority a task keeps for a submission's: the
// default (given as 0 or 3) is kept as 0, so that a task submitted without
// a priority has the same record, ready entries and request digest as
// before priorities existed.
func NormalPriority(p int32) int32 {
	if p == DefaultPriority {
		return 0
	}
	return p
}

// EffectivePriority is the priority a task's steps are dispatched at: p,
// or DefaultPriority when p is 0.
func EffectivePriority(p int32) int32 {
	if p == 0 {
		return DefaultPriority
	}
	return p
}
