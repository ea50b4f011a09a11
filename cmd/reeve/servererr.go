package main

import (
	"os"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/internal/workflow"
)

// fileRefusal turns the scheduler's INVALID_ARGUMENT about a field of the
// workflow read from the file path, sent as the request's field (workflow,
// inline_workflow), into the file's mistake: a *fileError at the field's
// line, spelled as the file spells it (steps[2].dependsOn[0]), exit 2 like
// the CLI's own checks of the file. Any other error is returned unchanged.
func fileRefusal(err error, path, field string) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return err
	}
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok || len(br.GetFieldViolations()) == 0 {
			continue
		}
		v := br.GetFieldViolations()[0]
		rest, ok := strings.CutPrefix(workflow.FilePath(v.GetField()), field)
		if !ok || rest != "" && rest[0] != '.' {
			return err
		}
		fe := &fileError{path: path, field: strings.TrimPrefix(rest, "."), msg: v.GetDescription()}
		if b, rerr := os.ReadFile(path); rerr == nil {
			fe.line = lineOf(b, parseFieldPath(fe.field))
		}
		return usageError{fe}
	}
	return err
}

// parseFieldPath splits a field path (steps[2].dependsOn[0],
// steps[0].config["k"]) into keys and indexes, as lineOf takes them.
func parseFieldPath(p string) []any {
	var at []any
	for p != "" {
		switch {
		case p[0] == '.':
			p = p[1:]
		case strings.HasPrefix(p, `["`): // a map key, quoted
			q, err := strconv.QuotedPrefix(p[1:])
			if err != nil || !strings.HasPrefix(p[1+len(q):], "]") {
				return at
			}
			k, _ := strconv.Unquote(q)
			at = append(at, k)
			p = p[len(q)+2:]
		case p[0] == '[':
			end := strings.IndexByte(p, ']')
			i, err := strconv.Atoi(p[1:max(end, 1)])
			if end < 0 || err != nil {
				return at
			}
			at = append(at, i)
			p = p[end+1:]
		default:
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			at = append(at, p[:end])
			p = p[end:]
		}
	}
	return at
}
