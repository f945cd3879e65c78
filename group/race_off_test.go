//go:build !race

package group

// RaceOn (tests only): see race_on_test.go.
const RaceOn = false
