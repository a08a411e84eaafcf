package bitlk

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// volumeSum opens an image with a secret and returns the SHA-256 of the
// whole decrypted volume and the GUID of the VMK that opened.
func volumeSum(t *testing.T, path string, secret []byte) (string, string, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Read(f)
	if err != nil {
		f.Close()
		return "", "", err
	}
	key, guid, err := m.VolumeKey(secret)
	if err != nil {
		f.Close()
		return "", guid, err
	}
	st, _ := f.Stat()
	v, err := Open(f, st.Size(), m, key, true)
	if err != nil {
		f.Close()
		return "", guid, err
	}
	defer v.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(v, 0, v.Size())); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), guid, nil
}

// TestFixtureImages: every image of cryptsetup's bitlk-compat-test with a
// SHA256SUM in images.conf decrypts to exactly that hash with its password,
// its recovery password(s), its startup key file or its clear key, and the
// VMK that opens is the one images.conf names. Wrong secrets are refused
// with ErrWrongPassphrase; partially encrypted and encrypt-on-write images
// are refused with ErrUnsupported.
func TestFixtureImages(t *testing.T) {
	dir := bitlkImages(t)
	conf := readImagesConf(t, dir)
	if len(conf) != 21 {
		t.Fatalf("%d images in images.conf, want 21", len(conf))
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for _, name := range sortedNames(conf) {
		c := conf[name]
		type try struct {
			what, secret, vmk string
			file              bool
		}
		var tries []try
		if c["PW"] != "" {
			tries = append(tries, try{"password", c["PW"], c["PW_VMK_GUID"], false})
		}
		if c["RP"] != "" {
			tries = append(tries, try{"recovery password", c["RP"], c["RP_VMK_GUID"], false})
		}
		if c["RP2"] != "" {
			tries = append(tries, try{"second recovery password", c["RP2"], c["RP2_VMK_GUID"], false})
		}
		if g := c["SK_VMK_GUID"]; g != "" {
			tries = append(tries, try{"startup key", strings.ToUpper(g) + ".BEK", g, true})
		}
		if g := c["CLEARKEY_VMK_GUID"]; g != "" {
			tries = append(tries, try{"clear key", "", g, false})
		}
		if len(tries) == 0 {
			t.Errorf("%s: no secret in images.conf", name)
		}
		for _, tr := range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				var secret []byte
				switch {
				case tr.file:
					b, err := os.ReadFile(filepath.Join(dir, tr.secret))
					if err != nil {
						t.Error(err)
						return
					}
					secret = b
				case tr.what != "clear key":
					secret = []byte(tr.secret)
				}
				sum, guid, err := volumeSum(t, filepath.Join(dir, name), secret)
				if guid != "" && guid != tr.vmk {
					t.Errorf("%s: %s opened VMK %s, images.conf says %s", name, tr.what, guid, tr.vmk)
				}
				want := c["SHA256SUM"]
				if want == "" {
					// partially encrypted, eow: refused after unlocking.
					if !errors.Is(err, ErrUnsupported) || guid == "" {
						t.Errorf("%s: %s: got %v (vmk %q), want the key unlocked and ErrUnsupported", name, tr.what, err, guid)
					} else {
						t.Logf("%s: %s unlocks VMK %s; refused: %v", name, tr.what, guid, err)
					}
					return
				}
				if err != nil {
					t.Errorf("%s: %s: %v", name, tr.what, err)
					return
				}
				if sum != want {
					t.Errorf("%s: %s: SHA-256 %s, images.conf says %s", name, tr.what, sum, want)
				} else {
					t.Logf("%s: %s: SHA-256 matches", name, tr.what)
				}
			}()
		}
	}
	wg.Wait()
}
