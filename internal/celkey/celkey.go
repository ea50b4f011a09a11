// Package celkey compiles and evaluates the CEL expressions of a workflow
// that compute a key from a task's input: concurrency keys
// (ConcurrencySpec.key) and fairness keys (Workflow.fairness_key).
//
// An expression is checked once, when its workflow is registered (or an
// inline workflow submitted): it must parse, type-check against the one
// variable `input` (the task's input, any JSON value) and give a string, a
// number or a bool. Errors name the field and the line and column in the
// expression. Each submission evaluates it on the task's input under a
// cost limit, so a hostile expression cannot spin:
//
//	p, err := celkey.Compile("input.customer_id")
//	key, err := p.Key(input) // "c-42"
package celkey

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	// MaxExprBytes bounds an expression's text.
	MaxExprBytes = 1024
	// MaxKeyBytes bounds a key's value: a longer one is refused.
	MaxKeyBytes = 256
	// costLimit bounds one evaluation (CEL's cost units: about one per
	// operation and per element a comprehension visits).
	costLimit = 10_000
	// cacheSize bounds the compiled programs kept by expression.
	cacheSize = 1024
)

// Program is a compiled key expression; safe for concurrent use.
type Program struct {
	prg cel.Program
}

var (
	envOnce sync.Once
	env     *cel.Env
	envErr  error

	cacheMu sync.Mutex
	cache   = map[string]*Program{}
)

func baseEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		env, envErr = cel.NewEnv(cel.Variable("input", cel.DynType))
	})
	return env, envErr
}

// Error is an expression refused by Compile: what is wrong, with the line
// and column (from 1) of the first problem when there is one.
type Error struct {
	Line, Column int
	Msg          string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Compile parses and type-checks expr; an error is an *Error.
func Compile(expr string) (*Program, error) {
	cacheMu.Lock()
	p := cache[expr]
	cacheMu.Unlock()
	if p != nil {
		return p, nil
	}
	if expr == "" {
		return nil, &Error{Msg: "required"}
	}
	if len(expr) > MaxExprBytes {
		return nil, &Error{Msg: fmt.Sprintf("%d bytes, more than the limit of %d", len(expr), MaxExprBytes)}
	}
	e, err := baseEnv()
	if err != nil {
		return nil, fmt.Errorf("celkey: environment: %w", err)
	}
	ast, iss := e.Compile(expr)
	if iss != nil && iss.Err() != nil {
		errs := iss.Errors()
		if len(errs) == 0 {
			return nil, &Error{Msg: iss.Err().Error()}
		}
		first := errs[0]
		loc := first.Location
		return nil, &Error{Line: loc.Line(), Column: loc.Column() + 1, Msg: first.Message}
	}
	switch out := ast.OutputType(); {
	case out.IsExactType(types.StringType), out.IsExactType(types.IntType), out.IsExactType(types.UintType),
		out.IsExactType(types.DoubleType), out.IsExactType(types.BoolType), out.IsExactType(types.DynType):
	default:
		return nil, &Error{Line: 1, Column: 1, Msg: fmt.Sprintf("gives %s; a key must be a string, a number or a bool", out)}
	}
	prg, err := e.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, &Error{Msg: err.Error()}
	}
	p = &Program{prg: prg}
	cacheMu.Lock()
	if len(cache) >= cacheSize {
		clear(cache)
	}
	cache[expr] = p
	cacheMu.Unlock()
	return p, nil
}

// ErrEval means an expression could not be evaluated on an input (a
// missing field, a wrong type, the cost limit) or gave no usable key.
var ErrEval = errors.New("celkey: cannot evaluate the key")

// Key evaluates the expression on a task's input and returns the key: a
// string as is, a number or bool in its usual text form.
func (p *Program) Key(input *structpb.Value) (string, error) {
	var in any
	if input != nil {
		in = input.AsInterface()
	}
	out, _, err := p.prg.Eval(map[string]any{"input": in})
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrEval, err)
	}
	key, err := keyText(out)
	if err != nil {
		return "", err
	}
	if len(key) > MaxKeyBytes {
		return "", fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrEval, len(key), MaxKeyBytes)
	}
	return key, nil
}

func keyText(v ref.Val) (string, error) {
	switch x := v.(type) {
	case types.String:
		return string(x), nil
	case types.Int:
		return strconv.FormatInt(int64(x), 10), nil
	case types.Uint:
		return strconv.FormatUint(uint64(x), 10), nil
	case types.Double:
		return strconv.FormatFloat(float64(x), 'g', -1, 64), nil
	case types.Bool:
		return strconv.FormatBool(bool(x)), nil
	}
	return "", fmt.Errorf("%w: gives a %s; a key must be a string, a number or a bool", ErrEval, v.Type().(ref.Type).TypeName())
}
