package scheduler

import (
	"context"
	"slices"
	"time"

	"github.com/reeve-org/reeve/internal/workflow"
)

// unservedInterval is how often a scheduler looks for step types queued
// here that no connected agent of their namespace serves.
const unservedInterval = 2 * time.Second

// maxUnservedAgentPages bounds the ListAgents pages (1,000 agents each) read
// per namespace and look.
const maxUnservedAgentPages = 10

// warnUnserved logs at WARN, once per (namespace, step type), that steps
// of a type no agent of the namespace connected to any scheduler serves are
// queued here ("no agent serves T; agents serve ..."): they would otherwise
// wait silently for their schedule-to-start timeout. A type is named again
// after it was served, or its queue emptied, and then is not. It looks every
// unservedInterval and returns when ctx ends.
func (a *agents) warnUnserved(ctx context.Context) {
	t := a.opts.clock.NewTicker(unservedInterval)
	defer t.Stop()
	warned := map[queueKey]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		a.lookForUnserved(ctx, warned)
	}
}

// lookForUnserved logs each type queued here that no agent serves and
// warned does not hold yet, and removes from warned the types now served or
// no longer queued.
func (a *agents) lookForUnserved(ctx context.Context, warned map[queueKey]bool) {
	queued := a.disp.queuedTypes()
	for k := range warned {
		if queued[k] == 0 {
			delete(warned, k)
		}
	}
	byNS := map[string][]string{}
	for k := range queued {
		byNS[k.ns] = append(byNS[k.ns], k.typ)
	}
	for ns, types := range byNS {
		served, ok := a.servedTypes(ctx, ns)
		if !ok {
			continue // etcd did not answer: look again next time
		}
		list := make([]string, 0, len(served))
		for typ := range served {
			list = append(list, typ)
		}
		slices.Sort(list)
		for _, typ := range types {
			k := queueKey{ns: ns, typ: typ}
			switch {
			case served[typ]:
				delete(warned, k)
			case !warned[k]:
				warned[k] = true
				a.log.Warn("queued steps wait for a step type no agent serves", "namespace", ns, "type", typ,
					"queued", queued[k], "detail", workflow.NoAgentServes(typ, list))
			}
		}
	}
}

// servedTypes returns the step types the agents of namespace ns serve:
// those connected to any scheduler (etcd's agent records) and those
// connected here (recorded just after they may be dispatched to). ok is
// false when etcd could not be read.
func (a *agents) servedTypes(ctx context.Context, ns string) (served map[string]bool, ok bool) {
	served = map[string]bool{}
	for _, c := range a.disp.connected() {
		if c.ns == ns {
			for _, typ := range c.types {
				served[typ] = true
			}
		}
	}
	after := ""
	for range maxUnservedAgentPages {
		recs, more, err := a.store.ListAgents(ctx, ns, after, 1000)
		if err != nil {
			a.log.Debug("list agents for unserved types", "namespace", ns, "err", err)
			return nil, false
		}
		for _, r := range recs {
			for _, typ := range r.Record.GetStepTypes() {
				served[typ] = true
			}
		}
		if !more || len(recs) == 0 {
			break
		}
		after = recs[len(recs)-1].Record.GetAgentId()
	}
	return served, true
}

// queuedTypes returns the depth of every non-empty ready queue here.
func (d *dispatcher) queuedTypes() map[queueKey]int {
	d.lock()
	defer d.unlock()
	out := map[queueKey]int{}
	for k, q := range d.queues {
		if q.Len() > 0 {
			out[k] = q.Len()
		}
	}
	return out
}
