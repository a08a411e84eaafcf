package fvault2

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// RFC 3394 section 4 (4.1 to 4.6): KEK 000102…, key data 00112233….
func TestKeyWrapRFC3394(t *testing.T) {
	const kek = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	const data = "00112233445566778899aabbccddeeff000102030405060708090a0b0c0d0e0f"
	for _, v := range []struct {
		kekLen, keyLen int
		out            string
	}{
		{16, 16, "1fa68b0a8112b447aef34bd8fb5a7b829d3e862371d2cfe5"},
		{24, 16, "96778b25ae6ca435f92b5b97c050aed2468ab8a17ad84e5d"},
		{32, 16, "64e8c3f9ce0f5ba263e9777905818a2a93c8191e7d6e8ae7"},
		{24, 24, "031d33264e15d33268f24ec260743edce1c6c7ddee725a936ba814915c6762d2"},
		{32, 24, "a8f9bc1612c68b3ff6e6f4fbe30e71e4769c8b80a32cb8958cd5d17d6b254da1"},
		{32, 32, "28c9f404c4b810f4cbccb35cfb87f8263f5786e2d80ed326cbc7f0e71a99f43bfb988b9b7a02dd21"},
	} {
		k := unhex(t, kek)[:v.kekLen]
		key := unhex(t, data)[:v.keyLen]
		want := unhex(t, v.out)
		got, err := wrapKey(k, key)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("KEK %d key %d: wrap %x %v", v.kekLen*8, v.keyLen*8, got, err)
		}
		back, err := unwrapKey(k, want)
		if err != nil || !bytes.Equal(back, key) {
			t.Errorf("KEK %d key %d: unwrap %x %v", v.kekLen*8, v.keyLen*8, back, err)
		}
		for i := 0; i < len(want)*8; i++ {
			bad := append([]byte(nil), want...)
			bad[i/8] ^= 1 << (i % 8)
			if _, err := unwrapKey(k, bad); err == nil {
				t.Fatalf("bit %d flipped and accepted", i)
			}
		}
	}
	if _, err := wrapKey(make([]byte, 16), make([]byte, 8)); err == nil {
		t.Error("8-byte key wrapped")
	}
	if _, err := unwrapKey(make([]byte, 16), make([]byte, 20)); err == nil {
		t.Error("20-byte wrapped key accepted")
	}
	if _, err := unwrapKey(make([]byte, 15), make([]byte, 24)); err == nil {
		t.Error("15-byte KEK accepted")
	}
}
