//go:build race

package group

// RaceOn (tests only): the race detector slows the engine down about
// tenfold, so the real-time tests and the simulations of large groups
// run smaller, or not at all, under it.
const RaceOn = true
