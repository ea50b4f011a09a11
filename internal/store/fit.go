package store

import (
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// MaxRecordBytes bounds an encoded task record. etcd refuses a request over
// its --max-request-bytes (1.5 MiB by default, which operations.md asks to
// keep); the rest is room for the index keys written with the record.
//
// Submission limits keep a new record far below it (a workflow of at most
// 256 KiB, an input of at most 64 KiB), and the scheduler admits a step's
// output only while the record stays within it. What still grows after the
// outputs filled a record is text kept for people: each failure adds its
// message (up to 4 KiB) to the step's last_error and to the history, each
// operator action its reason. A record that grew past etcd's limit could
// never be written again — no result, no recovery, no cancel — so a write
// whose record would pass MaxRecordBytes shortens that text first (fit).
const MaxRecordBytes = 1 << 20

const (
	// shortText is what fit keeps of a long message.
	shortText = 256
	// keepEvents is how many of the newest history events fit never drops.
	keepEvents = 20
	// cutMark ends a message fit shortened.
	cutMark = " …[cut: task record size limit]"
)

// fit shortens what rec keeps only for people to read until it encodes to
// at most max bytes, in this order, each step only as far as needed:
//
//  1. history event messages longer than shortText, oldest first;
//  2. the last_error message of each step, in the workflow's order;
//  3. the task's reason;
//  4. the oldest history events, dropped and counted in history_dropped,
//     down to the newest keepEvents.
//
// Outputs, the input, the workflow and every field a transition reads
// (states, attempts, times, error codes, the kinds and times of history
// events) are never changed. It reports whether rec fits now; it may not
// when its outputs, input and workflow alone come near max, which the
// scheduler's admission of outputs prevents.
func fit(rec *storev1.TaskRecord, max int) bool {
	size := proto.Size(rec)
	if size <= max {
		return true
	}
	t := rec.GetTask()
	for _, h := range t.GetHistory() {
		if size <= max {
			break
		}
		if s, ok := shorten(h.GetMessage()); ok {
			size -= len(h.GetMessage()) - len(s)
			h.Message = s
		}
	}
	for _, st := range t.GetSteps() {
		if size <= max {
			break
		}
		if e := st.GetLastError(); e != nil {
			if s, ok := shorten(e.GetMessage()); ok {
				size -= len(e.GetMessage()) - len(s)
				e.Message = s
			}
		}
	}
	if size > max {
		if s, ok := shorten(t.GetReason()); ok {
			t.Reason = s
		}
	}
	// The estimates above ignore the length prefixes that shrank with the
	// text; measure again before dropping whole events.
	size = proto.Size(rec)
	drop := 0
	for size > max && len(t.GetHistory())-drop > keepEvents {
		size -= proto.Size(t.GetHistory()[drop]) + 2 // the event, its tag and length
		drop++
	}
	if drop > 0 {
		t.History = append(t.History[:0:0], t.History[drop:]...)
		t.HistoryDropped += int32(drop)
		size = proto.Size(rec)
	}
	return size <= max
}

// shorten cuts s to shortText bytes (at a character boundary) followed by
// cutMark, when that makes it shorter.
func shorten(s string) (string, bool) {
	if len(s) <= shortText+len(cutMark) {
		return s, false
	}
	n := shortText
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + cutMark, true
}
