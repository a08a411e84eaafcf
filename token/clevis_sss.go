package token

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/blkcrypt/blkcrypt"
	jose "github.com/go-jose/go-jose/v4"
)

// The sss pin (clevis's src/pins/sss): Shamir's secret sharing over the
// prime field of "p". The JWE's content key is the polynomial's constant
// term; each share is a point x||y (each as long as p) encrypted with a
// child pin into one of the compact JWEs of "jwe"; any "t" of them
// recover the key by Lagrange interpolation at zero.
//
// math/big is not constant time and its buffers cannot be wiped; the
// shares are short-lived and the pin's security rests on its children.

type sssHeader struct {
	T   int64    `json:"t"`
	P   string   `json:"p"`
	JWE []string `json:"jwe"`
}

// shareResult is one child's outcome.
type shareResult struct {
	i   int
	pt  []byte
	err error
}

// prepareSSS checks an sss JWE's header offline: the field's prime (as
// its bytes' length, the shares' half length) and the threshold.
func prepareSSS(h *clevisHeader) (s *sssHeader, p *big.Int, pl int, err error) {
	s = h.Clevis.SSS
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: sss pin: "+format, append([]any{ErrBadToken}, a...)...)
	}
	if s == nil {
		return nil, nil, 0, bad("header clevis.sss missing")
	}
	if h.Alg != string(jose.DIRECT) {
		return nil, nil, 0, fmt.Errorf("%w: sss pin: key algorithm %q (clevis writes dir)", ErrUnsupported, h.Alg)
	}
	if len(s.JWE) == 0 || len(s.JWE) > maxShares {
		return nil, nil, 0, bad("%d shares (1 to %d are allowed)", len(s.JWE), maxShares)
	}
	if s.T < 1 || s.T > int64(len(s.JWE)) {
		return nil, nil, 0, bad("threshold %d of %d shares", s.T, len(s.JWE))
	}
	pb, err := base64.RawURLEncoding.DecodeString(s.P)
	if err != nil || len(pb) == 0 || len(pb) > 512 {
		return nil, nil, 0, bad("p is not a base64url number of at most 4096 bits")
	}
	p = new(big.Int).SetBytes(pb)
	if p.Cmp(big.NewInt(2)) < 0 {
		return nil, nil, 0, bad("p is not a prime")
	}
	return s, p, len(pb), nil
}

func (o ClevisOptions) decryptSSS(ctx context.Context, jwe string, h *clevisHeader, depth int) ([]byte, error) {
	s, p, pl, err := prepareSSS(h)
	if err != nil {
		return nil, err
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: sss pin: "+format, append([]any{ErrBadToken}, a...)...)
	}
	t := int(s.T)

	// The children run at once (as clevis's sss does), each bounded by
	// the context; once t have answered the others are cancelled.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan shareResult, len(s.JWE))
	for i, child := range s.JWE {
		go func() {
			pt, err := o.decrypt(cctx, child, depth+1)
			if err == nil && len(pt) != 2*pl {
				wipe(pt)
				pt, err = nil, fmt.Errorf("%w: the share is %d bytes, not %d", ErrBadToken, len(pt), 2*pl)
			}
			results <- shareResult{i, pt, err}
		}()
	}
	var shares [][]byte
	defer func() {
		for _, sh := range shares {
			wipe(sh)
		}
	}()
	failed := make([]error, len(s.JWE))
	nfail := 0
	for range s.JWE {
		r := <-results
		if r.err != nil {
			failed[r.i] = fmt.Errorf("share %d: %w", r.i+1, r.err)
			nfail++
		} else if len(shares) < t {
			shares = append(shares, r.pt)
		} else {
			wipe(r.pt)
		}
		if len(shares) >= t {
			cancel()
			break
		}
		if len(s.JWE)-nfail < t {
			break // the threshold can no longer be met
		}
	}
	// The children still running end with the cancelled context; their
	// results are dropped into the buffered channel.
	cancel()
	if len(shares) < t {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sss pin: %w", err)
		}
		var why []error
		for _, f := range failed {
			if f != nil {
				why = append(why, f)
			}
		}
		return nil, fmt.Errorf("sss pin: %w: %d of %d shares needed, %d failed (%w)", ErrThreshold, t, len(s.JWE), nfail, joined(why))
	}
	key, err := sssRecover(p, pl, shares)
	if err != nil {
		return nil, bad("%v", err)
	}
	defer wipe(key)
	return openJWE(jwe, jose.DIRECT, key)
}

// sssRecover interpolates the shares' polynomial at zero, modulo p, and
// returns the key as pl bytes.
func sssRecover(p *big.Int, pl int, shares [][]byte) ([]byte, error) {
	xs := make([]*big.Int, len(shares))
	ys := make([]*big.Int, len(shares))
	for i, sh := range shares {
		xs[i] = new(big.Int).SetBytes(sh[:pl])
		ys[i] = new(big.Int).SetBytes(sh[pl:])
		if xs[i].Cmp(p) >= 0 || ys[i].Cmp(p) >= 0 {
			return nil, fmt.Errorf("share %d lies outside the field", i+1)
		}
	}
	k := new(big.Int)
	for i := range shares {
		acc := big.NewInt(1)
		for j := range shares {
			if i == j {
				continue
			}
			// acc *= (0 - x_j) / (x_i - x_j)
			num := new(big.Int).Sub(p, xs[j])
			den := new(big.Int).Sub(xs[i], xs[j])
			den.Mod(den, p)
			if den.ModInverse(den, p) == nil {
				return nil, fmt.Errorf("shares %d and %d have the same x (or p is not a prime)", i+1, j+1)
			}
			acc.Mul(acc, num).Mod(acc, p)
			acc.Mul(acc, den).Mod(acc, p)
		}
		acc.Mul(acc, ys[i]).Mod(acc, p)
		k.Add(k, acc).Mod(k, p)
	}
	return k.FillBytes(make([]byte, pl)), nil
}

// sssConfig is clevis encrypt sss's configuration: the threshold and the
// pins, each with one configuration or a list of them.
type sssConfig struct {
	T    *int64          `json:"t"`
	Pins json.RawMessage `json:"pins"`
}

// encryptSSS is clevis encrypt sss: a random polynomial of degree t−1
// over a random 256-bit prime field; its constant term is the A256GCM
// content key, and one point per child pin configuration is encrypted
// with that pin.
func (o ClevisOptions) encryptSSS(ctx context.Context, raw map[string]json.RawMessage, plaintext []byte, depth int) (string, error) {
	inval := func(format string, a ...any) error {
		return fmt.Errorf("%w: sss: "+format, append([]any{blkcrypt.ErrInvalidOptions}, a...)...)
	}
	js, _ := json.Marshal(raw)
	var c sssConfig
	if err := json.Unmarshal(js, &c); err != nil {
		return "", inval("configuration: %v", oneLine(err))
	}
	if len(c.Pins) == 0 {
		return "", inval("the configuration needs \"pins\"")
	}
	children, err := orderedPins(c.Pins)
	if err != nil {
		return "", inval("pins: %v", err)
	}
	t := int64(1)
	if c.T != nil {
		t = *c.T
	}
	if t < 1 || t > int64(len(children)) {
		return "", inval("threshold %d with %d pins (1 <= t <= pins)", t, len(children))
	}
	if len(children) > maxShares {
		return "", inval("%d pins (at most %d)", len(children), maxShares)
	}
	const pl = 32
	p, err := rand.Prime(rand.Reader, 8*pl)
	if err != nil {
		return "", err
	}
	coef := make([]*big.Int, t)
	for i := range coef {
		if coef[i], err = rand.Int(rand.Reader, p); err != nil {
			return "", err
		}
	}
	key := coef[0].FillBytes(make([]byte, pl))
	defer wipe(key)
	var jwes []string
	for _, ch := range children {
		// x in [1, p): a share at zero would be the key itself.
		x, err := rand.Int(rand.Reader, new(big.Int).Sub(p, big.NewInt(1)))
		if err != nil {
			return "", err
		}
		x.Add(x, big.NewInt(1))
		y := new(big.Int)
		xi := big.NewInt(1)
		for _, e := range coef {
			y.Add(y, new(big.Int).Mul(e, xi)).Mod(y, p)
			xi.Mul(xi, x).Mod(xi, p)
		}
		pt := append(x.FillBytes(make([]byte, pl)), y.FillBytes(make([]byte, pl))...)
		jwe, err := o.encrypt(ctx, ch.pin, ch.cfg, pt, depth+1)
		wipe(pt)
		if err != nil {
			return "", fmt.Errorf("sss: pin %s: %w", ch.pin, err)
		}
		jwes = append(jwes, jwe)
	}
	hdr := map[string]any{"pin": "sss", "sss": map[string]any{
		"t": t, "p": base64.RawURLEncoding.EncodeToString(p.FillBytes(make([]byte, pl))), "jwe": jwes,
	}}
	return sealJWE(key, plaintext, hdr)
}

type pinConfig struct {
	pin string
	cfg []byte
}

// orderedPins lists {"tang":[{…},{…}],"tpm2":{…}} in document order, one
// entry per configuration.
func orderedPins(raw json.RawMessage) ([]pinConfig, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []pinConfig
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		v = bytes.TrimSpace(v)
		switch {
		case len(v) > 0 && v[0] == '{':
			out = append(out, pinConfig{name, v})
		case len(v) > 0 && v[0] == '[':
			var list []json.RawMessage
			if err := json.Unmarshal(v, &list); err != nil {
				return nil, err
			}
			for _, e := range list {
				out = append(out, pinConfig{name, e})
			}
		default:
			return nil, fmt.Errorf("pin %q: want a configuration object or an array of them", name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no pins")
	}
	return out, nil
}
