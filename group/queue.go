package group

import (
	"github.com/simba-go/simba/internal/layer"
	"github.com/simba-go/simba/internal/serial"

	"github.com/simba-go/simba/election"
)

// newQueue returns the serial queue of a member's callbacks (package
// internal/serial, shared with election): one at a time, in order, over
// exec, with no engine lock held, holding the session (Close waits for a
// callback queued or running). A refused OnAssigned is skipped and its
// refusal handled instead; a refused OnRevoked runs in its place. After
// Close, pushes are dropped: nothing is delivered once Leave has
// completed.
func newQueue(eng layer.Engine, exec election.Executor) *serial.Queue {
	_, direct := exec.(election.Direct)
	return serial.New(serial.Config{Engine: eng, Executor: exec, Direct: direct, ErrRefused: election.ErrRefused})
}
