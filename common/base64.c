/* base64.c: see base64.h. */
#include "common/base64.h"

#include <stdint.h>

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void yard_base64_encode(const void *in, size_t len, char *out)
{
	const unsigned char *p = in;
	size_t o = 0;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < len)
			v |= p[i + 2];
		out[o++] = ALPHABET[(v >> 18) & 63];
		out[o++] = ALPHABET[(v >> 12) & 63];
		out[o++] = i + 1 < len ? ALPHABET[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < len ? ALPHABET[v & 63] : '=';
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

long yard_base64_decode(const char *text, size_t text_len, void *out)
{
	unsigned char *q = out;
	size_t o = 0;
	if (text_len % 4 != 0)
		return -1;
	for (size_t i = 0; i < text_len; i += 4) {
		int last = i + 4 == text_len;
		int pad = (text[i + 3] == '=') + (text[i + 2] == '=');
		int s[4];
		if (pad > 0 && !last)
			return -1;
		if (text[i + 2] == '=' && text[i + 3] != '=')
			return -1;
		for (int k = 0; k < 4 - pad; k++)
			if ((s[k] = sextet(text[i + k])) < 0)
				return -1;
		for (int k = 4 - pad; k < 4; k++)
			s[k] = 0;
		uint32_t v = (uint32_t)s[0] << 18 | (uint32_t)s[1] << 12 | (uint32_t)s[2] << 6 |
		             (uint32_t)s[3];
		q[o++] = (unsigned char)(v >> 16);
		if (pad < 2)
			q[o++] = (unsigned char)(v >> 8);
		if (pad < 1)
			q[o++] = (unsigned char)v;
	}
	return (long)o;
}
