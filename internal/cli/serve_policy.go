package cli

import (
	"strconv"
	"time"
)

// maxConnsLimit bounds --max-connections: each connection may hold up to
// 64 MiB of request payload in flight, so the cap is also the server's
// memory bound.
const maxConnsLimit = 1 << 16

// connPolicy reads --max-connections and --idle-timeout. Both are checked
// before the volume is opened, so a typo costs no key derivation.
func (o *serveOptions) connPolicy() (int, time.Duration, error) {
	n := int64(64)
	if o.MaxConnections != nil {
		n = *o.MaxConnections
	}
	if n < 1 || n > maxConnsLimit {
		return 0, 0, usageErr("--max-connections %d is not between 1 and %d", n, maxConnsLimit)
	}
	var idle time.Duration
	if v := o.IdleTimeout; v != "" {
		if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
			idle = time.Duration(secs) * time.Second
		} else if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			idle = d
		} else {
			return 0, 0, usageErr("--idle-timeout %q is not a duration such as 90s or 5m, or a number of seconds", v)
		}
	}
	return int(n), idle, nil
}
