//go:build linux

package kernel

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// guestModules are the modules the guest loads, in addition to their
// dependencies. Names use underscores, as the kernel does. Missing optional
// modules (not built for this kernel, or built in) are skipped.
var guestModules = []struct {
	name     string
	optional bool
}{
	{"virtio_pci", false},
	{"virtio_blk", false},
	{"dm_mod", false},
	{"dm_crypt", false},
	{"dm_integrity", true}, // integrity_test.go (integritysetup)
	{"authenc", true},      // aead_test.go: LUKS2 --integrity
	{"algif_aead", true},   // cryptsetup checks AEAD ciphers through AF_ALG
	{"gcm", true},
	{"ghash_generic", true},
	{"ghash_clmulni_intel", true},
	{"chacha20poly1305", true},
	{"aegis128", true},
	{"hmac", true},
	{"af_alg", false},
	{"algif_skcipher", false},
	{"algif_hash", true},
	{"ecb", true},
	{"cbc", true},
	{"ctr", true},
	{"xts", true},
	{"lrw", true},
	{"essiv", false},
	{"aes_generic", true},
	{"aesni_intel", true},
	{"sha256_generic", true},
	{"sha512_generic", true},
	{"sha1_generic", true},
	{"serpent_generic", true},
	{"serpent_sse2_x86_64", true},
	{"serpent_avx2", true},
	{"twofish_generic", true},
	{"twofish_x86_64", true},
	{"twofish_x86_64_3way", true},
	{"adiantum", true},
	{"chacha_generic", true},
	{"nhpoly1305", true},
	{"poly1305_generic", true},
	{"crc32_generic", true}, // tcw
	{"crc32_pclmul", true},
	{"crc32c_generic", true},
	{"crc32c_intel", true},
	{"nbd", false}, // the kernel's NBD client (nbd_test.go)
	{"ext4", true},
	{"vfat", true},
	{"nls_cp437", true},
	{"nls_iso8859_1", true},
	{"nls_ascii", true}, // vfat's default iocharset in Debian's config
	{"nls_utf8", true},  // and its default utf8 option
	{"uhid", true},      // fido2_test.go: the software security key
	{"hid_generic", true},
}

// module is one .ko file of the unpacked kernel package.
type module struct {
	name    string // normalised (underscores)
	path    string // absolute, on the host
	depends []string
	softpre []string
}

func normModName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// modinfo reads the depends= and softdep= fields of a module's .modinfo
// section (what depmod writes into modules.dep; Debian's package ships no
// modules.dep because depmod runs at install time).
func modinfo(path string) (depends, softpre []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, nil, fmt.Errorf("%s: no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d != "" {
					depends = append(depends, normModName(d))
				}
			}
		case "softdep":
			// "pre: a b post: c"
			pre := false
			for _, w := range strings.Fields(v) {
				switch w {
				case "pre:":
					pre = true
				case "post:":
					pre = false
				default:
					if pre {
						softpre = append(softpre, normModName(w))
					}
				}
			}
		}
	}
	return depends, softpre, nil
}

// moduleIndex lists every module of the kernel tree at root
// (lib/modules/<release>), by name.
func moduleIndex(root string) (map[string]*module, error) {
	idx := map[string]*module{}
	err := filepath.WalkDir(filepath.Join(root, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		base := d.Name()
		switch {
		case strings.HasSuffix(base, ".ko"):
			idx[normModName(strings.TrimSuffix(base, ".ko"))] = &module{name: normModName(strings.TrimSuffix(base, ".ko")), path: p}
		case strings.HasSuffix(base, ".ko.xz"), strings.HasSuffix(base, ".ko.zst"), strings.HasSuffix(base, ".ko.gz"):
			return fmt.Errorf("%s: compressed modules are not supported by the harness yet", p)
		}
		return nil
	})
	return idx, err
}

// builtinModules reads modules.builtin: names compiled into the kernel.
func builtinModules(root string) map[string]bool {
	b := map[string]bool{}
	data, _ := os.ReadFile(filepath.Join(root, "modules.builtin"))
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			b[normModName(strings.TrimSuffix(filepath.Base(l), ".ko"))] = true
		}
	}
	return b
}

// resolveModules returns the modules to load, dependencies first.
func resolveModules(root string) ([]*module, error) {
	idx, err := moduleIndex(root)
	if err != nil {
		return nil, err
	}
	builtin := builtinModules(root)
	var order []*module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, optional bool) error
	visit = func(name string, optional bool) error {
		if state[name] == 2 || builtin[name] {
			return nil
		}
		if state[name] == 1 {
			return fmt.Errorf("module dependency cycle at %s", name)
		}
		m := idx[name]
		if m == nil {
			if optional {
				return nil
			}
			return fmt.Errorf("module %s is neither in %s nor built in", name, root)
		}
		state[name] = 1
		deps, soft, err := modinfo(m.path)
		if err != nil {
			return err
		}
		m.depends, m.softpre = deps, soft
		for _, d := range soft {
			if err := visit(d, true); err != nil {
				return err
			}
		}
		for _, d := range deps {
			if err := visit(d, false); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, m)
		return nil
	}
	for _, w := range guestModules {
		if err := visit(w.name, w.optional); err != nil {
			return nil, err
		}
	}
	return order, nil
}
