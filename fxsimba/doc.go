// Package fxsimba will wire Simba into uber-go/fx applications: a module
// that opens the session on start and closes it on stop, configuration from
// simba.session.* keys, and leader-only and partitioned jobs as fx options.
// Not built yet.
package fxsimba
