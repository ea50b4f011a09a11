package store

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// bigRecord is a task with an output of outputKiB, 3 steps whose last
// errors carry 4 KiB messages, a 4 KiB reason and 60 history events with
// 4 KiB messages (oldest first: e00 … e59).
func bigRecord(outputKiB int) *storev1.TaskRecord {
	long := func(c string) string { return strings.Repeat(c, 4096) }
	t := &reevev1.Task{Namespace: "default", Id: "t", State: reevev1.TaskState_TASK_STATE_RUNNING, Reason: long("r")}
	for i := range 3 {
		t.Steps = append(t.Steps, &reevev1.Step{Name: fmt.Sprintf("s%d", i), State: reevev1.StepState_STEP_STATE_FAILED,
			LastError: &reevev1.StepError{Code: "boom", Message: long("e")}})
	}
	t.Steps[0].Output = structpb.NewStringValue(strings.Repeat("o", outputKiB<<10))
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	for i := range 60 {
		t.History = append(t.History, &reevev1.HistoryEvent{Time: timestamppb.New(t0.Add(time.Duration(i) * time.Second)),
			Kind: fmt.Sprintf("e%02d", i), Step: "s0", Attempt: int32(i), Message: long("m")})
	}
	return &storev1.TaskRecord{Task: t}
}

func TestFitLeavesARecordWithinTheLimitAlone(t *testing.T) {
	rec := bigRecord(10)
	orig := proto.Clone(rec)
	if !fit(rec, proto.Size(rec)) || !proto.Equal(rec, orig) {
		t.Fatal("a record within the limit was changed")
	}
}

// Slightly over: only the oldest history messages are shortened, as few as
// needed; the newest events, the steps' errors and the reason stay whole.
func TestFitShortensTheOldestHistoryMessagesFirst(t *testing.T) {
	rec := bigRecord(10)
	max := proto.Size(rec) - 10<<10 // three messages' worth
	if !fit(rec, max) {
		t.Fatal("does not fit")
	}
	if got := proto.Size(rec); got > max {
		t.Fatalf("size %d > %d", got, max)
	}
	h := rec.GetTask().GetHistory()
	cut := 0
	for i, e := range h {
		if strings.HasSuffix(e.GetMessage(), cutMark) {
			cut++
			if i >= 3 || len(e.GetMessage()) != shortText+len(cutMark) {
				t.Fatalf("event %s shortened to %d bytes", e.GetKind(), len(e.GetMessage()))
			}
		}
	}
	if cut != 3 || len(h) != 60 || rec.GetTask().GetHistoryDropped() != 0 {
		t.Fatalf("%d messages shortened, %d events, %d dropped; want 3, 60, 0", cut, len(h), rec.GetTask().GetHistoryDropped())
	}
	for _, s := range rec.GetTask().GetSteps() {
		if len(s.GetLastError().GetMessage()) != 4096 {
			t.Fatalf("step %s's error shortened before the history was", s.GetName())
		}
	}
	if len(rec.GetTask().GetReason()) != 4096 {
		t.Fatal("reason shortened before the history was")
	}
}

// Far over: every text is shortened, then the oldest events are dropped
// (counted), down to the newest keepEvents; outputs, codes, kinds, times
// and attempts are untouched.
func TestFitDropsTheOldestEventsOnlyAfterShorteningEveryText(t *testing.T) {
	rec := bigRecord(900)
	output := proto.Clone(rec.GetTask().GetSteps()[0].GetOutput())
	max := 900<<10 + 5<<10 // the output and a few small events
	fit(rec, max)
	task := rec.GetTask()
	for _, s := range task.GetSteps() {
		if !strings.HasSuffix(s.GetLastError().GetMessage(), cutMark) || s.GetLastError().GetCode() != "boom" {
			t.Fatalf("step %s's error %q… code %q", s.GetName(), s.GetLastError().GetMessage()[:8], s.GetLastError().GetCode())
		}
	}
	if !strings.HasSuffix(task.GetReason(), cutMark) {
		t.Fatal("reason not shortened")
	}
	h := task.GetHistory()
	if len(h) != keepEvents || task.GetHistoryDropped() != int32(60-keepEvents) {
		t.Fatalf("%d events kept, %d dropped; want %d, %d", len(h), task.GetHistoryDropped(), keepEvents, 60-keepEvents)
	}
	for i, e := range h {
		n := 60 - keepEvents + i
		if e.GetKind() != fmt.Sprintf("e%02d", n) || e.GetAttempt() != int32(n) || !strings.HasSuffix(e.GetMessage(), cutMark) {
			t.Fatalf("kept event %d is %s attempt %d %q…", i, e.GetKind(), e.GetAttempt(), e.GetMessage()[:8])
		}
	}
	if !proto.Equal(task.GetSteps()[0].GetOutput(), output) {
		t.Fatal("output changed")
	}
}

func TestShortenCutsAtACharacterBoundary(t *testing.T) {
	s := strings.Repeat("é", 300) // 2 bytes each: byte shortText is a continuation byte only if odd
	got, ok := shorten("x" + s)
	if !ok || !strings.HasSuffix(got, cutMark) {
		t.Fatalf("not shortened: %d bytes", len(got))
	}
	body := strings.TrimSuffix(got, cutMark)
	if len(body) > shortText || !strings.HasPrefix("x"+s, body) || !utf8.ValidString(body) {
		t.Fatalf("cut to %d bytes, valid UTF-8 %v", len(body), utf8.ValidString(body))
	}
	if _, ok := shorten(strings.Repeat("a", shortText+len(cutMark))); ok {
		t.Fatal("a message no longer than the cut was shortened")
	}
}
