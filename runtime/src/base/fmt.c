/* Numbers as text without stdio or malloc: safe inside malloc, in a fork child and in a signal
 * handler. The one place the runtime turns numbers into digits (dumps, log lines, control replies),
 * and builds a line in a fixed buffer (control replies, socket paths). */
#include "fmt.h"

size_t ml_fmt_u64(char *buf, uint64_t v, int width)
{
    char tmp[ML_FMT_MAX];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v || n < width);
    for (int i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = 0;
    return (size_t)n;
}

size_t ml_fmt_hex(char *buf, uint64_t v)
{
    char tmp[ML_FMT_MAX];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    buf[0] = '0';
    buf[1] = 'x';
    for (int i = 0; i < n; i++)
        buf[2 + i] = tmp[n - 1 - i];
    buf[2 + n] = 0;
    return (size_t)n + 2;
}

void ml_buf_str(struct ml_buf *b, const char *s)
{
    while (*s && b->len + 1 < b->cap)
        b->p[b->len++] = *s++;
    b->p[b->len] = 0;
}

void ml_buf_u64(struct ml_buf *b, uint64_t v)
{
    char tmp[ML_FMT_MAX];
    ml_fmt_u64(tmp, v, 0);
    ml_buf_str(b, tmp);
}

void ml_buf_kv(struct ml_buf *b, const char *key, uint64_t v)
{
    ml_buf_str(b, " ");
    ml_buf_str(b, key);
    ml_buf_str(b, "=");
    ml_buf_u64(b, v);
}
