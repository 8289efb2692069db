/* sha256.h: SHA-256 (FIPS 180-4), small and dependency-free. Used for the event hash chain,
 * hashed bearer tokens and database digests. Not constant-time against cache attacks on the
 * message; the inputs hashed here (token secrets compared by hash) do not need it. */
#ifndef YARD_JOBS_SHA256_H
#define YARD_JOBS_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32
#define SHA256_HEX_LEN 64

struct sha256_ctx {
	uint32_t state[8];
	uint64_t total_len; /* bytes fed so far */
	uint8_t block[64];
	size_t block_len;
};

void sha256_init(struct sha256_ctx *ctx);
void sha256_update(struct sha256_ctx *ctx, const void *data, size_t len);
void sha256_final(struct sha256_ctx *ctx, uint8_t digest[SHA256_DIGEST_LEN]);
/* One-shot digest as 64 lower-case hex characters plus NUL. */
void sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN + 1]);
void sha256_to_hex(const uint8_t digest[SHA256_DIGEST_LEN], char hex[SHA256_HEX_LEN + 1]);

#endif
