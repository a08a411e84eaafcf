package capi

import (
	"fmt"
	"time"
)

// SpeedPairResult is a comparison of two transforms by SpeedPair.
type SpeedPairResult struct {
	A, B   SpeedResult // the best round of each side
	Ratios []float64   // a/b of every round, in order
}

// Ratio is the best round of a over the best round of b.
func (r SpeedPairResult) Ratio() float64 {
	if r.B.OpsPerSec() == 0 {
		return 0
	}
	return float64(r.A.OpsPerSec()) / float64(r.B.OpsPerSec())
}

// SpeedPair compares a with b on requests of bs bytes: rounds rounds, each
// timing both sides for d, a first in even rounds and b first in odd ones,
// and keeps each side's best round.
//
// Why: on a shared machine one measurement of each side, taken seconds
// apart, compares two different loads; the fused ESSIV ratio at 16 bytes
// spread from 1.35× to 2.18× that way. Alternating puts both sides under the
// same conditions, and the best round of each is the least disturbed one, so
// the ratio of bests moves far less between runs than single ratios do.
func SpeedPair(a, b *Tfm, bs int, d time.Duration, rounds int, decrypt bool) (SpeedPairResult, error) {
	var r SpeedPairResult
	if rounds < 1 {
		return r, fmt.Errorf("%w: speed pair needs at least one round, got %d", ErrInvalidLength, rounds)
	}
	for _, t := range []*Tfm{a, b} {
		if !t.ValidLength(bs) {
			return r, fmt.Errorf("%w: %s cannot take %d-byte requests", ErrInvalidLength, t.alg.Driver, bs)
		}
	}
	for i := 0; i < rounds; i++ {
		var ra, rb SpeedResult
		var err error
		if i%2 == 0 {
			if ra, err = SpeedOne(a, bs, d, decrypt); err == nil {
				rb, err = SpeedOne(b, bs, d, decrypt)
			}
		} else {
			if rb, err = SpeedOne(b, bs, d, decrypt); err == nil {
				ra, err = SpeedOne(a, bs, d, decrypt)
			}
		}
		if err != nil {
			return r, err
		}
		if ra.OpsPerSec() > r.A.OpsPerSec() {
			r.A = ra
		}
		if rb.OpsPerSec() > r.B.OpsPerSec() {
			r.B = rb
		}
		ratio := 0.0
		if rb.OpsPerSec() > 0 {
			ratio = float64(ra.OpsPerSec()) / float64(rb.OpsPerSec())
		}
		r.Ratios = append(r.Ratios, ratio)
	}
	return r, nil
}
