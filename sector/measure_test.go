package sector

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestMeasureSectors: a rate in both directions; RequestRate is 0 for a
// request that fails; the AF_ALG report says what it found.
func TestMeasureSectors(t *testing.T) {
	c, err := New("aes-xts-plain64", make([]byte, 64), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Wipe()
	if e, d := MeasureSectors(c, time.Millisecond, false), MeasureSectors(c, time.Millisecond, true); e <= 0 || d <= 0 {
		t.Errorf("rates %v, %v", e, d)
	}
	if r := RequestRate(func() error { return errors.New("no") }, 512, time.Millisecond); r != 0 {
		t.Errorf("failing request: rate %v", r)
	}
	if testing.Short() {
		return
	}
	var b bytes.Buffer
	WriteAFALGReport(&b)
	if !strings.HasPrefix(b.String(), "# engine: AF_ALG ") {
		t.Errorf("report %q", b.String())
	}
}
