//go:build !linux

package blkcrypt

// Discard is advisory; off Linux there is no portable hole punching, so it
// only validates the request.
func (v *Volume) Discard(off, n int64) error {
	if !v.usable() {
		return ErrClosed
	}
	if v.readOnly {
		return ErrReadOnly
	}
	if err := v.acquire(); err != nil {
		return err
	}
	defer v.release()
	return v.check(int(min(n, v.size)), off)
}
