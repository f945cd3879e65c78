package redissimba

import (
	"bytes"
	"runtime"
	"strconv"
)

// goid returns the current goroutine's id, parsed from the first line of
// its stack trace ("goroutine 42 [running]:"). Used only to tell whether a
// subscription is being stopped from its own delivery loop, where waiting
// for the loop would be waiting for oneself.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
