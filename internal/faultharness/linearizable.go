package faultharness

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// regState is the fenced register: the value and the fence of the last
// accepted write (0: never written).
type regState struct {
	fence int64
	value string
}

type regInput struct {
	write bool
	fence int64
	value string
}

type regOutput struct {
	out   string // write: ok, fenced, unknown; read: ok
	fence int64  // read
	value string // read
}

// FencedRegister is the sequential specification of a fenced resource: a
// write is applied iff its fence is at least the stored one (the first write
// always), a read returns the last applied write. A write whose outcome the
// worker never learned (error, or killed mid-call) may or may not have been
// applied.
var FencedRegister = porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		if !in.write {
			if out.fence == s.fence && out.value == s.value {
				return []any{s}
			}
			return nil
		}
		applies := in.fence >= s.fence
		next := regState{fence: in.fence, value: in.value}
		switch out.out {
		case "ok":
			if applies {
				return []any{next}
			}
		case "fenced":
			if !applies {
				return []any{s}
			}
		case "aborted":
			return []any{s} // its transaction rolled back
		default:
			if applies {
				return []any{s, next}
			}
			return []any{s}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if in.write {
			return fmt.Sprintf("write(%d, %s) -> %s", in.fence, in.value, out.out)
		}
		return fmt.Sprintf("read() -> (%d, %s)", out.fence, out.value)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		return fmt.Sprintf("(%d, %s)", s.fence, s.value)
	},
}

// Operations turns the workers' histories into porcupine operations on one
// resource. Failed reads are dropped (they observed nothing); a write with
// no answer (an error, or the worker was killed) stays open to the end of
// time. ClientId is the history's index.
func Operations(hists [][]Event, res string) []porcupine.Operation {
	var ops []porcupine.Operation
	for i, h := range hists {
		calls := map[int64]Event{}
		answered := map[int64]bool{}
		for _, e := range h {
			switch e.Ev {
			case "call":
				if e.Res == res {
					calls[e.Op] = e
				}
			case "ret":
				c, ok := calls[e.Op]
				if !ok {
					continue
				}
				answered[e.Op] = true
				op := porcupine.Operation{ClientId: i, Call: c.T, Return: e.T}
				if c.Kind == "read" {
					if e.Out != "ok" {
						continue
					}
					op.Input = regInput{}
					op.Output = regOutput{out: "ok", fence: e.Fence, value: e.Value}
				} else {
					op.Input = regInput{write: true, fence: c.Fence, value: c.Value}
					out := e.Out
					if out != "ok" && out != "fenced" && out != "aborted" {
						out = "unknown"
						op.Return = math.MaxInt64
					}
					op.Output = regOutput{out: out}
				}
				ops = append(ops, op)
			}
		}
		for id, c := range calls {
			if !answered[id] && c.Kind == "write" {
				ops = append(ops, porcupine.Operation{
					ClientId: i, Call: c.T, Return: math.MaxInt64,
					Input:  regInput{write: true, fence: c.Fence, value: c.Value},
					Output: regOutput{out: "unknown"},
				})
			}
		}
	}
	return ops
}

// CheckLinearizable checks one resource's operations against FencedRegister
// within timeout. On a violation it writes porcupine's visualization to
// vizPath (if not empty).
func CheckLinearizable(ops []porcupine.Operation, timeout time.Duration, vizPath string) porcupine.CheckResult {
	model := FencedRegister.ToModel()
	res := porcupine.CheckOperationsTimeout(model, ops, timeout)
	if res == porcupine.Illegal && vizPath != "" {
		// Again, verbose: the partial linearizations for the picture.
		_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		_ = porcupine.VisualizePath(model, info, vizPath)
	}
	return res
}
