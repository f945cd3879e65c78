package otelsimba

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/simba-go/simba/group"
)

// Attributes of a partition's term span.
const (
	keyGroup     = attribute.Key("simba.group.name")
	keyPartition = attribute.Key("simba.group.partition")
)

// groupAttributes labels the term of a group's partition with the group
// and partition, so that a member's 1,024 partition terms can be found and
// grouped by attribute. Each term stays a root span of its own trace: a
// rebalance makes one small trace per partition, never one trace of 1,024
// spans.
func groupAttributes(lease string) []attribute.KeyValue {
	g, p, ok := group.ParsePartitionLease(lease)
	if !ok {
		return nil
	}
	return []attribute.KeyValue{keyGroup.String(g), keyPartition.Int(p)}
}
