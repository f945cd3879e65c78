package fxsimba

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"go.uber.org/fx"

	"github.com/simba-go/simba/session"
)

// Value group names. Use [SessionOption], [AsSessionOption], [LeaderJob],
// [WhileLeader] and [AsJob] rather than typing them.
const (
	groupOptions = `group:"simba.session.options"`
	groupJobs    = `group:"simba.jobs"`
)

// Module is Simba for fx applications, as a constructor for fx.Provide:
//
//	fx.New(
//		fx.Provide(fxsimba.Module),
//		fx.Provide(newBackend), // your session.Backend: backend-sql, backend-redis, backend-zk
//		fxsimba.LeaderJob("cleanup", time.Hour, cleanup),
//	)
//
// It provides the *session.Session (see [NewSession]: opened on start,
// closed on stop) and the [*Jobs] registry, through which the graph reaches
// each leader job's [JobHandle] (StepDown before a deploy, IsLeader,
// Status). It starts one election per job registered with [LeaderJob],
// [WhileLeader] or [AsJob] on start, after the session is open, and stops
// them, each in handover order, before the session closes.
//
// Like every fx constructor it runs only if something needs what it
// provides: the job options ask for the registry, so an application with
// jobs builds it; one without jobs builds it when a value of the graph
// takes the session. [Wiring] is the same as an fx.Option that always
// builds it.
//
// It needs a session.Backend from the application and uses, if the
// application provides them, a [Config] (else the zero Config, i.e. the
// defaults), a *slog.Logger for the session's events and job errors (else
// slog.Default), and a [LookupEnv] (else os.LookupEnv) through which the
// SIMBA_SESSION_* variables override the Config. It provides nothing else:
// the backend, its driver client and the logger are the application's.
func Module(p ModuleParams) (ModuleResult, error) {
	// Check the jobs before building the session.
	js, err := newJobs(p.Jobs...)
	if err != nil {
		return ModuleResult{}, err
	}
	s, err := NewSession(p.SessionParams)
	if err != nil {
		return ModuleResult{}, err
	}
	// Appended after the session's hook: fx starts the jobs once the session
	// is open and stops them before it closes the session.
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error { return js.start(s, p.Logger) },
		OnStop:  js.Stop,
	})
	return ModuleResult{Session: s, Jobs: js}, nil
}

// ModuleParams is what [Module] takes from the fx graph: the session's
// parameters and the jobs registered with [LeaderJob], [WhileLeader] and
// [AsJob].
type ModuleParams struct {
	fx.In
	SessionParams

	Jobs []Job `group:"simba.jobs"`
}

// ModuleResult is what [Module] provides to the fx graph.
type ModuleResult struct {
	fx.Out

	Session *session.Session
	Jobs    *Jobs
}

// Wiring is [Module] as an fx.Option, for fx.New(fxsimba.Wiring, …): it
// provides the same values and always builds them, even when nothing in
// the graph takes them. Use one or the other, never both (fx refuses two
// constructors of *session.Session).
var Wiring = fx.Module("simba",
	fx.Provide(Module),
	fx.Invoke(func(*Jobs) {}),
)

// SessionParams is what [NewSession] takes from the fx graph.
type SessionParams struct {
	fx.In

	Lifecycle fx.Lifecycle
	// Backend is the application's backend (its driver client is the
	// application's to close).
	Backend session.Backend
	// Config, if provided, is the base configuration; SIMBA_SESSION_*
	// variables override it.
	Config Config `optional:"true"`
	// Logger, if provided, receives the session's events (session.LogEvents).
	Logger *slog.Logger `optional:"true"`
	// LookupEnv, if provided, replaces os.LookupEnv (tests; or a function
	// that finds nothing, to ignore the environment).
	LookupEnv LookupEnv `optional:"true"`
	// Options are added with [SessionOption] or [AsSessionOption]; they are
	// applied after the configuration and the logger.
	Options []session.Option `group:"simba.session.options"`
}

// NewSession builds the session of an fx application: configuration from
// p.Config overridden by the environment and validated (an invalid value
// fails the application's construction, naming the key and the rule), then
// session.New with session.WithDeferredStart: the constructor does no I/O.
//
// The start hook starts the session (subscription, first Open) and waits
// until the first backend session is open, or fails the start when the
// start context ends first (a backend that cannot be reached fails the
// deploy instead of running a node that can never lead). It runs after
// the start hooks of the backend's constructor (fx builds the backend
// first, since the session takes it), so a schema those hooks create
// exists before the first Open. The stop hook closes the session, which
// ends every term with STOPPED and releases every lease at once.
//
// Without fx, do the same by hand: cfg.ApplyEnv, cfg.Deadline, then
// session.Open(ctx, backend, session.WithConfig(d)).
func NewSession(p SessionParams) (*session.Session, error) {
	lookup := p.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	cfg, err := p.Config.ApplyEnv(lookup)
	if err != nil {
		return nil, err
	}
	d, err := cfg.Deadline()
	if err != nil {
		return nil, err
	}
	if p.Backend == nil {
		return nil, fmt.Errorf("%w: the session.Backend provided is nil", ErrInvalidConfig)
	}
	opts := []session.Option{session.WithConfig(d), session.WithDeferredStart()}
	if p.Logger != nil {
		opts = append(opts, session.WithLogger(p.Logger))
	}
	opts = append(opts, p.Options...)
	s, err := session.New(p.Backend, opts...)
	if err != nil {
		return nil, fmt.Errorf("fxsimba: %w", err)
	}
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if err := s.Start(); err != nil {
				_ = s.Close()
				if errors.Is(err, session.ErrClosed) {
					return fmt.Errorf("fxsimba: the session was closed by the app's Stop and cannot open again: build a new app with fx.New to start again: %w", err)
				}
				return fmt.Errorf("fxsimba: start session: %w", err)
			}
			select {
			case <-s.Ready():
				return nil
			case <-ctx.Done():
				// fx runs no stop hook for a hook whose start failed.
				_ = s.Close()
				return fmt.Errorf("fxsimba: no backend session opened before the start deadline: %w", context.Cause(ctx))
			}
		},
		OnStop: func(context.Context) error {
			// Close is bounded by one renewal period (its backend call's timeout).
			return s.Close()
		},
	})
	return s, nil
}

// SessionOption adds opt to the options of the Module's session, for
// example an otelsimba listener:
//
//	fxsimba.SessionOption(inst.Option())
func SessionOption(opt session.Option) fx.Option {
	// A session.Option is itself a function: wrap it, or fx would take it
	// for a constructor.
	return fx.Provide(fx.Annotate(func() session.Option { return opt }, fx.ResultTags(groupOptions)))
}

// AsSessionOption provides the session.Option that constructor returns
// (a function of other values of the graph, as for fx.Provide) to the
// Module's session.
func AsSessionOption(constructor any) fx.Option {
	return fx.Provide(fx.Annotate(constructor, fx.ResultTags(groupOptions)))
}
