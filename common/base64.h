/* base64.h: standard base64 (RFC 4648, with '=' padding) for carrying raw bytes, such as a
 * rank's output, inside JSON strings. No line breaks, no URL-safe alphabet. */
#ifndef YARD_COMMON_BASE64_H
#define YARD_COMMON_BASE64_H

#include <stddef.h>

/* Characters yard_base64_encode writes for len bytes, without the terminating NUL. */
#define YARD_BASE64_LEN(len) ((((len) + 2) / 3) * 4)

/* Encodes len bytes of in into out (YARD_BASE64_LEN(len) + 1 bytes, NUL-terminated). */
void yard_base64_encode(const void *in, size_t len, char *out);

/* Decodes text of text_len characters into out (at least text_len / 4 * 3 bytes). Returns
 * the number of bytes written, or -1 when text is not padded base64 (length not a multiple
 * of 4, a character outside the alphabet, padding anywhere but the end). */
long yard_base64_decode(const char *text, size_t text_len, void *out);

#endif
