package redissimba

import "context"

// Sweep runs sweep steps until one has looked at the last indexed name
// (at most steps of them) and returns how many records they deleted, for
// tests and the benchmark.
func (b *Backend) Sweep(ctx context.Context, steps int) (int, error) {
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	b.sweepAt = ""
	total := 0
	for i := 0; i < steps; i++ {
		n, err := b.sweep(ctx)
		total += n
		if err != nil || b.sweepAt == "" {
			return total, err
		}
	}
	return total, nil
}
