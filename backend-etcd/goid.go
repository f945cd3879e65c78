package etcdsimba

import (
	"bytes"
	"runtime"
	"strconv"
)

// goid is the current goroutine's id, from the first line of its stack
// ("goroutine 42 [running]:"). Used only to tell whether a subscription is
// stopped from inside its own delivery, where waiting for the delivery
// would be waiting for oneself.
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
