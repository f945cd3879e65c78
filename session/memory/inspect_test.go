package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
)

func TestInspectReportsHoldersWithTheirOwner(t *testing.T) {
	ctx := context.Background()
	b, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	owner := driver.Owner{Identity: "node-a/1", Metadata: map[string]string{"addr": "127.0.0.1:9000"}}
	o, err := b.Open(ctx, driver.OpenRequest{LeaseDuration: time.Minute, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, driver.AcquireRequest{ID: o.ID, Names: []string{"jobs.1", "jobs.2", "other"}}); err != nil {
		t.Fatal(err)
	}
	hs, err := b.Inspect(ctx, driver.InspectRequest{Prefix: "jobs."})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Name != "jobs.1" || hs[1].Name != "jobs.2" {
		t.Fatalf("Inspect(prefix jobs.) = %+v, want jobs.1 and jobs.2", hs)
	}
	if hs[0].Session != o.ID || hs[0].Owner.Identity != "node-a/1" || hs[0].Owner.Metadata["addr"] != "127.0.0.1:9000" || hs[0].Token == 0 || hs[0].Remaining <= 0 {
		t.Fatalf("holder = %+v", hs[0])
	}
	hs, err = b.Inspect(ctx, driver.InspectRequest{Names: []string{"other", "free"}})
	if err != nil || len(hs) != 1 || hs[0].Name != "other" {
		t.Fatalf("Inspect(names) = %+v, %v", hs, err)
	}
	if _, err := b.Inspect(ctx, driver.InspectRequest{Names: []string{"bad name"}}); !errors.Is(err, deadline.ErrInvalidName) {
		t.Fatalf("Inspect(bad name) = %v, want ErrInvalidName", err)
	}
	if err := b.Close(ctx, o.ID); err != nil {
		t.Fatal(err)
	}
	if hs, _ := b.Inspect(ctx, driver.InspectRequest{}); len(hs) != 0 {
		t.Fatalf("Inspect after Close = %+v, want none", hs)
	}
}
