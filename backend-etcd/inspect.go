package etcdsimba

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxTxnOps is etcd's default --max-txn-ops: the most operations one
// transaction may carry.
const maxTxnOps = 128

// Inspect lists the live holders of the selected leases, sorted by name:
// one range read by prefix (or one transaction of reads per 127 names),
// the epoch read with it, then the owners' session keys and each holder's
// remaining time from the server's TimeToLive (whole seconds: the figure is
// informative only).
func (b *Backend) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	for _, n := range req.Names {
		if err := deadline.ValidateName(n); err != nil {
			return nil, fmt.Errorf("etcdsimba: inspect: %w", err)
		}
	}
	if len(req.Names) == 0 && req.Prefix != "" {
		if err := deadline.ValidateName(req.Prefix); err != nil {
			return nil, fmt.Errorf("etcdsimba: inspect: prefix: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdsimba: inspect: %w", context.Cause(ctx))
	}
	var (
		ekv *mvccpb.KeyValue
		kvs []*mvccpb.KeyValue
	)
	if len(req.Names) == 0 {
		resp, err := b.cli.Txn(ctx).Then(
			clientv3.OpGet(b.k.epoch),
			clientv3.OpGet(b.k.lease+req.Prefix, clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return nil, fmt.Errorf("etcdsimba: inspect: %w", b.wrapCtx(ctx, err))
		}
		ekv = firstKV(resp, 0)
		kvs = resp.Responses[1].GetResponseRange().Kvs
	} else {
		names := slices.Clone(req.Names)
		slices.Sort(names)
		names = slices.Compact(names)
		for start := 0; start < len(names); start += maxTxnOps - 1 {
			chunk := names[start:min(start+maxTxnOps-1, len(names))]
			ops := []clientv3.Op{clientv3.OpGet(b.k.epoch)}
			for _, n := range chunk {
				ops = append(ops, clientv3.OpGet(b.k.lease+n))
			}
			resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				return nil, fmt.Errorf("etcdsimba: inspect: %w", b.wrapCtx(ctx, err))
			}
			e := firstKV(resp, 0)
			if start > 0 && (e == nil) != (ekv == nil) || e != nil && ekv != nil && string(e.Value) != string(ekv.Value) {
				return nil, fmt.Errorf("etcdsimba: inspect: the namespace's epoch changed during the inspection; ask again")
			}
			ekv = e
			for i := range chunk {
				if kv := firstKV(resp, i+1); kv != nil {
					kvs = append(kvs, kv)
				}
			}
		}
	}
	if ekv == nil {
		return nil, nil // no epoch: nothing is held in this namespace
	}
	var rec record
	if json.Unmarshal(ekv.Value, &rec) != nil || !rec.valid() {
		return nil, fmt.Errorf("etcdsimba: inspect: the epoch record of %s is garbled", b.ns)
	}
	ep := &epoch{rec: rec, raw: string(ekv.Value), rev: ekv.ModRevision}
	type held struct {
		name  string
		tok   uint64
		lease clientv3.LeaseID
		id    driver.ID
	}
	var hs []held
	leases := map[clientv3.LeaseID]bool{}
	for _, kv := range kvs {
		name := strings.TrimPrefix(string(kv.Key), b.k.lease)
		if deadline.ValidateName(name) != nil || kv.Lease == 0 || string(kv.Value) != string(formatID(clientv3.LeaseID(kv.Lease))) {
			continue // not a lease key of this backend's making
		}
		tok, err := ep.token(kv.CreateRevision, 1<<32)
		if err != nil {
			continue // from before the epoch: its holder's session ended with the loss
		}
		hs = append(hs, held{name, tok, clientv3.LeaseID(kv.Lease), driver.ID(kv.Value)})
		leases[clientv3.LeaseID(kv.Lease)] = true
	}
	if len(hs) == 0 {
		return nil, nil
	}
	owners, left, err := b.sessionInfo(ctx, leases)
	if err != nil {
		return nil, fmt.Errorf("etcdsimba: inspect: %w", b.wrapCtx(ctx, err))
	}
	out := make([]driver.Holder, 0, len(hs))
	for _, h := range hs {
		r, ok := left[h.lease]
		if !ok {
			continue // its session has expired on the server
		}
		out = append(out, driver.Holder{Name: h.name, Token: h.tok, Session: h.id, Owner: owners[h.lease], Remaining: r})
	}
	slices.SortFunc(out, func(a, b driver.Holder) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// sessionInfo reads the owners and the remaining time of the given etcd
// leases. A lease the server no longer has is left out of left.
func (b *Backend) sessionInfo(ctx context.Context, leases map[clientv3.LeaseID]bool) (map[clientv3.LeaseID]driver.Owner, map[clientv3.LeaseID]time.Duration, error) {
	ids := make([]clientv3.LeaseID, 0, len(leases))
	for l := range leases {
		ids = append(ids, l)
	}
	owners := make(map[clientv3.LeaseID]driver.Owner, len(ids))
	for start := 0; start < len(ids); start += maxTxnOps {
		chunk := ids[start:min(start+maxTxnOps, len(ids))]
		ops := make([]clientv3.Op, len(chunk))
		for i, l := range chunk {
			ops[i] = clientv3.OpGet(b.k.session + string(formatID(l)))
		}
		resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, nil, err
		}
		for i, l := range chunk {
			if kv := firstKV(resp, i); kv != nil {
				var o driver.Owner
				if json.Unmarshal(kv.Value, &o) == nil {
					owners[l] = o
				}
			}
		}
	}
	left := make(map[clientv3.LeaseID]time.Duration, len(ids))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	sem := make(chan struct{}, maxInFlight)
	for _, l := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := b.cli.TimeToLive(ctx, l)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && leaseGone(err):
			case err != nil:
				if firstErr == nil {
					firstErr = err
				}
			case r.TTL >= 0:
				// TTL is the remaining time in whole seconds, rounded down:
				// the lease has TTL to TTL+1 seconds left.
				left[l] = min(time.Duration(r.TTL+1)*time.Second, time.Duration(max(r.GrantedTTL, 1))*time.Second)
			}
		}()
	}
	wg.Wait()
	return owners, left, firstErr
}
