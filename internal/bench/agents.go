package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/internal/dial"
)

// startAgents runs no-op agents that record how long after its dispatch
// each step reached them. Each agent is given every scheduler of sched and
// starts at a random one (see agentsdk), so that they spread over them.
func startAgents(cfg Config, sched dial.Config, dispatch *samples, errs *agentErrors) (stop func(), err error) {
	addrs, err := dial.Addresses(sched.Address)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := sched.TLSConfig()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range cfg.Agents {
		opts := []agentsdk.Option{agentsdk.WithAgentID(fmt.Sprintf("bench-%d", i)),
			agentsdk.WithMaxConcurrentSteps(cfg.AgentConcurrency), agentsdk.WithLogger(cfg.Log)}
		if tlsCfg != nil {
			opts = append(opts, agentsdk.WithTLS(tlsCfg))
		}
		if sched.Token != "" {
			opts = append(opts, agentsdk.WithToken(sched.Token))
		}
		a, err := agentsdk.New(addrs, opts...)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		a.Handle("bench.noop", func(ctx context.Context, s *agentsdk.Step) (any, error) {
			if dl, ok := ctx.Deadline(); ok {
				// complete-by = dispatch time + the step's one-minute timeout.
				dispatch.add(time.Since(dl.Add(-time.Minute)))
			}
			if cfg.Work > 0 {
				time.Sleep(cfg.Work)
			}
			return nil, nil
		})
		wg.Go(func() {
			if err := a.Run(ctx); err != nil && ctx.Err() == nil {
				errs.add(fmt.Errorf("agent bench-%d stopped: %w", i, err))
			}
		})
	}
	return func() { cancel(); wg.Wait() }, nil
}

// agentErrors collects the errors agents stopped with.
type agentErrors struct {
	mu    sync.Mutex
	n     int
	first error
}

func (e *agentErrors) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if e.first == nil {
		e.first = err
	}
}

func (e *agentErrors) report() (int, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first == nil {
		return e.n, ""
	}
	return e.n, e.first.Error()
}
