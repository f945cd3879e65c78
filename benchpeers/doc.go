// Command benchpeers measures Simba through its public API side by side
// with the raw primitive pair of each backend and with the peer libraries
// that do the same job on the same server, in one process, so that every
// ratio compares cases of one run under one load (ADR 0270).
//
// Every operation runs on a fresh context.WithTimeout, as a caller on a
// hot path writes it, and each case is measured four ways: interleaved
// p50/p90 (shuffled rounds, one operation per case per round), block
// means (each case alone, blocks in shuffled order: the throughput
// view), the client's CPU and allocations over the blocks, and the
// server's own cost on private servers (Redis INFO commandstats,
// PostgreSQL pg_stat_statements, MariaDB performance_schema, every
// server's process CPU). The same cases run on loopback (the shared
// servers) and at simulated round trips: private servers in a network
// namespace behind a delay proxy, this program run as a process of its
// own with -proxy. Handovers (-methods handover) time A's release to B's
// acquire.
//
// It prints Markdown tables and issue 23's goals, each met or missed with
// the run's numbers; -o writes them to a file (goals first), -summary
// puts the goals table between the markers of docs/bench/_summary.md.
//
// It is its own module so that the peers' dependencies never reach a
// library module; nothing imports it. Run it with `make bench-peers`
// (servers from scripts/services.sh, variables from .services/env; root,
// for the network namespace).
package main
