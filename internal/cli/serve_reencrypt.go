package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/blkcrypt/blkcrypt"
)

// serveHotzone is serve --reencrypt's default hotzone: a step holds the
// range locks of its hotzone, and 256 stripes of 64 KiB cover 16 MiB, so
// the offline default (32 MiB) would pause every request for each step.
const serveHotzone = 4 << 20

// reencryptOptions reads serve --reencrypt and cryptsetup reencrypt's
// flags with it (--cipher, --key-size, --sector-size and --hash are the
// new values, as cryptsetup reencrypt reads them), or returns nil without
// --reencrypt.
func (so *serveOptions) reencryptOptions(dev string) (*blkcrypt.ReencryptOptions, error) {
	if !so.Reencrypt {
		for _, f := range []struct {
			name  string
			given bool
		}{{"resilience", so.Resilience != nil}, {"hotzone-size", so.HotzoneSize != nil}, {"resume-only", so.ResumeOnly}} {
			if f.given {
				return nil, usageErr("--%s is for serve --reencrypt", f.name)
			}
		}
		return nil, nil
	}
	if so.ReadOnly {
		return nil, usageErr("--reencrypt needs the volume read-write (drop --read-only)")
	}
	if t := so.volumeType(context.Background(), so.Partition, dev); t != "luks2" && t != "luks" {
		return nil, usageErr("--reencrypt is for LUKS2 volumes")
	}
	if so.VolumeKeyFile != "" {
		return nil, usageErr("--reencrypt needs the passphrase (both volume keys come from keyslots), not --volume-key-file")
	}
	o := blkcrypt.ReencryptOptions{Cipher: so.Cipher, Resilience: orEmpty(so.Resilience), Hash: so.Hash, ResumeOnly: so.ResumeOnly}
	// datashift is --encrypt's only: never served.
	if err := checkResilience(o.Resilience, o.Hash, false, false); err != nil {
		return nil, err
	}
	var err error
	sizes := reencSizeFlags{KeySize: so.KeySize, SectorSize: so.SectorSize, HotzoneSize: orEmpty(so.HotzoneSize)}
	if o.KeySize, o.SectorSize, o.HotzoneSize, err = sizes.sizes(); err != nil {
		return nil, err
	}
	if o.HotzoneSize == 0 {
		o.HotzoneSize = serveHotzone
	}
	if o.ResumeOnly && (o.Cipher != "" || o.KeySize != 0 || o.SectorSize != 0) {
		return nil, usageErr("--resume-only takes the cipher, key size and sector size from the reencryption in progress")
	}
	// --hash is the checksum hash here, as in cryptsetup reencrypt, not
	// the keyslot's.
	pk, err := so.pbkdfFlags.options("")
	if err != nil {
		return nil, err
	}
	o.Keyslot.PBKDF = pk
	return &o, nil
}

// startServeReencrypt runs the volume's reencryption while it is served,
// as cryptsetup reencrypt does on an active device. It ends with ctx
// (between hotzones, resumable by serve --reencrypt and by cryptsetup),
// or calls fail when a step fails: the server must stop then, since the
// hotzone of that step is unreadable until a reopen recovers it. wait
// returns that failure, after the reencryption has stopped.
func startServeReencrypt(ctx context.Context, env *Env, o *serveOptions, dev string, v *blkcrypt.Volume, fail func()) (wait func() error) {
	done, total, ok := v.Reencrypting()
	if !ok {
		// The open found a reencryption with only its metadata left (all
		// data under the new key) and finished that instead.
		fmt.Fprintf(env.Stderr, "blkcrypt: the reencryption of %s in progress had only its metadata left and is finished; start serve --reencrypt again for a new one\n", dev)
		return func() error { return nil }
	}
	if done > 0 {
		fmt.Fprintf(env.Stderr, "blkcrypt: resuming the reencryption of %s at %d of %d bytes\n", dev, done, total)
	}
	pr := o.progressFlags.start(env, o.Batch, dev, "reencrypted", total-done)
	last := done
	errc := make(chan error, 1)
	go func() {
		err := v.Reencrypt(ctx, func(d, total int64) {
			pr.add(d - last)
			last = d
		})
		switch {
		case err == nil:
			pr.finish()
			fmt.Fprintf(env.Stderr, "blkcrypt: reencryption of %s finished\n", dev)
		case ctx.Err() != nil && (errors.Is(err, ctx.Err()) || errors.Is(err, blkcrypt.ErrClosed)):
			d, t, _ := v.Reencrypting()
			fmt.Fprintf(env.Stderr, "blkcrypt: reencryption stopped at %d of %d bytes; serve --reencrypt (or cryptsetup reencrypt --resume-only) resumes it\n", d, t)
			err = nil
		default:
			fmt.Fprintf(env.Stderr, "blkcrypt: reencryption failed: %v\n", err)
			fail()
		}
		errc <- err
	}()
	return func() error { return <-errc }
}
