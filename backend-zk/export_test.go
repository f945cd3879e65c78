package zksimba

// InspectCacheLen is the number of lease nodes Inspect keeps (tests only).
func InspectCacheLen(b *Backend) int {
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	return len(b.seen.nodes)
}
