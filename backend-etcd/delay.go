package etcdsimba

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/simba-go/simba/session/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lock-delay (docs/adr/0256-etcd-lock-delay.md). A term granted with a
// delay d > 0 puts, in its granting transaction, the marker key
// <ns>/@simba/d/<name> (no etcd lease) holding d. A release deletes the
// lease key and the marker in one transaction, and Close releases the
// session's marked names before revoking its etcd lease, so neither
// leaves a delay. A term that ends otherwise (its etcd lease expired or
// revoked by someone else, its key deleted by an operator) leaves the
// marker without the lease key: the first candidate to find that state
// replaces the marker, in one transaction conditioned on both, by the
// lease key itself put on a new etcd lease of TTL d (delayValue as its
// value). The name then reads as held to every candidate, old versions
// included, until the server's lease clock deletes the key, and the
// namespace watch tells every waiter of the delete. Nothing of the name
// is left after that.

// delayValue is the value of a lease key that holds a name through its
// lock-delay: never a session id (16 hex digits), so Inspect, the watch's
// owned-set bookkeeping and the release path never take it for a holder.
const delayValue = "@lock-delay"

// marker is the marker key's value.
type marker struct {
	DelayMS int64     `json:"delay_ms"`
	Session driver.ID `json:"session"`
}

// markerValue records d in whole milliseconds, rounded up: a marker never
// records less than the belief it guards (a session's grant may have a
// fraction of a millisecond).
func markerValue(d time.Duration, id driver.ID) string {
	v, _ := json.Marshal(marker{DelayMS: int64((d + time.Millisecond - 1) / time.Millisecond), Session: id})
	return string(v)
}

// markerDelay is the delay a marker records. A garbled one counts as the
// backend's maximum lock-delay, raised to MaxLease (the longest a revoke
// guard's marker of any process of the namespace records, whatever this
// one's guard): a name is never freed early on a value this backend
// cannot read.
func (b *Backend) markerDelay(kv *mvccpb.KeyValue) time.Duration {
	var m marker
	if json.Unmarshal(kv.Value, &m) != nil || m.DelayMS <= 0 || m.DelayMS > MaxMaxLockDelay.Milliseconds() {
		return max(b.cfg.maxLockDelay, b.cfg.maxLease)
	}
	return time.Duration(m.DelayMS) * time.Millisecond
}

// checkLockDelay refuses a request's lock-delay the backend does not
// honour: the whole request, before anything is written.
func (b *Backend) checkLockDelay(d time.Duration) error {
	if d < 0 || d > b.cfg.maxLockDelay {
		return fmt.Errorf("%w: lock-delay %v is not within [0, %v] (etcdsimba.WithMaxLockDelay)", driver.ErrLockDelay, d, b.cfg.maxLockDelay)
	}
	return nil
}

// delayTTL is the TTL, in seconds, of the etcd lease that carries a delay
// of d: whole seconds, rounded up (the server raises it to its minimum TTL
// if that is longer, which only lengthens the delay).
func delayTTL(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// startDelay turns the marker mkv of name, found without its lease key,
// into the name's lease key on a new etcd lease of the marker's delay. The
// lease is granted before the transaction, after the candidate found the
// term ended, so the delay runs from at least the term's real end on the
// server's clock. When the transaction's conditions fail (someone else
// started the delay, or took the name, or the epoch changed), the new lease
// is revoked; when its outcome is unknown, the lease is left to its TTL.
func (b *Backend) startDelay(ctx context.Context, s *esession, name string, mkv *mvccpb.KeyValue) error {
	key, mkey := b.k.lease+name, b.k.delay+name
	gr, err := b.cli.Grant(ctx, delayTTL(b.markerDelay(mkv)))
	if err != nil {
		return fmt.Errorf("grant the lock-delay's lease of %q: %w", name, err)
	}
	floor := b.floor()
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(b.k.epoch), "=", s.ep.raw),
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			clientv3.Compare(clientv3.ModRevision(mkey), "=", mkv.ModRevision)).
		Then(clientv3.OpDelete(mkey), clientv3.OpPut(key, delayValue, clientv3.WithLease(gr.ID))).
		Commit()
	if err != nil {
		// The outcome is unknown (a lost reply): the delay key may stand
		// on the new lease, and revoking it would end the delay at once.
		// Left alone, the lease ends at its TTL, the delay, either way.
		return err
	}
	if !resp.Succeeded {
		b.observe(floor, resp.Header.Revision)
		b.revokeAsync(gr.ID)
		return nil
	}
	b.observeWrite(floor, resp.Header.Revision)
	b.cfg.logger.Debug("etcdsimba: lock-delay started", "name", name, "ttl", gr.TTL)
	return nil
}

// sweepBatch bounds the markers one sweep looks at.
const sweepBatch = 16

// sweepMarkers is the bounded sweep an Open runs in the background on
// its new session s: it reads up to sweepBatch markers from a random
// point of the marker range and starts the delay of each whose lease key
// is gone (a term that ended without a release on a name nobody asked
// for since), so that such markers go away with their delay instead of
// staying until a candidate asks. Best effort: errors are dropped.
func (b *Backend) sweepMarkers(s *esession) {
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		from := b.k.delay + sweepStart()
		resp, err := b.cli.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(b.k.delay)), clientv3.WithLimit(sweepBatch))
		if err != nil || len(resp.Kvs) == 0 {
			return
		}
		ops := make([]clientv3.Op, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			ops[i] = clientv3.OpGet(b.k.lease+strings.TrimPrefix(string(kv.Key), b.k.delay), clientv3.WithCountOnly())
		}
		leases, err := b.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return
		}
		for i, kv := range resp.Kvs {
			if r := leases.Responses[i].GetResponseRange(); r == nil || r.Count != 0 {
				continue // held: its term's marker
			}
			name := strings.TrimPrefix(string(kv.Key), b.k.delay)
			if kv.CreateRevision <= s.ep.rev {
				_, _ = b.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
					Then(clientv3.OpDelete(string(kv.Key))).Commit()
				continue
			}
			_ = b.startDelay(ctx, s, name, kv)
		}
	}()
}

// sweepStart is a random first byte of a lease name, where a sweep starts
// reading markers: successive sweeps cover the range without a cursor.
func sweepStart() string {
	const alphabet = "-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var r [1]byte
	_, _ = rand.Read(r[:])
	return alphabet[int(r[0])%len(alphabet) : int(r[0])%len(alphabet)+1]
}
