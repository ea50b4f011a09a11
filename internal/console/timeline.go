package console

import (
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// span is one execution of a step: an attempt or a compensation attempt,
// from its dispatch to its outcome, rebuilt from the task's history.
type span struct {
	Step         string
	Attempt      int32
	Compensation bool
	Agent        string
	Start, End   time.Time
	CompleteBy   time.Time
	Open         bool   // still running: End is now
	Outcome      string // succeeded, failed, expired, canceled, running...
	Detail       string // the outcome event's message
	Actor        string // who decided the outcome
	// Wait: no agent runs it (a wait for a completion from outside, a
	// sleep, a hand-off): its complete-by may be days away and does not
	// stretch the chart.
	Wait bool
}

// marker is a decision drawn on the timeline: a supervisor's or an
// operator's action.
type marker struct {
	Time  time.Time
	Step  string
	Kind  string
	Actor string
	Text  string
}

// timeline rebuilds every execution of t from its history, oldest first.
// Complete-by of a past attempt is its dispatch time plus the timeout the
// task's workflow snapshot gives it (the same rule the scheduler applies).
func timeline(t *reevev1.Task, now time.Time) ([]span, []marker) {
	type key struct {
		step    string
		attempt int32
		comp    bool
	}
	var spans []span
	open := map[key]int{}
	closeSpan := func(k key, at time.Time, outcome, detail, actor string) {
		i, ok := open[k]
		if !ok {
			return
		}
		spans[i].End, spans[i].Outcome, spans[i].Detail, spans[i].Actor, spans[i].Open = at, outcome, detail, actor, false
		delete(open, k)
	}
	closeAll := func(comp bool, at time.Time, outcome, detail, actor string) {
		for k := range open {
			if k.comp == comp {
				closeSpan(k, at, outcome, detail, actor)
			}
		}
	}
	var markers []marker
	for _, e := range t.GetHistory() {
		at := e.GetTime().AsTime()
		kind := e.GetKind()
		comp := strings.HasPrefix(kind, "compensation.")
		k := key{e.GetStep(), e.GetAttempt(), comp}
		switch kind {
		case "step.dispatched", "compensation.dispatched":
			// An execution of the step still open was taken back without
			// an event this code knows: it ended here.
			for o := range open {
				if o.step == k.step && o.comp == comp {
					closeSpan(o, at, "superseded", "", "")
				}
			}
			spec := taskstate.Spec(t, e.GetStep())
			timeout := workflow.EffectiveTimeout(t.GetWorkflow(), spec)
			if comp {
				timeout = workflow.CompensationTimeout(t.GetWorkflow(), spec)
			}
			open[k] = len(spans)
			spans = append(spans, span{Step: e.GetStep(), Attempt: e.GetAttempt(), Compensation: comp,
				Agent: strings.TrimPrefix(e.GetMessage(), "agent "), Start: at, CompleteBy: at.Add(timeout), Open: true, Outcome: "running"})
		case "step.waiting", "step.sleeping":
			for o := range open {
				if o.step == k.step && !o.comp {
					closeSpan(o, at, "superseded", "", "")
				}
			}
			spec := taskstate.Spec(t, e.GetStep())
			label, by := "approval", at.Add(workflow.EffectiveTimeout(t.GetWorkflow(), spec))
			if kind == "step.sleeping" {
				label, by = "sleep", at.Add(spec.GetSleep().AsDuration())
			}
			open[k] = len(spans)
			spans = append(spans, span{Step: e.GetStep(), Attempt: e.GetAttempt(), Agent: label, Start: at, CompleteBy: by, Open: true, Outcome: "waiting", Wait: true})
		case "step.deferred":
			// The agent's execution goes on as a hand-off: the bar ends
			// here and a waiting one starts, to the same complete-by.
			if i, ok := open[k]; ok {
				prev := spans[i]
				closeSpan(k, at, "deferred", e.GetMessage(), e.GetActor())
				open[k] = len(spans)
				spans = append(spans, span{Step: prev.Step, Attempt: prev.Attempt, Agent: "handed off", Start: at, CompleteBy: prev.CompleteBy, Open: true, Outcome: "waiting", Wait: true})
			}
		case "step.succeeded", "compensation.succeeded":
			closeSpan(k, at, "succeeded", e.GetMessage(), e.GetActor())
		case "step.failed", "compensation.failed":
			closeSpan(k, at, "failed", e.GetMessage(), e.GetActor())
		case "step.unacknowledged":
			closeSpan(key{e.GetStep(), e.GetAttempt(), false}, at, "unacknowledged", e.GetMessage(), e.GetActor())
			closeSpan(key{e.GetStep(), e.GetAttempt(), true}, at, "unacknowledged", e.GetMessage(), e.GetActor())
		case "step.expired", "step.heartbeat_missed", "step.agent_forgot":
			// An expired execution may be a compensation's: close either.
			closeSpan(key{e.GetStep(), e.GetAttempt(), false}, at, "expired", e.GetMessage(), e.GetActor())
			closeSpan(key{e.GetStep(), e.GetAttempt(), true}, at, "expired", e.GetMessage(), e.GetActor())
		case "task.canceled":
			closeAll(false, at, "canceled", e.GetMessage(), e.GetActor())
			closeAll(true, at, "canceled", e.GetMessage(), e.GetActor())
		case "task.compensating":
			closeAll(false, at, "canceled", "task compensating", e.GetActor())
		case "task.failed":
			closeAll(false, at, "canceled", "task failed", e.GetActor())
		}
		if isDecision(e) {
			markers = append(markers, marker{Time: at, Step: e.GetStep(), Kind: kind, Actor: e.GetActor(), Text: e.GetMessage()})
		}
	}
	for i := range spans {
		if spans[i].Open {
			spans[i].End = now
			if taskstate.TerminalTask(t.GetState()) && t.GetEndTime() != nil {
				spans[i].End, spans[i].Open, spans[i].Outcome = t.GetEndTime().AsTime(), false, "ended with the task"
			}
		}
	}
	return spans, markers
}

// isDecision reports whether e is a decision a person should see: anything a
// supervisor or an operator did, escalations, expiries.
func isDecision(e *reevev1.HistoryEvent) bool {
	a := e.GetActor()
	if strings.HasPrefix(a, "supervisor") || strings.HasPrefix(a, "operator") {
		return true
	}
	// A completion from outside: a person's approval or rejection (by
	// name), or a callback's (by token).
	if strings.HasPrefix(a, "approver") || strings.HasPrefix(a, "token") {
		return true
	}
	switch e.GetKind() {
	case "step.escalated", "step.expired", "step.schedule_to_start_expired", "step.heartbeat_missed", "step.unacknowledged",
		"step.agent_disconnected", "step.agent_reconnected", "step.agent_forgot", "step.retried_by_operator",
		"task.compensating", "task.failed", "task.canceled":
		return true
	}
	return false
}

// isFailure reports whether e belongs in the "failures only" history view.
func isFailure(e *reevev1.HistoryEvent) bool {
	k := e.GetKind()
	for _, w := range []string{"failed", "expired", "escalated", "canceled", "missed", "compensating", "unacknowledged", "disconnected"} {
		if strings.HasSuffix(k, w) || strings.Contains(k, "."+w) {
			return true
		}
	}
	return false
}

// timelineSVG draws the spans as a Gantt chart: one row per execution,
// a bar from dispatch to outcome, a tick at complete-by, diamonds for
// decisions. Everything that came from users is escaped by html/template's
// rules for text in SVG (fmt with %s of escaped strings).
func timelineSVG(spans []span, markers []marker, t0, t1 time.Time) template.HTML {
	if len(spans) == 0 && len(markers) == 0 {
		return template.HTML(`<p class="muted">No step has been dispatched yet.</p>`)
	}
	for _, s := range spans {
		if s.CompleteBy.After(t1) && s.Open && !s.Wait {
			t1 = s.CompleteBy
		}
	}
	if !t1.After(t0) {
		t1 = t0.Add(time.Second)
	}
	const (
		labelW = 190
		chartW = 640
		rightW = 190 // room for the last bar's label
		rowH   = 26
		top    = 24
	)
	rows := len(spans)
	h := top + rows*rowH + 30
	x := func(at time.Time) float64 {
		return labelW + float64(at.Sub(t0))/float64(t1.Sub(t0))*chartW
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" role="img" aria-label="timeline of step attempts" viewBox="0 0 %d %d" preserveAspectRatio="xMinYMin meet">`, labelW+chartW+rightW, h)
	// Time axis: five ticks.
	for i := 0; i <= 4; i++ {
		at := t0.Add(t1.Sub(t0) * time.Duration(i) / 4)
		xx := x(at)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, xx, top-6, xx, h-24)
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">+%s</text>`, xx, h-8, esc(fmtDur(at.Sub(t0))))
	}
	for i, s := range spans {
		y := top + i*rowH
		label := fmt.Sprintf("%s #%d", s.Step, s.Attempt)
		if s.Compensation {
			label = fmt.Sprintf("↺ %s #%d", s.Step, s.Attempt)
		}
		fmt.Fprintf(&b, `<text class="label" x="4" y="%d">%s</text>`, y+16, esc(label))
		x0, x1 := x(s.Start), x(s.End)
		if x1-x0 < 3 {
			x1 = x0 + 3
		}
		cls := "bar " + s.Outcome
		if s.Compensation {
			cls += " comp"
		}
		who := "on " + s.Agent
		if s.Wait {
			who = "(" + s.Agent + ")"
		}
		title := fmt.Sprintf("%s attempt %d%s %s: %s → %s (%s), complete-by %s; %s %s",
			s.Step, s.Attempt, map[bool]string{true: " (compensation)"}[s.Compensation], who,
			s.Start.UTC().Format("15:04:05.000"), s.End.UTC().Format("15:04:05.000"), fmtDur(s.End.Sub(s.Start)),
			s.CompleteBy.UTC().Format("15:04:05.000"), s.Outcome, s.Detail)
		fmt.Fprintf(&b, `<g class="span"><title>%s</title><rect class="%s" x="%.1f" y="%d" width="%.1f" height="%d" rx="3"/>`, esc(title), esc(cls), x0, y+4, x1-x0, rowH-8)
		if cb := x(s.CompleteBy); cb <= labelW+chartW+1 {
			fmt.Fprintf(&b, `<line class="completeby" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, cb, y+1, cb, y+rowH-1)
		}
		barLabel := s.Agent + " · " + s.Outcome
		if s.Wait {
			barLabel = s.Agent
			if s.Open {
				barLabel += " · by " + s.CompleteBy.UTC().Format("15:04")
			} else {
				barLabel += " · " + s.Outcome
			}
		}
		fmt.Fprintf(&b, `<text class="barlabel" x="%.1f" y="%d">%s</text></g>`, x1+4, y+16, esc(barLabel))
	}
	taskRow := false // task-level decisions (no step) go above the rows
	for _, m := range markers {
		row := -1
		for i, s := range spans {
			if s.Step == m.Step && !s.Start.After(m.Time) {
				row = i
			}
		}
		y := top - 10
		if row >= 0 {
			y = top + row*rowH + rowH/2
		} else if !taskRow {
			taskRow = true
			fmt.Fprintf(&b, `<text class="label" x="4" y="%d">task</text>`, y+4)
		}
		xx := x(m.Time)
		fmt.Fprintf(&b, `<g class="decision"><title>%s</title><path d="M%.1f %d l5 5 l-5 5 l-5 -5 z"/></g>`,
			esc(m.Time.UTC().Format("15:04:05.000")+" "+m.Kind+" by "+m.Actor+": "+m.Text), xx, y-5)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func esc(s string) string { return template.HTMLEscapeString(s) }

// dagSVG draws the workflow's DAG left to right, each step colored by its
// state in t (or plain for a workflow definition).
func dagSVG(w *reevev1.Workflow, states map[string]reevev1.StepState) template.HTML {
	steps := w.GetSteps()
	if len(steps) == 0 {
		return ""
	}
	level := map[string]int{}
	order, err := workflow.TopoOrder(w)
	if err != nil {
		order = nil
		for _, s := range steps {
			order = append(order, s.GetName())
		}
	}
	spec := map[string]*reevev1.StepSpec{}
	for _, s := range steps {
		spec[s.GetName()] = s
	}
	var cols [][]string
	for _, n := range order {
		l := 0
		for _, d := range spec[n].GetDependsOn() {
			if level[d]+1 > l {
				l = level[d] + 1
			}
		}
		level[n] = l
		for len(cols) <= l {
			cols = append(cols, nil)
		}
		cols[l] = append(cols[l], n)
	}
	const (
		nodeW, nodeH = 170, 46
		gapX, gapY   = 60, 18
		pad          = 10
	)
	maxRows := 0
	for _, c := range cols {
		sort.Strings(c)
		maxRows = max(maxRows, len(c))
	}
	pos := map[string][2]int{}
	for ci, c := range cols {
		for ri, n := range c {
			pos[n] = [2]int{pad + ci*(nodeW+gapX), pad + ri*(nodeH+gapY)}
		}
	}
	wd := pad*2 + len(cols)*(nodeW+gapX) - gapX
	ht := pad*2 + maxRows*(nodeH+gapY) - gapY
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="dag" role="img" aria-label="workflow graph" viewBox="0 0 %d %d" width="%d">`, wd, ht, wd)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0 0 L10 5 L0 10 z" class="arrowhead"/></marker></defs>`)
	for _, n := range order {
		for _, d := range spec[n].GetDependsOn() {
			from, to := pos[d], pos[n]
			x1, y1 := from[0]+nodeW, from[1]+nodeH/2
			x2, y2 := to[0], to[1]+nodeH/2
			fmt.Fprintf(&b, `<path class="edge" d="M%d %d C%d %d %d %d %d %d" marker-end="url(#arrow)"/>`, x1, y1, x1+gapX/2, y1, x2-gapX/2, y2, x2, y2)
		}
	}
	for _, n := range order {
		p := pos[n]
		st := "def"
		label := spec[n].GetType()
		if states != nil {
			st = shortEnum(states[n])
			label = st
		}
		fmt.Fprintf(&b, `<g class="node %s"><title>%s</title><rect x="%d" y="%d" width="%d" height="%d" rx="6"/>`, esc(st), esc(n+" ("+spec[n].GetType()+")"), p[0], p[1], nodeW, nodeH)
		fmt.Fprintf(&b, `<text class="name" x="%d" y="%d">%s</text><text class="sub" x="%d" y="%d">%s</text></g>`, p[0]+10, p[1]+19, esc(clip(n, 22)), p[0]+10, p[1]+36, esc(clip(label, 26)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
