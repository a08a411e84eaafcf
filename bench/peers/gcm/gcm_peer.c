// gcm_peer: the Linux kernel's VAES/VPCLMULQDQ AES-GCM
// (arch/x86/crypto/aes-gcm-avx10-x86_64.S, Linux 6.11+, assembled as is)
// driven from userspace the way the kernel's glue drives it for one
// request, and OpenSSL 3's EVP AES-GCM beside it, for bench/aead.sh.
//
//   gcm_peer test                      every implementation against OpenSSL
//   gcm_peer bench KEYBITS SIZE SECS   one line per implementation:
//                                      "RESULT impl=k512 key=256 size=4096 MBps=..."
//
// One call per sector: a fresh 12-byte IV, 20 bytes of associated data
// (dm-crypt's sector number and IV), the data and a 16-byte tag, as
// dm-crypt's capi:gcm(aes)-random does per sector. The key (round keys and
// hash-key powers) is set up once.
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The key struct the assembly reads: crypto_aes_ctx (enc and dec round
// keys, key length in bytes at offset 480), then at offset 512 the hash-key
// powers H^16..H^1 and three zero blocks.
struct gcm_key {
	uint32_t key_enc[60];
	uint32_t key_dec[60];
	uint32_t key_length;
	uint32_t nonce_unused;
	uint8_t pad[24];
	uint64_t h_powers[16][2];
	uint64_t padding[3][2];
} __attribute__((aligned(64)));

_Static_assert(__builtin_offsetof(struct gcm_key, key_length) == 480, "key length offset");
_Static_assert(__builtin_offsetof(struct gcm_key, h_powers) == 512, "hash powers offset");

void aes_gcm_precompute_vaes_avx10_512(struct gcm_key *key);
void aes_gcm_aad_update_vaes_avx10(const struct gcm_key *key, uint8_t acc[16], const uint8_t *aad, int aadlen);
void aes_gcm_enc_update_vaes_avx10_512(const struct gcm_key *key, const uint32_t le_ctr[4], uint8_t acc[16], const uint8_t *src, uint8_t *dst, int len);
void aes_gcm_dec_update_vaes_avx10_512(const struct gcm_key *key, const uint32_t le_ctr[4], uint8_t acc[16], const uint8_t *src, uint8_t *dst, int len);
void aes_gcm_enc_update_vaes_avx10_256(const struct gcm_key *key, const uint32_t le_ctr[4], uint8_t acc[16], const uint8_t *src, uint8_t *dst, int len);
void aes_gcm_enc_final_vaes_avx10(const struct gcm_key *key, const uint32_t le_ctr[4], uint8_t acc[16], uint64_t aadlen, uint64_t datalen);
_Bool aes_gcm_dec_final_vaes_avx10(const struct gcm_key *key, const uint32_t le_ctr[4], const uint8_t acc[16], uint64_t aadlen, uint64_t datalen, const uint8_t tag[16], int taglen);

// FIPS-197 key expansion, byte by byte (set-up only, not measured).
static uint8_t sbox[256];
static void init_sbox(void) {
	uint8_t p = 1, q = 1;
	do {
		p = p ^ (uint8_t)(p << 1) ^ (p & 0x80 ? 0x1b : 0);
		q ^= q << 1; q ^= q << 2; q ^= q << 4;
		if (q & 0x80) q ^= 0x09;
		uint8_t x = q ^ (uint8_t)(q << 1 | q >> 7) ^ (uint8_t)(q << 2 | q >> 6) ^ (uint8_t)(q << 3 | q >> 5) ^ (uint8_t)(q << 4 | q >> 4);
		sbox[p] = x ^ 0x63;
	} while (p != 1);
	sbox[0] = 0x63;
}
static void expand(struct gcm_key *k, const uint8_t *key, int bytes) {
	uint8_t *w = (uint8_t *)k->key_enc;
	int nk = bytes / 4, total = 4 * (nk + 7);
	uint8_t rcon = 1;
	memset(k, 0, sizeof(*k));
	memcpy(w, key, bytes);
	for (int i = nk; i < total; i++) {
		uint8_t t[4];
		memcpy(t, w + 4 * (i - 1), 4);
		if (i % nk == 0) {
			uint8_t t0 = t[0];
			t[0] = sbox[t[1]] ^ rcon; t[1] = sbox[t[2]]; t[2] = sbox[t[3]]; t[3] = sbox[t0];
			rcon = (uint8_t)(rcon << 1) ^ (rcon & 0x80 ? 0x1b : 0);
		} else if (nk > 6 && i % nk == 4) {
			for (int j = 0; j < 4; j++) t[j] = sbox[t[j]];
		}
		for (int j = 0; j < 4; j++) w[4 * i + j] = w[4 * (i - nk) + j] ^ t[j];
	}
	k->key_length = bytes;
}

enum { K512, K256, O3, NIMPL };
static const char *names[NIMPL] = {"k512", "k256", "o3evp"};

static void le_ctr_of(uint32_t c[4], const uint8_t iv[12]) {
	c[0] = 2;
	c[1] = (uint32_t)iv[8] << 24 | iv[9] << 16 | iv[10] << 8 | iv[11];
	c[2] = (uint32_t)iv[4] << 24 | iv[5] << 16 | iv[6] << 8 | iv[7];
	c[3] = (uint32_t)iv[0] << 24 | iv[1] << 16 | iv[2] << 8 | iv[3];
}

// kseal: one request through the kernel code, as its glue makes it.
static void kseal(int impl, const struct gcm_key *k, const uint8_t iv[12], const uint8_t *aad, int aadlen,
                  const uint8_t *src, uint8_t *dst, int len, uint8_t tag[16]) {
	uint32_t c[4];
	uint8_t acc[16] = {0};
	le_ctr_of(c, iv);
	aes_gcm_aad_update_vaes_avx10(k, acc, aad, aadlen);
	if (impl == K512)
		aes_gcm_enc_update_vaes_avx10_512(k, c, acc, src, dst, len);
	else
		aes_gcm_enc_update_vaes_avx10_256(k, c, acc, src, dst, len);
	aes_gcm_enc_final_vaes_avx10(k, c, acc, aadlen, len);
	memcpy(tag, acc, 16);
}

static int kopen(const struct gcm_key *k, const uint8_t iv[12], const uint8_t *aad, int aadlen,
                 const uint8_t *src, uint8_t *dst, int len, const uint8_t tag[16]) {
	uint32_t c[4];
	uint8_t acc[16] = {0};
	le_ctr_of(c, iv);
	aes_gcm_aad_update_vaes_avx10(k, acc, aad, aadlen);
	aes_gcm_dec_update_vaes_avx10_512(k, c, acc, src, dst, len);
	return aes_gcm_dec_final_vaes_avx10(k, c, acc, aadlen, len, tag, 16);
}

static void oseal(EVP_CIPHER_CTX *x, const uint8_t iv[12], const uint8_t *aad, int aadlen,
                  const uint8_t *src, uint8_t *dst, int len, uint8_t tag[16]) {
	int n;
	if (!EVP_EncryptInit_ex(x, NULL, NULL, NULL, iv) || !EVP_EncryptUpdate(x, NULL, &n, aad, aadlen) ||
	    !EVP_EncryptUpdate(x, dst, &n, src, len) || !EVP_EncryptFinal_ex(x, dst + n, &n) ||
	    !EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, 16, tag)) {
		fprintf(stderr, "openssl gcm failed\n");
		exit(1);
	}
}

static EVP_CIPHER_CTX *octx(const uint8_t *key, int bits) {
	EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
	if (!x || !EVP_EncryptInit_ex(x, bits == 256 ? EVP_aes_256_gcm() : EVP_aes_128_gcm(), NULL, key, NULL)) {
		fprintf(stderr, "openssl gcm init failed\n");
		exit(1);
	}
	return x;
}

static void fill(uint8_t *p, size_t n) {
	for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rand();
}

static int test(void) {
	static uint8_t src[8192], a[8192], b[8192], back[8192];
	uint8_t key[32], iv[12], aad[64], ta[16], tb[16];
	int bad = 0, n = 0;
	for (int bits = 128; bits <= 256; bits += 128) {
		for (int len = 0; len <= 4160; len += (len < 600 ? 1 : 4096 - 600)) {
			for (int r = 0; r < 3; r++, n++) {
				int aadlen = (len + r * 7) % 41;
				struct gcm_key k;
				fill(key, sizeof key); fill(iv, 12); fill(aad, aadlen); fill(src, len);
				expand(&k, key, bits / 8);
				aes_gcm_precompute_vaes_avx10_512(&k);
				EVP_CIPHER_CTX *x = octx(key, bits);
				oseal(x, iv, aad, aadlen, src, a, len, ta);
				EVP_CIPHER_CTX_free(x);
				for (int impl = K512; impl <= K256; impl++) {
					kseal(impl, &k, iv, aad, aadlen, src, b, len, tb);
					if (memcmp(a, b, len) || memcmp(ta, tb, 16)) {
						printf("MISMATCH %s key=%d len=%d aad=%d\n", names[impl], bits, len, aadlen);
						bad++;
					}
				}
				if (!kopen(&k, iv, aad, aadlen, a, back, len, ta) || memcmp(back, src, len)) {
					printf("OPEN FAILED key=%d len=%d\n", bits, len);
					bad++;
				}
				ta[r % 16] ^= 1;
				if (kopen(&k, iv, aad, aadlen, a, back, len, ta)) {
					printf("FORGERY ACCEPTED key=%d len=%d\n", bits, len);
					bad++;
				}
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
	uint8_t key[32], aad[20], tag[16];
	uint8_t *src = aligned_alloc(64, size + 64), *dst = aligned_alloc(64, size + 64);
	struct gcm_key k;
	fill(key, 32); fill(src, size);
	expand(&k, key, bits / 8);
	aes_gcm_precompute_vaes_avx10_512(&k);
	EVP_CIPHER_CTX *x = octx(key, bits);
	for (int impl = 0; impl < NIMPL; impl++) {
		uint64_t sector = 0, units = 0;
		double t0 = now(), t;
		do {
			for (int i = 0; i < 64; i++, sector++) {
				uint8_t *iv = aad + 8;
				memcpy(aad, &sector, 8);
				memcpy(iv, &sector, 8); // a fresh IV per sector (random in dm-crypt)
				memcpy(iv + 8, &units, 4);
				if (impl == O3)
					oseal(x, iv, aad, 20, src, dst, size, tag);
				else
					kseal(impl, &k, iv, aad, 20, src, dst, size, tag);
			}
			units += 64;
		} while ((t = now() - t0) < secs);
		printf("RESULT impl=%s key=%d size=%d MBps=%.1f\n", names[impl], bits, size, units * (double)size / t / 1e6);
	}
	EVP_CIPHER_CTX_free(x);
	return 0;
}

int main(int argc, char **argv) {
	init_sbox();
	srand(1);
	if (argc == 2 && !strcmp(argv[1], "test")) return test();
	if (argc == 5 && !strcmp(argv[1], "bench")) return bench(atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
	fprintf(stderr, "usage: gcm_peer test | gcm_peer bench KEYBITS SIZE SECS\n");
	return 2;
}
