/* test_sha256.c: SHA-256 against the FIPS 180-4 / NIST example vectors, including inputs
 * that straddle the 55/56/64-byte padding boundaries and one fed in odd-sized pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "jobs/sha256.h"

static void check(const char *msg, size_t len, const char *want)
{
	char hex[SHA256_HEX_LEN + 1];
	sha256_hex(msg, len, hex);
	assert_string_equal(hex, want);
}

static void test_nist_vectors(void **state)
{
	check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes */
	check(m, strlen(m), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_million_a_in_pieces(void **state)
{
	char block[997];
	memset(block, 'a', sizeof block);
	struct sha256_ctx ctx;
	uint8_t d[SHA256_DIGEST_LEN];
	char hex[SHA256_HEX_LEN + 1];
	sha256_init(&ctx);
	size_t left = 1000000;
	while (left > 0) {
		size_t n = left < sizeof block ? left : sizeof block;
		sha256_update(&ctx, block, n);
		left -= n;
	}
	sha256_final(&ctx, d);
	sha256_to_hex(d, hex);
	assert_string_equal(hex,
	                    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_boundary_lengths_differ(void **state)
{
	/* 55, 56, 63, 64 and 65 bytes exercise each padding branch; all digests differ. */
	char buf[65], seen[5][SHA256_HEX_LEN + 1];
	size_t lens[5] = {55, 56, 63, 64, 65};
	memset(buf, 'x', sizeof buf);
	for (int i = 0; i < 5; i++) {
		sha256_hex(buf, lens[i], seen[i]);
		for (int j = 0; j < i; j++)
			assert_string_not_equal(seen[i], seen[j]);
	}
	/* 64 bytes of 'x' from an independent implementation (coreutils sha256sum). */
	assert_string_equal(seen[3],
	                    "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_nist_vectors),
	    cmocka_unit_test(test_million_a_in_pieces),
	    cmocka_unit_test(test_boundary_lengths_differ),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
