// Package testmgr holds the known-answer vectors that every capi driver must
// pass before it is used, in the spirit of the kernel's crypto/testmgr.c.
//
// The vectors are copies of ../shared/vectors (kernel testmgr.h, cryptsetup's
// crypto-vectors.c and IEEE P1619), embedded so that self-tests run in every
// binary, not only under go test. Names are kernel crypto API names.
package testmgr

import (
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

//go:embed testdata/*.json
var files embed.FS

// Cipher is one skcipher known answer: Ciphertext = Encrypt(Key, IV, Plaintext).
type Cipher struct {
	ID         string
	Key        []byte
	IV         []byte
	Plaintext  []byte
	Ciphertext []byte
}

// AEAD is one authenticated-encryption known answer:
// Ciphertext || Tag = Seal(Key, IV, Assoc, Plaintext).
type AEAD struct {
	ID         string
	Key        []byte
	IV         []byte
	Assoc      []byte
	Plaintext  []byte
	Ciphertext []byte
	Tag        []byte
}

// Hash is one digest known answer.
type Hash struct {
	ID     string
	Input  []byte
	Digest []byte
}

// Source names a vector file, for messages.
type Source struct {
	File string
}

var (
	once    sync.Once
	ciphers map[string][]Cipher
	hashes  map[string][]Hash
	aeads   map[string][]AEAD
	loadErr error
)

type rawVec struct {
	ID            string `json:"id"`
	Algorithm     string `json:"algorithm"`
	Cipher        string `json:"cipher"`
	Mode          string `json:"mode"`
	Key           string `json:"key"`
	KeyHex        string `json:"key_hex"`
	IV            string `json:"iv"`
	IVHex         string `json:"iv_hex"`
	Tweak         string `json:"tweak"`
	Plaintext     string `json:"plaintext"`
	PlaintextHex  string `json:"plaintext_hex"`
	Ciphertext    string `json:"ciphertext"`
	CiphertextHex string `json:"ciphertext_hex"`
	InputHex      string `json:"input_hex"`
	DigestHex     string `json:"digest_hex"`
	AssocHex      string `json:"assoc_hex"`
	TagHex        string `json:"tag_hex"`
}

type rawFile struct {
	Algorithm string   `json:"algorithm"`
	Vectors   []rawVec `json:"vectors"`
	Hashes    []rawVec `json:"hash_vectors"`
	AEADs     []rawVec `json:"aead_vectors"`
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// hashNames maps cryptsetup's hash names to kernel names.
var hashNames = map[string]string{"whirlpool": "wp512"}

func load() {
	ciphers = map[string][]Cipher{}
	hashes = map[string][]Hash{}
	aeads = map[string][]AEAD{}
	ents, err := files.ReadDir("testdata")
	if err != nil {
		loadErr = err
		return
	}
	for _, e := range ents {
		b, err := files.ReadFile("testdata/" + e.Name())
		if err != nil {
			loadErr = err
			return
		}
		var f rawFile
		if err := json.Unmarshal(b, &f); err != nil {
			loadErr = fmt.Errorf("testmgr: %s: %w", e.Name(), err)
			return
		}
		for _, v := range f.Vectors {
			name := first(v.Algorithm, f.Algorithm)
			if v.Cipher != "" && v.Mode != "" {
				name = v.Mode + "(" + v.Cipher + ")"
			}
			if strings.HasPrefix(name, "XTS-AES") {
				name = "xts(aes)"
			}
			c := Cipher{ID: v.ID}
			var errs [4]error
			c.Key, errs[0] = hex.DecodeString(first(v.Key, v.KeyHex))
			c.IV, errs[1] = hex.DecodeString(first(v.IV, v.IVHex, v.Tweak))
			c.Plaintext, errs[2] = hex.DecodeString(first(v.Plaintext, v.PlaintextHex))
			c.Ciphertext, errs[3] = hex.DecodeString(first(v.Ciphertext, v.CiphertextHex))
			for _, err := range errs {
				if err != nil {
					loadErr = fmt.Errorf("testmgr: %s %s: %w", e.Name(), v.ID, err)
					return
				}
			}
			ciphers[name] = append(ciphers[name], c)
		}
		for _, v := range f.Hashes {
			name := v.Algorithm
			if n, ok := hashNames[name]; ok {
				name = n
			}
			in, err1 := hex.DecodeString(v.InputHex)
			d, err2 := hex.DecodeString(v.DigestHex)
			if err1 != nil || err2 != nil {
				loadErr = fmt.Errorf("testmgr: %s %s: bad hex", e.Name(), v.ID)
				return
			}
			hashes[name] = append(hashes[name], Hash{ID: v.ID, Input: in, Digest: d})
		}
		for _, v := range f.AEADs {
			a := AEAD{ID: v.ID}
			var errs [6]error
			a.Key, errs[0] = hex.DecodeString(v.KeyHex)
			a.IV, errs[1] = hex.DecodeString(v.IVHex)
			a.Assoc, errs[2] = hex.DecodeString(v.AssocHex)
			a.Plaintext, errs[3] = hex.DecodeString(v.PlaintextHex)
			a.Ciphertext, errs[4] = hex.DecodeString(v.CiphertextHex)
			a.Tag, errs[5] = hex.DecodeString(v.TagHex)
			for _, err := range errs {
				if err != nil {
					loadErr = fmt.Errorf("testmgr: %s %s: %w", e.Name(), v.ID, err)
					return
				}
			}
			aeads[v.Algorithm] = append(aeads[v.Algorithm], a)
		}
	}
}

// Ciphers returns the skcipher vectors for a kernel algorithm name such as
// "xts(aes)" or "essiv(cbc(aes),sha256)"; nil when there are none.
func Ciphers(name string) ([]Cipher, error) {
	once.Do(load)
	return ciphers[name], loadErr
}

// Hashes returns the digest vectors for a kernel hash name such as "sha256".
func Hashes(name string) ([]Hash, error) {
	once.Do(load)
	return hashes[name], loadErr
}

// AEADs returns the AEAD vectors for a kernel algorithm name such as
// "gcm(aes)", "rfc7539(chacha20,poly1305)" or "aegis128".
func AEADs(name string) ([]AEAD, error) {
	once.Do(load)
	return aeads[name], loadErr
}

// Names lists every skcipher and hash name that has vectors (the capi
// drivers' names; the AEAD vectors are AEADs', for package sector).
func Names() []string {
	once.Do(load)
	var out []string
	for n := range ciphers {
		out = append(out, n)
	}
	for n := range hashes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
