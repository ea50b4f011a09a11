package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// load submits cfg.Tasks tasks, closed or open loop, and returns the
// submit-to-completed latency of each completed task.
func load(ctx context.Context, cfg Config, c reevev1.SchedulerServiceClient, wf string, done *completions, wins *windows) (latencies []time.Duration, counts submitCounts, errs int, firstErr error) {
	var (
		mu   sync.Mutex
		next atomic.Int64
		wg   sync.WaitGroup
	)
	runID := fmt.Sprintf("%x", time.Now().UnixNano())
	counts.runID = runID
	keepAcked := cfg.VerifyLost || cfg.ArchiveDSN != ""
	stopAt := time.Now().Add(cfg.Duration)
	over := func() bool { return cfg.Duration > 0 && time.Now().After(stopAt) }
	one := func(i int64) {
		id := taskID(runID, i)
		ch := done.expect(id)
		var (
			began time.Time
			err   error
		)
		for {
			began = time.Now()
			_, err = c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: wf}}})
			if status.Code(err) != codes.ResourceExhausted {
				break
			}
			// Refused (shedding, a limit): counted apart from errors and
			// latencies. Open loop drops the task; a closed-loop submitter
			// waits as a client backing off would, and sends it again.
			mu.Lock()
			counts.refuse(refusalReason(err), time.Since(began))
			mu.Unlock()
			wins.refused()
			if cfg.Rate > 0 {
				done.forget(id)
				return
			}
			backoff, ok := agentsdk.RetryDelay(err)
			if !ok || cfg.QuotaBytes > 0 {
				backoff = floodBackoff
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			if cfg.QuotaBytes > 0 || ctx.Err() != nil || over() {
				done.forget(id)
				return
			}
		}
		if err == nil {
			mu.Lock()
			counts.accepted++
			if keepAcked {
				counts.acked = append(counts.acked, i)
			}
			mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				err = fmt.Errorf("task %s not completed (%s): %w", id, describe(c, id), ctx.Err())
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs++
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		lat := time.Since(began)
		latencies = append(latencies, lat)
		wins.add(lat)
	}
	if cfg.Rate > 0 {
		// Submission i is due at start + i/rate; a late loop catches up at
		// once (a ticker would drop ticks under load and lower the rate).
		start := time.Now()
		for i := int64(0); i < int64(cfg.Tasks); i++ {
			due := start.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					wg.Wait()
					return nil, counts, errs, ctx.Err()
				case <-time.After(d):
				}
			}
			if over() || ctx.Err() != nil {
				break
			}
			wg.Go(func() { one(i) })
		}
	} else {
		for range cfg.Concurrency {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(cfg.Tasks) || ctx.Err() != nil || over() {
						return
					}
					one(i)
				}
			})
		}
	}
	wg.Wait()
	return latencies, counts, errs, firstErr
}

// floodBackoff is how long a closed-loop submitter waits after a refusal
// without a RetryInfo delay.
const floodBackoff = 20 * time.Millisecond

// submitCounts counts the outcomes of submissions.
type submitCounts struct {
	accepted, refused int
	reasons           map[string]int  // refusals by ErrorInfo reason
	refusalLat        []time.Duration // how long each refused call took
	// runID and acked name the acknowledged submissions (taskID), kept
	// for the lost check (Config.VerifyLost, or an archive).
	runID string
	acked []int64
}

func (c *submitCounts) refuse(reason string, lat time.Duration) {
	c.refused++
	if c.reasons == nil {
		c.reasons = map[string]int{}
	}
	c.reasons[reason]++
	c.refusalLat = append(c.refusalLat, lat)
}

// refusalReason is the ErrorInfo reason of a refusal, or its code's name.
func refusalReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return status.Code(err).String()
}

// taskID is the id of the run's submission i.
func taskID(runID string, i int64) string { return fmt.Sprintf("b-%s-%07d", runID, i) }

// describe summarizes a task's state, for the error about a task that did
// not complete.
func describe(c reevev1.SchedulerServiceClient, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
	if err != nil {
		return err.Error()
	}
	t := resp.GetTask()
	out := t.GetState().String()
	for _, s := range t.GetSteps() {
		out += fmt.Sprintf(" %s=%s#%d agent=%q by=%v", s.GetName(), s.GetState(), s.GetAttempt(), s.GetLockedByAgent(), s.GetCompleteBy().AsTime().Format(time.RFC3339Nano))
	}
	for _, h := range t.GetHistory() {
		out += fmt.Sprintf(" | %s %s", h.GetTime().AsTime().Format("15:04:05.000000"), h.GetKind())
	}
	return out
}
