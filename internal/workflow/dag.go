package workflow

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// TopoOrder returns the step names with every dependency before its
// dependents; among independent steps the workflow's order is kept. It fails
// on a cycle or an unknown dependency.
func TopoOrder(w *reevev1.Workflow) ([]string, error) {
	steps := w.GetSteps()
	index := make(map[string]int, len(steps))
	for i, s := range steps {
		index[s.GetName()] = i
	}
	const (
		unvisited = iota
		visiting
		done
	)
	mark := make([]int, len(steps))
	order := make([]string, 0, len(steps))
	var path []string
	var visit func(i int) error
	visit = func(i int) error {
		switch mark[i] {
		case done:
			return nil
		case visiting:
			start := 0
			for j, n := range path {
				if n == steps[i].GetName() {
					start = j
				}
			}
			cycle := append(append([]string{}, path[start:]...), steps[i].GetName())
			return fmt.Errorf("cycle: %s", strings.Join(cycle, " -> "))
		}
		mark[i] = visiting
		path = append(path, steps[i].GetName())
		for _, dep := range steps[i].GetDependsOn() {
			j, ok := index[dep]
			if !ok {
				return fmt.Errorf("unknown step %q", dep)
			}
			if err := visit(j); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		order = append(order, steps[i].GetName())
		return nil
	}
	for i := range steps {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// Fingerprint is a SHA-256 of the workflow's definition (namespace, version
// and create time left out), to make registering the same definition twice
// idempotent.
func Fingerprint(w *reevev1.Workflow) []byte {
	c := proto.Clone(w).(*reevev1.Workflow)
	c.Namespace, c.Version, c.CreateTime = "", 0, nil
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		panic(err) // a well-formed message always marshals
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// Width returns the largest number of steps of w, among those for which
// include reports true (all steps when include is nil), no two of which
// depend on each other, directly or transitively: the most such steps that
// can be queued or running at the same time. By Dilworth's theorem it is
// the number of steps minus a maximum matching in the bipartite graph of
// "a is a transitive dependency of b". w must be valid (no cycle).
func Width(w *reevev1.Workflow, include func(*reevev1.StepSpec) bool) int {
	steps := w.GetSteps()
	index := make(map[string]int, len(steps))
	for i, s := range steps {
		index[s.GetName()] = i
	}
	order, err := TopoOrder(w)
	if err != nil {
		return len(steps)
	}
	// before[b][a]: a is a transitive dependency of b.
	before := make([][]bool, len(steps))
	for _, name := range order {
		b := index[name]
		before[b] = make([]bool, len(steps))
		for _, dep := range steps[b].GetDependsOn() {
			a := index[dep]
			before[b][a] = true
			for x, ok := range before[a] {
				if ok {
					before[b][x] = true
				}
			}
		}
	}
	var nodes []int
	for i, s := range steps {
		if include == nil || include(s) {
			nodes = append(nodes, i)
		}
	}
	// Kuhn's augmenting paths: match[b] is the step matched before b.
	match := make(map[int]int, len(nodes))
	var try func(a int, seen map[int]bool) bool
	try = func(a int, seen map[int]bool) bool {
		for _, b := range nodes {
			if !before[b][a] || seen[b] {
				continue
			}
			seen[b] = true
			if m, ok := match[b]; !ok || try(m, seen) {
				match[b] = a
				return true
			}
		}
		return false
	}
	matched := 0
	for _, a := range nodes {
		if try(a, map[int]bool{}) {
			matched++
		}
	}
	return len(nodes) - matched
}
