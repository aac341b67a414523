/* Base64 (RFC 4648, padded) for the JSON the command's servers speak (exec-server, ui). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *cli_b64_encode(const uint8_t *d, size_t len)
{
	char *out = malloc((len + 2) / 3 * 4 + 1);
	if (!out)
		return NULL;
	size_t o = 0, i = 0;
	for (; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
		out[o++] = b64[v >> 18];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = b64[(v >> 6) & 63];
		out[o++] = b64[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < len ? (uint32_t)d[i + 1] << 8 : 0);
		out[o++] = b64[v >> 18];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
		out[o++] = '=';
	}
	out[o] = '\0';
	return out;
}

bool cli_b64_decode(const char *t, size_t n, uint8_t **out, size_t *len)
{
	/* 0: not base64; else the value plus one */
	static const uint8_t rev[256] = {
	    ['A'] = 1,  ['B'] = 2,  ['C'] = 3,  ['D'] = 4,  ['E'] = 5,  ['F'] = 6,  ['G'] = 7,
	    ['H'] = 8,  ['I'] = 9,  ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14,
	    ['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21,
	    ['V'] = 22, ['W'] = 23, ['X'] = 24, ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28,
	    ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35,
	    ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42,
	    ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49,
	    ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
	    ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63,
	    ['/'] = 64};
	uint8_t *buf = malloc(n / 4 * 3 + 3);
	if (!buf)
		return false;
	size_t o = 0;
	uint32_t acc = 0;
	int bits = 0, pad = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)t[i];
		if (c == '=') {
			pad++;
			continue;
		}
		if (!rev[c] || pad) {
			free(buf);
			return false;
		}
		acc = acc << 6 | (uint32_t)(rev[c] - 1);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			buf[o++] = (uint8_t)(acc >> bits);
		}
	}
	if (pad > 2) {
		free(buf);
		return false;
	}
	*out = buf;
	*len = o;
	return true;
}
