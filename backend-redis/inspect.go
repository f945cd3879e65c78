package redissimba

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
)

var _ driver.Inspector = (*Backend)(nil)

// inspectBatch bounds the names one inspect script reads, so that a prefix
// matching many names never blocks the server for long in one script.
const inspectBatch = 500

// encodeOwner checks an owner and encodes it for the session hash; the
// zero Owner as "".
func encodeOwner(o driver.Owner) (string, error) {
	if err := o.Check(); err != nil || o.Identity == "" {
		return "", err
	}
	js, err := json.Marshal(o)
	return string(js), err
}

// Inspect implements [driver.Inspector]: one read-only script per batch of
// names reads each lease and its owner's session, so a holder is listed
// only while its session key lives (its PTTL, on the Redis clock, is
// Remaining). A prefix is looked up in the namespace's name index, a
// sorted set read by ZRANGEBYLEX, never by scanning the server's keyspace
// (docs/adr/0080-inspection.md).
func (b *Backend) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	names := slices.Clone(req.Names)
	for _, n := range names {
		if err := deadline.ValidateName(n); err != nil {
			return nil, fmt.Errorf("redissimba: inspect: %w", err)
		}
	}
	if len(names) == 0 {
		if req.Prefix != "" {
			if err := deadline.ValidateName(req.Prefix); err != nil {
				return nil, fmt.Errorf("redissimba: inspect prefix: %w", err)
			}
		}
		var err error
		if names, err = b.indexed(ctx, req.Prefix); err != nil {
			return nil, fmt.Errorf("redissimba: inspect: %w", err)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var out []driver.Holder
	for batch := range slices.Chunk(names, inspectBatch) {
		hs, err := b.inspect(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("redissimba: inspect: %w", err)
		}
		out = append(out, hs...)
	}
	return out, nil
}

// indexed lists the indexed names starting with prefix, in byte order. A
// name is at most 128 bytes of [A-Za-z0-9._:-], all below 0x7f, so
// [prefix, prefix+"\x7f") holds exactly the names starting with it.
func (b *Backend) indexed(ctx context.Context, prefix string) ([]string, error) {
	lo, hi := "-", "+"
	if prefix != "" {
		lo, hi = "["+prefix, "("+prefix+"\x7f"
	}
	var out []string
	for {
		page, err := b.rdb.ZRangeByLex(ctx, b.keys.names, &redis.ZRangeBy{
			Min: lo, Max: hi, Count: inspectBatch,
		}).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < inspectBatch {
			return out, nil
		}
		lo = "(" + page[len(page)-1]
	}
}

// inspect reads one batch. The script declares every key it reads (ADR
// 0131): the first call learns the owners, the next declares their session
// keys; an owner that changed in between is looked up again, up to
// [acquireTries] calls, then reported as an error.
func (b *Backend) inspect(ctx context.Context, names []string) ([]driver.Holder, error) {
	hints := map[string]driver.ID{}
	for try := 1; ; try++ {
		ks := make([]string, len(names), 2*len(names))
		args := make([]any, 2, 2*len(names)+2)
		args[0], args[1] = b.keys.session, len(names)
		for i, n := range names {
			ks[i] = b.keys.lease + n
			args = append(args, n)
		}
		for _, n := range names {
			owner, ok := hints[n]
			if !ok {
				args = append(args, 0)
				continue
			}
			ks = append(ks, b.keys.session+string(owner))
			args = append(args, len(ks))
		}
		res, err := inspectScript.Run(ctx, b.rdb, ks, args...).Slice()
		if err != nil {
			return nil, err
		}
		out := make([]driver.Holder, 0, len(res))
		unknown := 0
		for _, r := range res {
			if f, ok := r.([]any); ok && len(f) == 3 {
				name, _ := f[0].(string)
				sid, _ := f[2].(string)
				if !validID(driver.ID(sid)) {
					return nil, fmt.Errorf("unexpected holder %q: session %q", name, sid)
				}
				hints[name] = driver.ID(sid)
				unknown++
				continue
			}
			h, err := parseHolder(r)
			if err != nil {
				return nil, err
			}
			out = append(out, h)
		}
		if unknown == 0 {
			return out, nil
		}
		if try == acquireTries {
			return nil, fmt.Errorf("the owners of %d leases kept changing over %d reads", unknown, try)
		}
	}
}

// parseHolder decodes one {name, token, session id, owner JSON, PTTL}.
func parseHolder(r any) (driver.Holder, error) {
	f, ok := r.([]any)
	if !ok || len(f) != 5 {
		return driver.Holder{}, fmt.Errorf("unexpected holder %T %v", r, r)
	}
	name, _ := f[0].(string)
	ts, _ := f[1].(string)
	sid, _ := f[2].(string)
	js, _ := f[3].(string)
	ttl, _ := f[4].(int64)
	tok, err := strconv.ParseUint(ts, 10, 64)
	if err != nil || tok == 0 || !validID(driver.ID(sid)) || ttl <= 0 {
		return driver.Holder{}, fmt.Errorf("unexpected holder %q: token %q, session %q, ttl %d", name, ts, sid, ttl)
	}
	h := driver.Holder{Name: name, Token: tok, Session: driver.ID(sid), Remaining: time.Duration(ttl) * time.Millisecond}
	if js != "" {
		if err := json.Unmarshal([]byte(js), &h.Owner); err != nil {
			return driver.Holder{}, fmt.Errorf("owner of session %s: %w", sid, err)
		}
	}
	return h, nil
}
