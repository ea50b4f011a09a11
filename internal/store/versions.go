package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Record versions. Every value the store keeps says the version of its
// format in field 1000, record_version (proto/reeve/store/v1/store.proto):
// a field of the store's own messages (TaskRecord, ReadyEntry,
// AgentRecord), and a number the public messages stored as they are
// (reeve.v1.Workflow, reeve.v1.Alert, reeve.v1.Schedule) reserve. 0, or absent, as in every
// record written before versions existed, means version 1. This Reeve
// writes version 1 (the field absent) and knows no other. A new field that
// an older Reeve can ignore harmlessly (it keeps it when it rewrites the
// record, as protobuf keeps unknown fields, and what it does without it is
// safe) does not raise the version: ended_unindexed (unindexed.go) is one.
//
// A newer Reeve that changes what a record means (a new step kind a
// scheduler must not run as an ordinary step, a task field a transition
// must keep in step) writes a higher version. An older Reeve never
// rewrites such a record: the read-modify-write paths (UpdateTask, the
// retention sweep and the archive's move, the supervisor's expired
// records, the created-index backfill, AckAlert, DeleteAgentSession) leave
// it as it is and report it (ErrUnknownVersion to the caller where there
// is one, the counter reeve.records.unknown_version, a rate-limited log
// line), submissions of a workflow of an unknown version are refused, and
// ready entries of an unknown version are not dispatched. Reads (GetTask,
// the lists and watches, GetWorkflow, ListAlerts, ListAgents) show such a
// record as this Reeve decodes it: the fields it knows.
//
// Not guaranteed: an alert is rewritten by its task's transaction (marked
// resolved when an operator's action takes the task out of FAILED) without
// a look at the alert's version, since etcd cannot compare a field of a
// value; a Reeve that changes alerts so that this matters writes its task
// records in a new version too.

// RecordVersion is the newest record version this Reeve knows, and the one
// it writes.
const RecordVersion = 1

// recordVersionField is record_version's field number, the same in every
// stored message.
const recordVersionField protowire.Number = 1000

// The kinds of records an UnknownVersionError names, besides KindTask,
// KindWorkflow and KindAlert.
const (
	KindReadyEntry = "ready_entry"
	KindAgent      = "agent"
)

// ErrUnknownVersion means a record is of a version newer than this Reeve
// knows (written by a newer Reeve): it was left as it is.
var ErrUnknownVersion = errors.New("store: record of an unknown version")

// UnknownVersionError names a record of an unknown version; it matches
// ErrUnknownVersion.
type UnknownVersionError struct {
	// Kind is KindTask, KindWorkflow, KindAlert, KindReadyEntry or
	// KindAgent; Namespace and Name (task id, workflow name and version,
	// alert id, task/step, agent id) name the record, Key is its etcd key.
	Kind, Namespace, Name, Key string
	// Version is the record's version; RecordVersion is the one known.
	Version uint32
}

func (e *UnknownVersionError) Error() string {
	return fmt.Sprintf("%s %q in namespace %q is a record of version %d, newer than this Reeve knows (%d): left as it is; upgrade Reeve to change it",
		e.Kind, e.Name, e.Namespace, e.Version, RecordVersion)
}

// Is makes an UnknownVersionError match ErrUnknownVersion.
func (e *UnknownVersionError) Is(target error) bool { return target == ErrUnknownVersion }

// knownVersion reports whether a record_version is one this Reeve knows
// (0 is version 1).
func knownVersion(v uint32) bool { return v <= RecordVersion }

// EffectiveVersion is the version a record_version value means: 0 (absent)
// is version 1.
func EffectiveVersion(v uint32) uint32 { return max(v, 1) }

// unknownFieldVersion returns the record_version of a public message the
// store keeps as it is (Workflow, Alert), which decodes as an unknown
// field; 0 when it has none.
func unknownFieldVersion(m proto.Message) uint32 {
	v, _ := scanVersion(m.ProtoReflect().GetUnknown())
	return v
}

// scanVersion returns the record_version among the top-level fields of an
// encoded message, 0 when it has none; the last occurrence wins, as
// protobuf's does.
func scanVersion(b []byte) (uint32, error) {
	var v uint32
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return v, protowire.ParseError(n)
		}
		b = b[n:]
		if num == recordVersionField && typ == protowire.VarintType {
			x, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return v, protowire.ParseError(k)
			}
			// A value past uint32 is as unknown as any newer version.
			v = uint32(min(x, 1<<32-1))
			b = b[k:]
			continue
		}
		k := protowire.ConsumeFieldValue(num, typ, b)
		if k < 0 {
			return v, protowire.ParseError(k)
		}
		b = b[k:]
	}
	return v, nil
}

// VersionOf returns the record version of a value the store keeps, of any
// kind (a task record, plain or compressed, a ready entry, an agent record,
// a workflow, an alert): its record_version, 1 when it has none. For
// readers outside the store, such as reeve verify; compare it with
// RecordVersion.
func VersionOf(val []byte) (uint32, error) {
	b, err := recordProto(val)
	if err != nil {
		return 0, err
	}
	v, err := scanVersion(b)
	if err != nil {
		return 0, err
	}
	return EffectiveVersion(v), nil
}

// dropVersionField removes a record_version from the unknown fields of a
// public message before the store writes it as version 1 (a client's
// RegisterWorkflow cannot set the version of what is stored).
func dropVersionField(m proto.Message) {
	r := m.ProtoReflect()
	b := r.GetUnknown()
	if len(b) == 0 {
		return
	}
	var kept []byte
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return
		}
		k := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if k < 0 {
			return
		}
		if num != recordVersionField {
			kept = append(kept, rest[:n+k]...)
		}
		rest = rest[n+k:]
	}
	if len(kept) != len(b) {
		r.SetUnknown(kept)
	}
}

// WithLogger sets where the store logs what it leaves alone (records of an
// unknown version, at most one line per kind of record a minute, with the
// count of those not logged) and its waits for etcd at start
// (AwaitLayout); default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// unknownReporter counts and logs the records of unknown versions a store
// meets.
type unknownReporter struct {
	counter metric.Int64Counter
	mu      sync.Mutex
	last    map[string]time.Time // by kind
	dropped map[string]int
}

// unknownLogEvery is how often a store logs records of an unknown version,
// per kind.
const unknownLogEvery = time.Minute

func newUnknownReporter(m metric.Meter) *unknownReporter {
	c, _ := m.Int64Counter("reeve.records.unknown_version",
		metric.WithDescription("Records of a version newer than this Reeve knows that it met on a write path and left as they are, by kind of record (task, workflow, alert, ready_entry, agent)"))
	// Export the series from the start, so that alerts on it work before
	// the first one.
	for _, k := range []string{KindTask, KindWorkflow, KindAlert, KindReadyEntry, KindAgent} {
		c.Add(context.Background(), 0, kindAttr(k))
	}
	return &unknownReporter{counter: c, last: map[string]time.Time{}, dropped: map[string]int{}}
}

func kindAttr(kind string) metric.AddOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("reeve.record.kind", kind)))
}

// unknownVersion reports a record of an unknown version that the store
// leaves as it is during op, and returns e.
func (s *Store) unknownVersion(op string, e *UnknownVersionError) error {
	r := s.unknown
	r.counter.Add(context.Background(), 1, kindAttr(e.Kind))
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.last[e.Kind]) < unknownLogEvery {
		r.dropped[e.Kind]++
		r.mu.Unlock()
		return e
	}
	r.last[e.Kind] = now
	suppressed := r.dropped[e.Kind]
	r.dropped[e.Kind] = 0
	r.mu.Unlock()
	args := []any{"op", op, "record_kind", e.Kind, "namespace", e.Namespace, "name", e.Name, "key", e.Key,
		"record_version", e.Version, "known_version", RecordVersion}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	s.log.Warn("record of a newer Reeve left as it is", args...)
	return e
}

// reportUnknown reports err when it is an UnknownVersionError (see
// unknownVersion).
func (s *Store) reportUnknown(op string, err error) {
	var e *UnknownVersionError
	if errors.As(err, &e) {
		s.unknownVersion(op, e)
	}
}
