package testenv

import (
	"bytes"
	"sync"
)

// Output collects a process's output (or the demo's) for a test to read while it runs. OnWrite,
// when set, sees every write.
type Output struct {
	OnWrite func(string)

	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.OnWrite != nil {
		o.OnWrite(string(p))
	}
	return o.buf.Write(p)
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
