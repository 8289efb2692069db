/* base64.c: RFC 4648 base64 with padding (see base64.h). */
#include "common/base64.h"

#include <stdint.h>

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encoded_len(size_t len)
{
	return (len + 2) / 3 * 4;
}

void base64_encode(const void *data, size_t len, char *out)
{
	const unsigned char *p = data;
	size_t o = 0, i = 0;
	for (; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		out[o++] = ALPHABET[v >> 18 & 63];
		out[o++] = ALPHABET[v >> 12 & 63];
		out[o++] = ALPHABET[v >> 6 & 63];
		out[o++] = ALPHABET[v & 63];
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)p[i] << 16;
		out[o++] = ALPHABET[v >> 18 & 63];
		out[o++] = ALPHABET[v >> 12 & 63];
		out[o++] = '=';
		out[o++] = '=';
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
		out[o++] = ALPHABET[v >> 18 & 63];
		out[o++] = ALPHABET[v >> 12 & 63];
		out[o++] = ALPHABET[v >> 6 & 63];
		out[o++] = '=';
	}
	out[o] = '\0';
}

static int sextet(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int base64_decode(const char *text, size_t text_len, unsigned char *out, size_t *out_len)
{
	size_t o = 0;
	if (text_len % 4 != 0)
		return -1;
	for (size_t i = 0; i < text_len; i += 4) {
		int last = i + 4 == text_len;
		int pad = last && text[i + 3] == '=' ? (text[i + 2] == '=' ? 2 : 1) : 0;
		int s[4];
		for (int k = 0; k < 4; k++) {
			s[k] = k >= 4 - pad ? 0 : sextet(text[i + k]);
			if (s[k] < 0)
				return -1;
		}
		uint32_t v = (uint32_t)s[0] << 18 | (uint32_t)s[1] << 12 | (uint32_t)s[2] << 6 |
		             (uint32_t)s[3];
		if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0))
			return -1; /* non-zero pad bits: not the canonical encoding */
		out[o++] = (unsigned char)(v >> 16);
		if (pad < 2)
			out[o++] = (unsigned char)(v >> 8);
		if (pad < 1)
			out[o++] = (unsigned char)v;
	}
	*out_len = o;
	return 0;
}
