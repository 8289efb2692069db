/* base64.h: standard base64 (RFC 4648 §4, with '=' padding), for binary data that must
 * travel inside JSON (build and checkpoint chunks in replicated commands). Strict decoding:
 * no whitespace, no missing padding, no non-zero pad bits. */
#ifndef YARD_COMMON_BASE64_H
#define YARD_COMMON_BASE64_H

#include <stddef.h>

/* Characters base64_encode writes for len bytes, without the terminating NUL. */
size_t base64_encoded_len(size_t len);
/* Writes base64_encoded_len(len) characters and a NUL into out. */
void base64_encode(const void *data, size_t len, char *out);
/* Decodes text[0..text_len) into out (room for text_len / 4 * 3 bytes); *out_len gets the
 * byte count. Returns 0, or -1 when text is not strict base64. */
int base64_decode(const char *text, size_t text_len, unsigned char *out, size_t *out_len);

#endif
