package fxsimba

import (
	"fmt"
	"reflect"

	"go.uber.org/fx"
)

// A job's task may be given as the task itself or, like the functions
// given to fx.Provide and fx.Invoke, as a constructor whose parameters fx
// resolves from the graph and which returns the task (and optionally an
// error): func(db *sql.DB, log *slog.Logger) election.Task.

var errorType = reflect.TypeFor[error]()

// taskOrConstructor reports how task gives a task of type want: direct
// (task is one: its value converted), or a constructor (its type, checked).
// what names the job in errors.
func taskOrConstructor(task any, want reflect.Type, what string) (direct reflect.Value, ctor reflect.Value, err error) {
	if task == nil {
		return reflect.Value{}, reflect.Value{}, fmt.Errorf("%w: %s has no task", ErrInvalidJob, what)
	}
	v := reflect.ValueOf(task)
	t := v.Type()
	if t.ConvertibleTo(want) {
		if v.IsNil() {
			return reflect.Value{}, reflect.Value{}, fmt.Errorf("%w: %s has no task", ErrInvalidJob, what)
		}
		return v.Convert(want), reflect.Value{}, nil
	}
	shape := fmt.Errorf("%w: %s: the task must be a %v or a constructor returning one (func(deps…) %v, or (%v, error)), got %T",
		ErrInvalidJob, what, want, want, want, task)
	if t.Kind() != reflect.Func || t.IsVariadic() || v.IsNil() {
		return reflect.Value{}, reflect.Value{}, shape
	}
	switch {
	case t.NumOut() == 1 && t.Out(0).ConvertibleTo(want):
	case t.NumOut() == 2 && t.Out(0).ConvertibleTo(want) && t.Out(1) == errorType:
	default:
		return reflect.Value{}, reflect.Value{}, shape
	}
	return reflect.Value{}, v, nil
}

// construct calls ctor with args and returns its task converted to want,
// or its error; a nil task is an error too.
func construct(ctor reflect.Value, args []reflect.Value, want reflect.Type, what string) (reflect.Value, error) {
	out := ctor.Call(args)
	if len(out) == 2 && !out[1].IsNil() {
		return reflect.Value{}, fmt.Errorf("fxsimba: %s: construct the task: %w", what, out[1].Interface().(error))
	}
	if out[0].IsNil() {
		return reflect.Value{}, fmt.Errorf("%w: %s: the constructor returned a nil task", ErrInvalidJob, what)
	}
	return out[0].Convert(want), nil
}

// withDeps returns a function of type func(lead…, ctor's parameters…)
// (res…, error) for fx: fx resolves every parameter; f receives the lead
// arguments and the constructed task. With a direct task, the function
// takes the lead parameters only.
func withDeps(direct, ctor reflect.Value, want reflect.Type, what string, lead []reflect.Type, res []reflect.Type,
	f func(lead []reflect.Value, task reflect.Value) ([]reflect.Value, error)) any {
	in := append([]reflect.Type(nil), lead...)
	if ctor.IsValid() {
		for i := range ctor.Type().NumIn() {
			in = append(in, ctor.Type().In(i))
		}
	}
	out := append(append([]reflect.Type(nil), res...), errorType)
	ft := reflect.FuncOf(in, out, false)
	return reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		fail := func(err error) []reflect.Value {
			r := make([]reflect.Value, len(out))
			for i, t := range res {
				r[i] = reflect.Zero(t)
			}
			r[len(res)] = reflect.ValueOf(&err).Elem()
			return r
		}
		task := direct
		if ctor.IsValid() {
			var err error
			if task, err = construct(ctor, args[len(lead):], want, what); err != nil {
				return fail(err)
			}
		}
		vals, err := f(args[:len(lead)], task)
		if err != nil {
			return fail(err)
		}
		return append(vals, reflect.Zero(errorType))
	}).Interface()
}

// invokeTask is an fx.Invoke of withDeps with no results.
func invokeTask(direct, ctor reflect.Value, want reflect.Type, what string, lead []reflect.Type,
	f func(lead []reflect.Value, task reflect.Value) error) fx.Option {
	return fx.Invoke(withDeps(direct, ctor, want, what, lead, nil, func(l []reflect.Value, t reflect.Value) ([]reflect.Value, error) {
		return nil, f(l, t)
	}))
}
