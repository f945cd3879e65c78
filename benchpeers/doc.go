// Command benchpeers measures Simba through its public API side by side
// with the raw primitive pair of each backend and with the peer libraries
// that do the same job on the same server, in one process, cases
// interleaved in shuffled rounds so that every case runs under the same
// load. It prints Markdown tables: acquire + release latency (p50, p90,
// ratio to the raw pair), client CPU and allocations per operation, and
// handover latency (B blocked long before A releases, and B queued only
// 5 ms before).
//
// It is its own module so that the peers' dependencies never reach a
// library module; nothing imports it. Run it with `make bench-peers`
// (servers from scripts/services.sh, variables from .services/env).
package main
