// Package integration holds Simba's cross-backend tests against real
// servers, fault injection, the mutual-exclusion checker and benchmarks
// against peer libraries.
package integration
