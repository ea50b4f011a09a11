package workflow

import (
	"fmt"
	"slices"
	"strings"
)

// Closest returns the candidate nearest to name by edit distance (a typo:
// at most a third of name's length, at least 1, at most 3 edits), and false
// when none is that near or name is itself a candidate. Ties go to the
// first candidate.
func Closest(name string, candidates []string) (string, bool) {
	limit := min(max(len([]rune(name))/3, 1), 3)
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if c == name {
			return "", false
		}
		if d := editDistance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best, best != ""
}

// DidYouMean is `; did you mean "x"?` for the candidate Closest finds, or
// "" when there is none.
func DidYouMean(name string, candidates []string) string {
	if c, ok := Closest(name, candidates); ok {
		return fmt.Sprintf("; did you mean %q?", c)
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// FilePath is the path of a field of a workflow as a workflow file (and
// protojson) spells it: the fields inside the workflow in their JSON names,
// "workflow.steps[2].depends_on[0]" → "workflow.steps[2].dependsOn[0]". The
// first segment (the request's field: workflow, inline_workflow) stays as
// it is; a path not in a workflow is returned unchanged.
func FilePath(field string) string {
	first, rest, ok := strings.Cut(field, ".")
	if !ok || first != "workflow" && first != "inline_workflow" {
		return field
	}
	parts := strings.Split(rest, ".")
	for i, p := range parts {
		parts[i] = JSONName(p)
	}
	return first + "." + strings.Join(parts, ".")
}

// JSONName turns a proto field name (with an index or key after it) into
// its JSON name: "depends_on[0]" → "dependsOn[0]"; a JSON name stays as it
// is.
func JSONName(s string) string {
	name, suffix := s, ""
	if i := strings.IndexByte(s, '['); i >= 0 {
		name, suffix = s[:i], s[i:]
	}
	var b strings.Builder
	up := false
	for _, r := range name {
		switch {
		case r == '_':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String() + suffix
}

// maxServedListed bounds the step types NoAgentServes lists.
const maxServedListed = 5

// NoAgentServes says that no connected agent of a namespace serves step
// type typ, and what they serve instead (served: every type the namespace's
// agents registered): the nearest type when typ looks like a typo of one
// ("no agent serves onboard.create_billing_customer; agents serve
// onboard.create_billing_customr"), else the served types (at most 5, then
// how many more), or that no agent is connected.
func NoAgentServes(typ string, served []string) string {
	msg := "no agent serves " + typ + "; "
	if c, ok := Closest(typ, served); ok {
		return msg + "agents serve " + c
	}
	if len(served) == 0 {
		return msg + "no agent of its namespace is connected"
	}
	list := slices.Sorted(slices.Values(served))
	list = slices.Compact(list)
	if len(list) > maxServedListed {
		return msg + fmt.Sprintf("agents serve %s and %d more", strings.Join(list[:maxServedListed], ", "), len(list)-maxServedListed)
	}
	return msg + "agents serve " + strings.Join(list, ", ")
}
