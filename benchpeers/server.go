package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// serverProbe reads a server's own accounting of the work it did: the
// counters are cumulative, so a case's cost is the difference over n
// operations of that case alone, divided by n.
type serverProbe struct {
	cols []string // what each value is, per acquire + release
	// around runs run (n operations of c) and returns the cost per
	// operation of each column.
	around func(ctx context.Context, c pairCase, n int, run func() error) ([]float64, error)
	note   string
}

// serverResult is one case's server cost.
type serverResult struct {
	name    string
	vals    []float64 // per probe column, the mean over every block
	lo      []float64 // per probe column, the lowest block's
	cpu     float64   // the server processes' CPU µs per operation (-1: unknown)
	cpuLo   float64   // the lowest block's
	n       int
	failure error
}

// runServer runs each case alone for n operations (a fresh deadline
// context each) and reads the probe and the server's CPU around it.
func runServer(ctx context.Context, cases []pairCase, probe *serverProbe, pid int, n int) []*serverResult {
	var res []*serverResult
	for _, c := range cases {
		r := &serverResult{name: c.name, n: n, cpu: -1, cpuLo: -1}
		res = append(res, r)
		// Warm: the case's connections, scripts and statements exist.
		for range 20 {
			if err := once(ctx, c); err != nil {
				r.failure = err
				break
			}
		}
		if r.failure != nil {
			continue
		}
		// serverBlocks blocks of m: the mean over all n is the figure;
		// the lowest block's shows what another process's burst added.
		blocks := serverBlocks
		if n < 10*blocks {
			blocks = 1
		}
		m := n / blocks
		var cpuSum float64
		for range blocks {
			var cpu float64 = -1
			inner := func() error {
				var cpu0 time.Duration
				var err error
				if pid != 0 {
					if cpu0, err = procCPU(pid); err != nil {
						return err
					}
				}
				for range m {
					if err := once(ctx, c); err != nil {
						return err
					}
				}
				if pid != 0 {
					cpu1, err := procCPU(pid)
					if err != nil {
						return err
					}
					cpu = float64(cpu1-cpu0) / float64(time.Microsecond) / float64(m)
				}
				return nil
			}
			var vals []float64
			var err error
			if probe == nil {
				err = inner()
			} else {
				vals, err = probe.around(ctx, c, m, inner)
			}
			if err != nil {
				r.failure = err
				break
			}
			if cpu >= 0 {
				cpuSum += cpu
				if r.cpuLo < 0 || cpu < r.cpuLo {
					r.cpuLo = cpu
				}
			}
			if r.vals == nil {
				r.vals = make([]float64, len(vals))
				r.lo = slices.Clone(vals)
			}
			for i, v := range vals {
				r.vals[i] += v / float64(blocks)
				r.lo[i] = min(r.lo[i], v)
			}
		}
		if r.failure == nil && r.cpuLo >= 0 {
			r.cpu = cpuSum / float64(blocks)
		}
	}
	return res
}

// serverBlocks is how many blocks a case's server-cost operations run in.
const serverBlocks = 10

// redisProbe reads INFO commandstats. A command a script calls is
// counted there too, and its time is inside the script's: MONITOR (a few
// operations of the case, before the measured ones) tells which calls of
// each command come from a script ("[0 lua]"), so that the server time
// per operation counts each microsecond once.
func redisProbe(rdb *redis.Client, addr string) *serverProbe {
	return &serverProbe{
		cols: []string{"server time µs (commandstats, each µs once)", "scripts' time µs", "of it: commands the scripts call µs", "commands called"},
		note: "Server time is `INFO commandstats` usec, the commands the client sent (a script's whole run, inner calls included); the scripts' inner commands are told apart by MONITOR over 5 operations before the measured ones. What commandstats does not count (reading the request, writing the reply, the event loop) is in the server CPU column, the redis-server process's own CPU (`/proc/<pid>/task/*/schedstat`).",
		around: func(ctx context.Context, c pairCase, n int, run func() error) ([]float64, error) {
			inner, err := monitorInner(ctx, addr, c)
			if err != nil {
				return nil, fmt.Errorf("MONITOR: %w", err)
			}
			s0, err := commandstats(ctx, rdb)
			if err != nil {
				return nil, err
			}
			if err := run(); err != nil {
				return nil, err
			}
			s1, err := commandstats(ctx, rdb)
			if err != nil {
				return nil, err
			}
			var top, scripts, innerUs, calls float64
			for cmd, v1 := range s1 {
				v0 := s0[cmd]
				du, dc := v1.usec-v0.usec, v1.calls-v0.calls
				if cmd == "info" || dc == 0 {
					continue
				}
				f := inner[cmd] // share of the command's calls made by scripts
				top += du * (1 - f)
				innerUs += du * f
				calls += dc
				if strings.HasPrefix(cmd, "eval") || strings.HasPrefix(cmd, "fcall") {
					scripts += du
				}
			}
			k := float64(n)
			return []float64{top / k, scripts / k, innerUs / k, calls / k}, nil
		},
	}
}

type cmdstat struct{ calls, usec float64 }

func commandstats(ctx context.Context, rdb *redis.Client) (map[string]cmdstat, error) {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return parseCommandstats(s), nil
}

// parseCommandstats reads INFO commandstats' cmdstat_<name>:calls=..,usec=..
// lines.
func parseCommandstats(s string) map[string]cmdstat {
	m := map[string]cmdstat{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		var st cmdstat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st.calls = f
			case "usec":
				st.usec = f
			}
		}
		m[name] = st
	}
	return m
}

// monitorInner runs 5 operations of c under MONITOR and returns, per
// command, the share of its calls that a script made.
func monitorInner(ctx context.Context, addr string, c pairCase) (map[string]float64, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		return nil, fmt.Errorf("MONITOR answered %q: %v", line, err)
	}
	for range 5 {
		if err := once(ctx, c); err != nil {
			return nil, err
		}
	}
	// A marker after the case's commands: everything before it is theirs.
	mark := "benchpeers-monitor-end"
	ec := redis.NewClient(&redis.Options{Addr: addr})
	_, err = ec.Echo(ctx, mark).Result()
	_ = ec.Close()
	if err != nil {
		return nil, err
	}
	lua, all := map[string]float64{}, map[string]float64{}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if strings.Contains(line, mark) {
			break
		}
		cmd, fromLua, ok := parseMonitor(line)
		if !ok {
			continue
		}
		all[cmd]++
		if fromLua {
			lua[cmd]++
		}
	}
	for cmd, n := range all {
		lua[cmd] /= n
	}
	return lua, nil
}

// pgProbe reads pg_stat_statements (top-level statements: a routine's
// call counts once, its inner statements inside its time; the WAL each
// statement wrote). pg_stat_wal's flush counts are not used: a backend
// publishes them at most once a second, or ten seconds after it went
// idle, so they cannot be split between cases run one after the other.
func pgProbe(pool *pgxpool.Pool) *serverProbe {
	snap := func(ctx context.Context) ([4]float64, error) {
		var v [4]float64
		err := pool.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time),0), coalesce(sum(calls),0),
			coalesce(sum(wal_records),0), coalesce(sum(wal_bytes),0)
			FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat%'`).Scan(&v[0], &v[1], &v[2], &v[3])
		return v, err
	}
	return &serverProbe{
		cols: []string{"statements' execution µs (pg_stat_statements)", "statements", "WAL records", "WAL bytes"},
		note: "PostgreSQL: the private server runs `pg_stat_statements` (track = top: a routine's call is one statement, its inner statements inside its time). A commit's WAL flush is outside every statement's execution time and outside the server's CPU (it waits on the disk): it shows in the block means. The shared server on 5432 has the extension installed but not preloaded, and its settings are not ours to change.",
		around: func(ctx context.Context, c pairCase, n int, run func() error) ([]float64, error) {
			s0, err := snap(ctx)
			if err != nil {
				return nil, err
			}
			if err := run(); err != nil {
				return nil, err
			}
			s1, err := snap(ctx)
			if err != nil {
				return nil, err
			}
			k := float64(n)
			return []float64{(s1[0] - s0[0]) * 1e3 / k, (s1[1] - s0[1]) / k, (s1[2] - s0[2]) / k, (s1[3] - s0[3]) / k}, nil
		},
	}
}

// mariadbProbe reads performance_schema's statement time by event name,
// top-level statements only (a procedure's inner statements are
// statement/sp/*, inside the CALL's time), and InnoDB's log flushes.
func mariadbProbe(db *sql.DB) *serverProbe {
	snap := func(ctx context.Context) ([3]float64, error) {
		var v [3]float64
		err := db.QueryRowContext(ctx, `SELECT coalesce(sum(SUM_TIMER_WAIT),0)/1e6, coalesce(sum(COUNT_STAR),0),
			(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_DATA_FSYNCS')
			FROM performance_schema.events_statements_summary_global_by_event_name
			WHERE EVENT_NAME NOT LIKE 'statement/sp/%' AND EVENT_NAME NOT LIKE 'statement/scheduler/%'`).Scan(&v[0], &v[1], &v[2])
		return v, err
	}
	return &serverProbe{
		cols: []string{"statements' time µs (performance_schema)", "statements", "InnoDB fsyncs"},
		note: "MariaDB: the private server runs with `performance_schema=ON` (the shared server on 3306 has it off, and it can be turned on only at start); time of the top-level statements (`events_statements_summary_global_by_event_name`, statement/sql/* and statement/com/*: a CALL's inner statements are statement/sp/*, inside its time), commit included; `Innodb_data_fsyncs` for the flushes (one per commit).",
		around: func(ctx context.Context, c pairCase, n int, run func() error) ([]float64, error) {
			s0, err := snap(ctx)
			if err != nil {
				return nil, err
			}
			if err := run(); err != nil {
				return nil, err
			}
			s1, err := snap(ctx)
			if err != nil {
				return nil, err
			}
			k := float64(n)
			return []float64{(s1[0] - s0[0]) / k, (s1[1] - s0[1] - 1) / k, (s1[2] - s0[2]) / k}, nil
		},
	}
}

// parseMonitor reads one MONITOR line, e.g.
// +1700000000.123456 [0 127.0.0.1:5555] "set" "k" "v" or, for a command a
// script called, +1700000000.123456 [0 lua] "hget" "h" "f".
func parseMonitor(line string) (cmd string, fromLua, ok bool) {
	head, rest, ok := strings.Cut(line, "] \"")
	if !ok {
		return "", false, false
	}
	cmd, _, _ = strings.Cut(rest, "\"")
	return strings.ToLower(cmd), strings.HasSuffix(head, " lua"), true
}
