package capi

import "testing"

func TestSmoke(t *testing.T) {
	for _, n := range []string{"aes", "cbc(aes)", "xts(aes)", "ecb(aes)", "essiv(cbc(aes),sha256)", "lrw(aes)", "cbc(twofish)", "xts(twofish)", "lrw(twofish)", "sha256", "ripemd160", "adiantum(xchacha12,aes)", "adiantum(xchacha20,aes)", "ctr(aes)"} {
		a, err := Lookup(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		t.Logf("%s %s %d %s", a.Name, a.Driver, a.Priority, a.SelfTestState())
	}
}
