package session

import (
	"sync"
	"testing"
)

// The counter Close waits on must take an Add from zero while a Wait is
// returning: a sync.WaitGroup panics then ("reused before previous Wait
// has returned"), which a Stop racing a Session.Close could trigger once
// pending effects hold the count (issue 20, item 4).
func TestCounterTakesAnAddWhileAWaitReturns(t *testing.T) {
	var c counter
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // another caller's work, coming and going from zero
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.Add(1)
			c.Done()
		}
	}()
	for range 20000 {
		c.Add(1)
		go c.Done()
		c.Wait()
	}
	close(stop)
	wg.Wait()
	c.Wait()
}
