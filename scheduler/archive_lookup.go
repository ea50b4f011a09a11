package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/reeve-org/reeve/internal/taskread"
)

// archiveLookups answers "is this task archived?" for SubmitTask's
// idempotency check (archivedSubmission), one archive query for every
// submission that asked while the previous query ran: a new task with a
// chosen id costs the archive a share of one query instead of a round trip
// of its own (the round trip per submission was a tenth of the scheduler's
// CPU at a few thousand tasks a second with PostgreSQL). It adds no wait
// when the queue is empty: a lone submission's query starts at once.
//
// After a query failed, the next ones fail at once, with its error, for
// archiveDownFor: while the archive is unavailable each submission costs
// no wait for it (SubmitTask then asks the deduplication window, dedup.go).
type archiveLookups struct {
	r    *taskread.Reader
	reqs chan *archiveLookup
	now  func() time.Time

	mu        sync.Mutex
	downUntil time.Time // queries fail at once until then, with downErr
	downErr   error
}

type archiveLookup struct {
	ns, id string
	done   chan archiveLookupResult // buffered: the answer never blocks
}

type archiveLookupResult struct {
	archived bool
	err      error
}

// maxArchiveLookups is the most submissions one query answers.
const maxArchiveLookups = 256

// archiveLookupTimeout bounds one query.
const archiveLookupTimeout = 10 * time.Second

// archiveDownFor is how long queries fail at once after one failed.
const archiveDownFor = time.Second

func newArchiveLookups(ctx context.Context, r *taskread.Reader, now func() time.Time) *archiveLookups {
	l := &archiveLookups{r: r, reqs: make(chan *archiveLookup, maxArchiveLookups), now: now}
	go l.run(ctx)
	return l
}

// archived reports whether the archive holds task id of namespace ns.
func (l *archiveLookups) archived(ctx context.Context, ns, id string) (bool, error) {
	l.mu.Lock()
	down, downErr := l.now().Before(l.downUntil), l.downErr
	l.mu.Unlock()
	if down {
		return false, downErr
	}
	req := &archiveLookup{ns: ns, id: id, done: make(chan archiveLookupResult, 1)}
	select {
	case l.reqs <- req:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case res := <-req.done:
		return res.archived, res.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (l *archiveLookups) run(ctx context.Context) {
	for {
		var batch []*archiveLookup
		select {
		case <-ctx.Done():
			return
		case req := <-l.reqs:
			batch = append(batch, req)
		}
	more:
		for len(batch) < maxArchiveLookups {
			select {
			case req := <-l.reqs:
				batch = append(batch, req)
			default:
				break more
			}
		}
		l.answer(ctx, batch)
	}
}

// answer queries the archive once per namespace of batch.
func (l *archiveLookups) answer(ctx context.Context, batch []*archiveLookup) {
	byNS := map[string][]*archiveLookup{}
	for _, req := range batch {
		byNS[req.ns] = append(byNS[req.ns], req)
	}
	for ns, reqs := range byNS {
		ids := make([]string, len(reqs))
		for i, req := range reqs {
			ids[i] = req.id
		}
		qctx, cancel := context.WithTimeout(ctx, archiveLookupTimeout)
		has, err := l.r.InArchive(qctx, ns, ids)
		cancel()
		if err != nil && ctx.Err() == nil {
			l.mu.Lock()
			l.downUntil, l.downErr = l.now().Add(archiveDownFor), err
			l.mu.Unlock()
		}
		for _, req := range reqs {
			req.done <- archiveLookupResult{archived: has[req.id], err: err}
		}
	}
}
