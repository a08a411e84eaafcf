// aegis_peer: the Linux kernel's AES-NI AEGIS-128
// (arch/x86/crypto/aegis128-aesni-asm.S, Linux 6.12, assembled as is)
// driven from userspace the way its glue, aegis128-aesni-glue.c, drives it
// for one request, for bench/aead.sh.
//
//   aegis_peer test                        the kernel's own aegis128 test
//                                          vectors (crypto/testmgr.h), then
//                                          long messages
//   aegis_peer bench KEYBITS SIZE SECS     "RESULT impl=kaesni key=128 size=4096 MBps=..."
//
// One call per sector, as dm-crypt's capi:aegis128-random does per sector:
// a fresh 16-byte IV, 24 bytes of associated data (the 8-byte sector number
// and the IV), the data and a 16-byte tag. In the kernel each request also
// pays kernel_fpu_begin/end and a scatterlist walk; here it does not.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The glue's types: the key is read with movdqa, so it must be 16-byte
// aligned; the state (five blocks) is read and written with movdqu.
struct aegis_block {
	uint8_t bytes[16];
} __attribute__((aligned(16)));
struct aegis_state {
	struct aegis_block blocks[5];
};

void aegis128_aesni_init(struct aegis_state *state, const struct aegis_block *key, const uint8_t iv[16]);
void aegis128_aesni_ad(struct aegis_state *state, const uint8_t *data, unsigned int len);
void aegis128_aesni_enc(struct aegis_state *state, const uint8_t *src, uint8_t *dst, unsigned int len);
void aegis128_aesni_dec(struct aegis_state *state, const uint8_t *src, uint8_t *dst, unsigned int len);
void aegis128_aesni_enc_tail(struct aegis_state *state, const uint8_t *src, uint8_t *dst, unsigned int len);
void aegis128_aesni_dec_tail(struct aegis_state *state, const uint8_t *src, uint8_t *dst, unsigned int len);
void aegis128_aesni_final(struct aegis_state *state, struct aegis_block *tag_xor, unsigned int assoclen,
                          unsigned int cryptlen);

// The kernel's aegis128_tv_template, cut out of its crypto/testmgr.h by
// build.sh, with testmgr.h's own struct for it.
struct aead_testvec {
	const char *key;
	const char *iv;
	const char *ptext;
	const char *assoc;
	const char *ctext;
	unsigned char novrfy;
	unsigned char wk;
	unsigned char klen;
	unsigned int plen;
	unsigned int clen;
	unsigned int alen;
	int setkey_error;
	int setauthsize_error;
	int crypt_error;
};
#include "aegis128_tv.h"
#define NVEC (sizeof(aegis128_tv_template) / sizeof(aegis128_tv_template[0]))

// process_ad: crypto_aegis128_aesni_process_ad for associated data in one
// piece: whole blocks straight from the buffer, the rest zero-padded.
static void process_ad(struct aegis_state *st, const uint8_t *ad, unsigned int len) {
	struct aegis_block buf;
	unsigned int whole = len & ~15u;
	if (whole) aegis128_aesni_ad(st, ad, whole);
	if (len > whole) {
		memset(buf.bytes, 0, 16);
		memcpy(buf.bytes, ad + whole, len - whole);
		aegis128_aesni_ad(st, buf.bytes, 16);
	}
}

// aegis_crypt: crypto_aegis128_aesni_crypt for one request in one piece; the tag
// computed is XORed into tag (zero to seal; the received tag to open, which
// then verifies when the first taglen bytes come out zero).
static void aegis_crypt(int enc, const struct aegis_block *key, const uint8_t iv[16], const uint8_t *ad, unsigned int adlen,
                  const uint8_t *src, uint8_t *dst, unsigned int len, struct aegis_block *tag) {
	struct aegis_state st;
	unsigned int whole = len & ~15u;
	aegis128_aesni_init(&st, key, iv);
	process_ad(&st, ad, adlen);
	if (whole) (enc ? aegis128_aesni_enc : aegis128_aesni_dec)(&st, src, dst, whole);
	if (len > whole) (enc ? aegis128_aesni_enc_tail : aegis128_aesni_dec_tail)(&st, src + whole, dst + whole, len - whole);
	aegis128_aesni_final(&st, tag, adlen, len);
}

static void seal(const struct aegis_block *key, const uint8_t iv[16], const uint8_t *ad, unsigned int adlen,
                 const uint8_t *src, uint8_t *dst, unsigned int len, uint8_t tag[16]) {
	struct aegis_block t = {{0}};
	aegis_crypt(1, key, iv, ad, adlen, src, dst, len, &t);
	memcpy(tag, t.bytes, 16);
}

static int open_(const struct aegis_block *key, const uint8_t iv[16], const uint8_t *ad, unsigned int adlen,
                 const uint8_t *src, uint8_t *dst, unsigned int len, const uint8_t *tag, unsigned int taglen) {
	struct aegis_block t = {{0}};
	uint8_t diff = 0;
	memcpy(t.bytes, tag, taglen);
	aegis_crypt(0, key, iv, ad, adlen, src, dst, len, &t);
	for (unsigned int i = 0; i < taglen; i++) diff |= t.bytes[i];
	return diff == 0;
}

static void fill(uint8_t *p, size_t n) {
	for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rand();
}

// test: every vector of the kernel's aegis128_tv_template, sealed and
// opened with the data 16-byte aligned and misaligned (the assembly has a
// loop for each), and a tampered tag refused. The vectors reach at most 65
// bytes, i.e. four of the five blocks the enc/dec loops unroll; for sector
// sizes, each message is also sealed block by block (one 16-byte call at a
// time, a path the vectors check) and must agree with the one-call result.
static int test(void) {
	static uint8_t buf[3][8192 + 64];
	int bad = 0, n = 0;
	for (size_t v = 0; v < NVEC; v++) {
		const struct aead_testvec *tv = &aegis128_tv_template[v];
		unsigned int taglen = tv->clen - tv->plen;
		struct aegis_block key;
		if (tv->klen != 16 || taglen < 8 || taglen > 16) {
			printf("vector %zu: unexpected shape (klen %d, tag %u)\n", v, tv->klen, taglen);
			bad++;
			continue;
		}
		memcpy(key.bytes, tv->key, 16);
		for (int off = 0; off <= 1; off++, n++) {
			uint8_t *ad = buf[0] + off, *src = buf[1] + off, *dst = buf[2] + off, tag[16];
			memcpy(ad, tv->assoc, tv->alen);
			memcpy(src, tv->ptext, tv->plen);
			seal(&key, (const uint8_t *)tv->iv, ad, tv->alen, src, dst, tv->plen, tag);
			if (memcmp(dst, tv->ctext, tv->plen) || memcmp(tag, tv->ctext + tv->plen, taglen)) {
				printf("vector %zu (offset %d): seal mismatch\n", v, off);
				bad++;
			}
			memcpy(src, tv->ctext, tv->plen);
			if (!open_(&key, (const uint8_t *)tv->iv, ad, tv->alen, src, dst, tv->plen,
			           (const uint8_t *)tv->ctext + tv->plen, taglen) ||
			    memcmp(dst, tv->ptext, tv->plen)) {
				printf("vector %zu (offset %d): open failed\n", v, off);
				bad++;
			}
			memcpy(tag, tv->ctext + tv->plen, taglen);
			tag[v % taglen] ^= 0x80;
			if (open_(&key, (const uint8_t *)tv->iv, ad, tv->alen, src, dst, tv->plen, tag, taglen)) {
				printf("vector %zu (offset %d): tampered tag accepted\n", v, off);
				bad++;
			}
		}
	}
	printf("%zu kernel vectors (testmgr.h aegis128_tv_template), %d cases\n", NVEC, n);
	static const unsigned int lens[] = {80, 96, 4096, 4096 + 7, 512, 8192};
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		for (int off = 0; off <= 1; off++, n++) {
			unsigned int len = lens[i], adlen = 24 + 41 * off;
			uint8_t iv[16], *ad = buf[0] + off, *src = buf[1] + off, *dst = buf[2] + off, tag[16], t2[16];
			struct aegis_block key;
			struct aegis_state st;
			struct aegis_block t = {{0}};
			fill(key.bytes, 16); fill(iv, 16); fill(ad, adlen); fill(src, len);
			seal(&key, iv, ad, adlen, src, dst, len, tag);
			static uint8_t one[8192];
			aegis128_aesni_init(&st, &key, iv);
			process_ad(&st, ad, adlen);
			for (unsigned int p = 0; p + 16 <= len; p += 16) aegis128_aesni_enc(&st, src + p, one + p, 16);
			if (len % 16) aegis128_aesni_enc_tail(&st, src + (len & ~15u), one + (len & ~15u), len % 16);
			aegis128_aesni_final(&st, &t, adlen, len);
			memcpy(t2, t.bytes, 16);
			if (memcmp(dst, one, len) || memcmp(tag, t2, 16)) {
				printf("len %u (offset %d): one call and block by block differ\n", len, off);
				bad++;
			}
			if (!open_(&key, iv, ad, adlen, dst, one, len, tag, 16) || memcmp(one, src, len)) {
				printf("len %u (offset %d): open failed\n", len, off);
				bad++;
			}
			dst[len / 2] ^= 1;
			if (open_(&key, iv, ad, adlen, dst, one, len, tag, 16)) {
				printf("len %u (offset %d): tampered ciphertext accepted\n", len, off);
				bad++;
			}
		}
	}
	printf("%d cases, %d bad\n", n, bad);
	if (bad) return 1;
	printf("RESULT: ALL OK\n");
	return 0;
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int bench(int bits, int size, double secs) {
	if (bits != 128 || size <= 0) {
		fprintf(stderr, "aegis_peer: AEGIS-128 takes a 128-bit key and a positive size\n");
		return 2;
	}
	uint8_t aad[24], tag[16];
	uint8_t *src = aligned_alloc(64, size + 64), *dst = aligned_alloc(64, size + 64);
	struct aegis_block key;
	uint64_t sector = 0, units = 0;
	double t0 = now(), t;
	fill(key.bytes, 16); fill(src, size);
	do {
		for (int i = 0; i < 64; i++, sector++) {
			uint8_t *iv = aad + 8;
			memcpy(aad, &sector, 8);
			memcpy(iv, &sector, 8); // a fresh IV per sector (random in dm-crypt)
			memcpy(iv + 8, &units, 8);
			seal(&key, iv, aad, 24, src, dst, size, tag);
		}
		units += 64;
	} while ((t = now() - t0) < secs);
	printf("RESULT impl=kaesni key=%d size=%d MBps=%.1f\n", bits, size, units * (double)size / t / 1e6);
	free(src);
	free(dst);
	return 0;
}

int main(int argc, char **argv) {
	srand(1);
	if (argc == 2 && !strcmp(argv[1], "test")) return test();
	if (argc == 5 && !strcmp(argv[1], "bench")) return bench(atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
	fprintf(stderr, "usage: aegis_peer test | aegis_peer bench KEYBITS SIZE SECS\n");
	return 2;
}
