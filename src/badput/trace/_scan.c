/*
 * Fast path of the Kineto reader: scans a JSON array of trace events and returns typed
 * columns, without creating a Python object per event.
 *
 * It understands exactly the subset of JSON that well-formed Kineto traces use. Whenever an
 * input needs more (a malformed document, a null where a string belongs, a float where an
 * integer belongs, an exponent in a timestamp, nesting deeper than MAX_DEPTH), scan() returns
 * None and the caller decodes the same text with msgspec, which has the complete rules and
 * the error messages. So this file may refuse anything, but must never return a wrong value.
 *
 * Returned columns are read-only buffers (Column objects, handed over without a copy) of
 * packed native integers, one entry per kept event (phases X, s, f, t, and the allocator's
 * "[memory]" instant events); other events are only counted. Three sparse columns
 * (meta_row, meta_off, meta_len) list only the kept events whose
 * args hold a "Collective name" (NCCL metadata) or a "wait_on_stream" /
 * "wait_on_cuda_event_record_corr_id" (which record a cuda_sync row waited on): the row, and
 * where the args object lies in the input, so that the caller decodes those few args with
 * msgspec. Seven more sparse columns
 * (op_row, op_dims, op_types, op_strides, op_concrete, op_seq, op_fwd) list the kept events
 * whose args hold shape arguments (record_shapes=True): "Input Dims", "Input type",
 * "Input Strides" and "Concrete Inputs" as ids into one more interner, of raw value texts (a
 * value that is not a list counts as absent), and "Sequence number" and "Fwd thread id".
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sys/mman.h>
#endif

#define MAX_DEPTH 64
#define NO_ID (-1)

/* ---- growable column ------------------------------------------------------------------ */

typedef struct {
    char *data;
    size_t len;  /* bytes used */
    size_t cap;
} column;

/* Columns live in their own mappings where the system has mremap (Linux): growing one moves
 * pages, not bytes, and a column handed to Python (see Column below) is given back whole when
 * freed. Given-back mappings wait in a small pool for the next piece's columns: their pages
 * are resident already, so the next piece takes no page faults (which cost more than the
 * copy they replace); `drop_spare()` unmaps them once a read is done. Capacities are powers
 * of two from 4096: whole pages. */
#if defined(__linux__)
#define COL_MAPPED 1
#endif

#ifdef COL_MAPPED
#define POOL_MAX 256
static struct {
    char *data;
    size_t cap;
} pool[POOL_MAX];
static int pool_n;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* The smallest pooled mapping of at least `want` bytes (its size in *cap), else NULL. */
static char *pool_take(size_t want, size_t *cap) {
    char *data = NULL;
    pthread_mutex_lock(&pool_lock);
    int best = -1;
    for (int i = 0; i < pool_n; i++) {
        if (pool[i].cap >= want && (best < 0 || pool[i].cap < pool[best].cap)) best = i;
    }
    if (best >= 0) {
        data = pool[best].data;
        *cap = pool[best].cap;
        pool[best] = pool[--pool_n];
    }
    pthread_mutex_unlock(&pool_lock);
    return data;
}

/* A fork while another thread holds the lock would leave the child's copy held forever. */
static void pool_prefork(void) { pthread_mutex_lock(&pool_lock); }
static void pool_postfork(void) { pthread_mutex_unlock(&pool_lock); }
static void pool_postfork_child(void) { pthread_mutex_init(&pool_lock, NULL); }

static void pool_give(char *data, size_t cap) {
    pthread_mutex_lock(&pool_lock);
    if (pool_n < POOL_MAX) {
        pool[pool_n].data = data;
        pool[pool_n].cap = cap;
        pool_n++;
        data = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    if (data) munmap(data, cap);
}
#endif

/* A column's buffer grown to at least `cap` bytes (NULL on failure); *cap_out: its size. */
static char *col_realloc(char *data, size_t old_cap, size_t cap, size_t *cap_out) {
    *cap_out = cap;
#ifdef COL_MAPPED
    if (!data) {
        char *pooled = pool_take(cap, cap_out);
        if (pooled) return pooled;
    }
    void *p = data ? mremap(data, old_cap, cap, MREMAP_MAYMOVE)
                   : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : (char *)p;
#else
    (void)old_cap;
    return realloc(data, cap);
#endif
}

static void col_release(char *data, size_t cap) {
#ifdef COL_MAPPED
    if (data) pool_give(data, cap);
#else
    (void)cap;
    free(data);
#endif
}

static int col_grow(column *c, size_t size) {
    size_t cap = c->cap ? c->cap * 2 : 4096;
    while (cap < c->len + size) cap *= 2;
    size_t got;
    char *data = col_realloc(c->data, c->cap, cap, &got);
    if (!data) return -1;
    c->data = data;
    c->cap = got;
    return 0;
}

/* Inlined: `size` is a constant at every call, so the copy is one move. */
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif
static ALWAYS_INLINE int col_push(column *c, const void *value, size_t size) {
    if (c->len + size > c->cap && col_grow(c, size) < 0) return -1;
    memcpy(c->data + c->len, value, size);
    c->len += size;
    return 0;
}

/* ---- string interning: raw (still escaped) JSON string bytes -> dense id ---------------- */

typedef struct {
    const char *ptr;
    Py_ssize_t len;
    int32_t id;
} slot;

typedef struct {
    slot *slots;
    size_t cap;     /* power of two */
    int32_t count;
    column order;   /* slot pointers in id order: (ptr, len) pairs */
} interner;

/* Four independent lanes of eight bytes a step (kernel names and shape lists run to
 * hundreds of bytes, and every row has a name): the multiplies of one step do not wait on
 * each other. */
#define HASH_M1 0xFF51AFD7ED558CCDULL
#define HASH_M2 0xC4CEB9FE1A85EC53ULL
static inline uint64_t hash_step(uint64_t h, uint64_t w) {
    h = (h ^ w) * HASH_M1;
    return h ^ (h >> 32);
}

static uint64_t hash_bytes(const char *p, Py_ssize_t n) {
    const Py_ssize_t total = n;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    if (n >= 32) {
        uint64_t h1 = 0x243F6A8885A308D3ULL, h2 = 0x13198A2E03707344ULL,
                 h3 = 0xA4093822299F31D0ULL;
        do {
            uint64_t w0, w1, w2, w3;
            memcpy(&w0, p, 8);
            memcpy(&w1, p + 8, 8);
            memcpy(&w2, p + 16, 8);
            memcpy(&w3, p + 24, 8);
            h = hash_step(h, w0);
            h1 = hash_step(h1, w1);
            h2 = hash_step(h2, w2);
            h3 = hash_step(h3, w3);
            p += 32;
            n -= 32;
        } while (n >= 32);
        h = hash_step(hash_step(hash_step(h, h1), h2), h3);
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = hash_step(h, w);
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n > 0 && total >= 8) { /* the last eight bytes, overlapping the ones hashed */
        memcpy(&w, p + n - 8, 8);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) w |= (uint64_t)(unsigned char)p[i] << (8 * i);
    }
    h = (h ^ w) * HASH_M2;
    return h ^ (h >> 29);
}

static int intern_grow(interner *t) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    slot *slots = calloc(cap, sizeof(slot));
    if (!slots) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].ptr) {
            size_t j = hash_bytes(t->slots[i].ptr, t->slots[i].len) & (cap - 1);
            while (slots[j].ptr) j = (j + 1) & (cap - 1);
            slots[j] = t->slots[i];
        }
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* memcmp(p, lit, n) == 0 for a short n, in a few word compares (overlapping where n is not a
 * multiple of the word): key literals (where n is a constant, the compiler folds their words)
 * and interned names and shape lists, most of them tens of bytes. */
static ALWAYS_INLINE int same_bytes(const char *p, const char *lit, size_t n) {
    if (n >= 8) {
        uint64_t a, b;
        for (size_t i = 0; i + 8 < n; i += 8) {
            memcpy(&a, p + i, 8);
            memcpy(&b, lit + i, 8);
            if (a != b) return 0;
        }
        memcpy(&a, p + n - 8, 8);
        memcpy(&b, lit + n - 8, 8);
        return a == b;
    }
    if (n >= 4) {
        uint32_t a, b, x, y;
        memcpy(&a, p, 4);
        memcpy(&b, lit, 4);
        memcpy(&x, p + n - 4, 4);
        memcpy(&y, lit + n - 4, 4);
        return a == b && x == y;
    }
    for (size_t i = 0; i < n; i++)
        if (p[i] != lit[i]) return 0;
    return 1;
}

/* Id of the string, adding it if new; -2 on memory failure. */
static int32_t intern(interner *t, const char *p, Py_ssize_t n) {
    if ((size_t)(t->count + 1) * 2 > t->cap && intern_grow(t) < 0) return -2;
    size_t j = hash_bytes(p, n) & (t->cap - 1);
    while (t->slots[j].ptr) {
        if (t->slots[j].len == n && same_bytes(t->slots[j].ptr, p, (size_t)n))
            return t->slots[j].id;
        j = (j + 1) & (t->cap - 1);
    }
    t->slots[j].ptr = p;
    t->slots[j].len = n;
    t->slots[j].id = t->count;
    if (col_push(&t->order, &t->slots[j], sizeof(slot)) < 0) return -2;
    return t->count++;
}

/* ---- scanning ---------------------------------------------------------------------------- */

typedef struct {
    const char *p;
    const char *end;
    int escaped; /* the last string scan_string read held a backslash escape */
} cursor;

/* JSON's whitespace; every such byte is at most ' ': one compare turns the others away. */
static inline int is_ws(unsigned char ch) {
    return ch <= ' ' && (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t');
}

static inline void skip_ws(cursor *c) {
    while (c->p < c->end && is_ws((unsigned char)*c->p)) c->p++;
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WORD_SCAN 1
#define BYTES(x) (0x0101010101010101ULL * (x))
/* Offset of the first byte of the 8 at p that is '"', '\\' or a control character; 8 if none.
 * (Each test flags its first matching byte exactly; later flags may be false, never earlier.) */
static inline int first_special(const char *p) {
    uint64_t w, q, b;
    memcpy(&w, p, 8);
    q = w ^ BYTES('"');
    b = w ^ BYTES('\\');
    uint64_t m = (((q - BYTES(1)) & ~q) | ((b - BYTES(1)) & ~b) | ((w - BYTES(0x20)) & ~w)) &
                 BYTES(0x80);
    return m ? __builtin_ctzll(m) >> 3 : 8;
}
#endif

#if defined(__GNUC__) && defined(__SSE2__)
#include <emmintrin.h>
#define VEC_SCAN 1
/* The same for the 16 bytes at p (SSE2, which every x86-64 has); 16 if none. Exact: a byte
 * is flagged iff it is '"', '\\' or at most 0x1f. */
static inline int first_special16(const char *p) {
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    __m128i quote = _mm_cmpeq_epi8(x, _mm_set1_epi8('"'));
    __m128i slash = _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'));
    __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x1f)), x);
    int m = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, slash), control));
    return m ? __builtin_ctz((unsigned)m) : 16;
}
#endif

#if defined(VEC_SCAN) && defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 5)
#include <immintrin.h>
#define WIDE_SCAN 1
/* Past the 32-byte blocks from p on that hold no '"', '\\' or control character (AVX2, where
 * the CPU has it: `wide_scan`); long strings (call stacks, kernel names) go twice as fast. */
__attribute__((target("avx2"))) static const char *plain_blocks32(const char *p,
                                                                 const char *end) {
    const __m256i quote = _mm256_set1_epi8('"'), slash = _mm256_set1_epi8('\\');
    const __m256i low = _mm256_set1_epi8(0x1f);
    while (end - p >= 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)p);
        __m256i m = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi8(x, quote), _mm256_cmpeq_epi8(x, slash)),
            _mm256_cmpeq_epi8(_mm256_min_epu8(x, low), x));
        if (_mm256_movemask_epi8(m)) break;
        p += 32;
    }
    return p;
}
static int wide_scan;
#endif

/* Scan a string starting at its opening quote; set [*s, *s + *n) to its raw content. */
static int scan_string(cursor *c, const char **s, Py_ssize_t *n) {
    if (c->p >= c->end || *c->p != '"') return -1;
    const char *start = ++c->p;
    c->escaped = 0;
    while (c->p < c->end) {
#ifdef VEC_SCAN
        int skip16;
        while (c->end - c->p >= 16 && (skip16 = first_special16(c->p)) == 16) {
            c->p += 16;
#ifdef WIDE_SCAN
            /* past 32 plain bytes, a long string likely: on in blocks of 32 */
            if (wide_scan && c->p - start >= 32) c->p = plain_blocks32(c->p, c->end);
#endif
        }
        if (c->end - c->p >= 16) c->p += skip16;
        else
#endif
        {
#ifdef WORD_SCAN
            int skip;
            while (c->end - c->p >= 8 && (skip = first_special(c->p)) == 8) c->p += 8;
            if (c->end - c->p >= 8) c->p += skip;
#endif
        }
        if (c->p >= c->end) break;
        char ch = *c->p;
        if (ch == '"') {
            *s = start;
            *n = c->p - start;
            c->p++;
            return 0;
        }
        if (ch == '\\') {
            /* only the escapes JSON has: msgspec refuses the others */
            if (c->end - c->p < 2) return -1;
            c->escaped = 1;
            switch (c->p[1]) {
                case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                    c->p += 2;
                    continue;
                case 'u':
                    if (c->end - c->p < 6) return -1;
                    for (int i = 2; i < 6; i++) {
                        char h = c->p[i];
                        if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') ||
                              (h >= 'A' && h <= 'F')))
                            return -1;
                    }
                    c->p += 6;
                    continue;
                default:
                    return -1;
            }
        }
        if ((unsigned char)ch < 0x20) return -1; /* raw control character: invalid JSON */
        c->p++;
    }
    return -1;
}

static int skip_value(cursor *c, int depth);

static int skip_container(cursor *c, char close, int depth) {
    if (depth > MAX_DEPTH) return -1;
    c->p++; /* past the opener */
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    for (;;) {
        if (close == '}') {
            const char *k;
            Py_ssize_t kn;
            skip_ws(c);
            if (scan_string(c, &k, &kn) < 0) return -1;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') return -1;
            c->p++;
        }
        skip_ws(c);
        if (skip_value(c, depth + 1) < 0) return -1;
        skip_ws(c);
        if (c->p >= c->end) return -1;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == close) {
            c->p++;
            return 0;
        }
        return -1;
    }
}

static inline int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* A JSON number, by JSON's grammar (no leading zeros, digits after '.' and after 'e'). */
static int skip_number(cursor *c) {
    if (c->p < c->end && *c->p == '-') c->p++;
    if (c->p >= c->end || !is_digit(*c->p)) return -1;
    if (*c->p == '0') {
        c->p++;
    } else {
        while (c->p < c->end && is_digit(*c->p)) c->p++;
    }
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (c->p >= c->end || !is_digit(*c->p)) return -1;
        while (c->p < c->end && is_digit(*c->p)) c->p++;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        if (c->p >= c->end || !is_digit(*c->p)) return -1;
        while (c->p < c->end && is_digit(*c->p)) c->p++;
    }
    return 0;
}

/* A shape list as Kineto writes them: arrays (nested at most SHAPE_DEPTH deep) of integers
 * without sign, fraction or exponent and of strings without escapes, with any whitespace,
 * skipped in one loop: 1 when skipped (the cursor past it), 0 when the list holds anything
 * else or ends early (the cursor where it was, for the general way to accept or refuse). Each
 * list it skips, skip_value skips to the same end. */
#define SHAPE_DEPTH 8
static int skip_shape_list(cursor *c) {
    const char *p = c->p, *end = c->end;
    int depth = 0;
    int expect = 0; /* 0: a value or ']' (after '['); 1: a value (after ','); 2: ',' or ']' */
    for (;;) {
        if (p >= end) return 0;
        unsigned char ch = (unsigned char)*p;
        if (is_ws(ch)) {
            p++;
            continue;
        }
        if (ch == ']') {
            if (expect == 1 || depth == 0) return 0;
            p++;
            if (--depth == 0) {
                c->p = p;
                return 1;
            }
            expect = 2;
            continue;
        }
        if (expect == 2) {
            if (ch != ',') return 0;
            p++;
            expect = 1;
            continue;
        }
        if (ch == '[') {
            if (++depth > SHAPE_DEPTH) return 0;
            p++;
            expect = 0;
            continue;
        }
        if (depth == 0) return 0;
        if (ch >= '0' && ch <= '9') { /* "01": the "1" where ',' or ']' belongs ends it */
            p++;
            if (ch != '0')
                while (p < end && is_digit(*p)) p++;
            if (p >= end || *p == '.' || *p == 'e' || *p == 'E') return 0;
            expect = 2;
            continue;
        }
        if (ch == '"') {
            cursor t = {p, end, 0};
            const char *text;
            Py_ssize_t n;
            if (scan_string(&t, &text, &n) < 0 || t.escaped) return 0;
            p = t.p;
            expect = 2;
            continue;
        }
        return 0;
    }
}

static int skip_literal(cursor *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return -1;
    c->p += n;
    return 0;
}

static int skip_value(cursor *c, int depth) {
    if (c->p >= c->end) return -1;
    switch (*c->p) {
        case '"': {
            const char *s;
            Py_ssize_t n;
            return scan_string(c, &s, &n);
        }
        case '{':
            return skip_container(c, '}', depth);
        case '[':
            return skip_container(c, ']', depth);
        case 't':
            return skip_literal(c, "true", 4);
        case 'f':
            return skip_literal(c, "false", 5);
        case 'n':
            return skip_literal(c, "null", 4);
        default:
            return skip_number(c);
    }
}

/* The run of decimal digits at c->p, at most `max` of them (max <= 18), into *out; the
 * count read, or -1 where the run is longer than `max`. Eight bytes at a time where eight
 * are left: a byte b is a digit iff its high nibble is 3 and that of b + 6 is too; adding 6
 * to every byte can carry only into later bytes, so the first non-digit is found exactly. */
static inline int scan_digits(cursor *c, int max, uint64_t *out) {
    static const uint64_t POW10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                      100000000};
    uint64_t v = 0;
    int n = 0;
#ifdef WORD_SCAN
    while (c->end - c->p >= 8) {
        uint64_t w;
        memcpy(&w, c->p, 8);
        uint64_t odd = ((w & BYTES(0xF0)) ^ BYTES(0x30)) |
                       (((w + BYTES(0x06)) & BYTES(0xF0)) ^ BYTES(0x30));
        int k = odd ? __builtin_ctzll(odd) >> 3 : 8;
        if (k == 0) break;
        if (n + k > max) return -1;
        /* the k digits to the top bytes (the first the lowest), zeros below: eight digits
         * with leading zeros, combined pairwise, then by fours, then by eights */
        uint64_t d = (w << (8 * (8 - k))) & BYTES(0x0F);
        d = (d * 2561) >> 8;
        d = ((d & 0x00FF00FF00FF00FFULL) * 6553601) >> 16;
        d = ((d & 0x0000FFFF0000FFFFULL) * 42949672960001ULL) >> 32;
        v = v * POW10[k] + d;
        n += k;
        c->p += k;
        if (k < 8) {
            *out = v;
            return n;
        }
    }
#endif
    while (c->p < c->end && is_digit(*c->p)) {
        if (n >= max) return -1;
        v = v * 10 + (uint64_t)(*c->p - '0');
        n++;
        c->p++;
    }
    *out = v;
    return n;
}

/* A JSON integer (no fraction, no exponent) into int64; -1 if it is anything else. */
static ALWAYS_INLINE int scan_int(cursor *c, int64_t *out) {
    int neg = 0;
    if (c->p < c->end && *c->p == '-') {
        neg = 1;
        c->p++;
    }
    uint64_t v;
    if (c->end - c->p >= 2 && c->p[0] == '0' && is_digit(c->p[1])) return -1; /* "01" */
    /* more than 18 digits could overflow: the slow path decides */
    if (scan_digits(c, 18, &v) <= 0) return -1;
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E')) return -1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* A JSON number of microseconds into exact integer nanoseconds, digits below 1 ns dropped
 * (toward zero). Exponents and out-of-range values are refused (-1). */
static ALWAYS_INLINE int scan_us(cursor *c, int64_t *out) {
    int neg = 0;
    if (c->p < c->end && *c->p == '-') {
        neg = 1;
        c->p++;
    }
    uint64_t whole;
    if (c->end - c->p >= 2 && c->p[0] == '0' && is_digit(c->p[1])) return -1; /* "01" */
    if (scan_digits(c, 16, &whole) <= 0) return -1;
    uint64_t frac = 0;
    int frac_digits = 0;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        const char *fstart = c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (frac_digits < 3) {
                frac = frac * 10 + (uint64_t)(*c->p - '0');
                frac_digits++;
            }
            c->p++;
        }
        if (c->p == fstart) return -1;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) return -1;
    while (frac_digits < 3) {
        frac *= 10;
        frac_digits++;
    }
    /* 2**63 - 1 ns is 9223372036854775.807 us */
    if (whole > 9223372036854774ULL) return -1;
    int64_t ns = (int64_t)(whole * 1000 + frac);
    *out = neg ? -ns : ns;
    return 0;
}

/* pid, tid and flow id: an integer, or a string label (interned). */
static int scan_id(cursor *c, interner *labels, int64_t *value, int32_t *label) {
    if (c->p < c->end && *c->p == '"') {
        const char *s;
        Py_ssize_t n;
        if (scan_string(c, &s, &n) < 0) return -1;
        int32_t id = intern(labels, s, n);
        if (id < 0) return -1;
        *label = id;
        *value = NO_ID;
        return 0;
    }
    *label = NO_ID;
    return scan_int(c, value);
}

/* Where the key at c->p (at its opening quote) is the text `lit` (given with its closing
 * quote): move past it and be true. Bytes are compared, so a match is that key exactly (no
 * literal holds a backslash); an escaped spelling of the same key does not match and takes
 * the general way (scan_string), which refuses it. */
#define TAKE_KEY(c, lit)                                   \
    ((c)->end - (c)->p > (Py_ssize_t)(sizeof(lit) - 1) && \
     same_bytes((c)->p + 1, (lit), sizeof(lit) - 1) && ((c)->p += sizeof(lit), 1))


/* The keys of an event that the scanner reads; EK_OTHER for any other (its value skipped). */
enum { EK_OTHER, EK_PH, EK_CAT, EK_NAME, EK_PID, EK_TID, EK_ID, EK_TS, EK_DUR, EK_ARGS,
       EK_SAME /* skipped, and an event kind repeats it (learnt with its layout) */ };

/* The key of an event's member, the cursor moved past its closing quote; -1 where it is not
 * a string, or an escaped one (msgspec decodes those). Kineto's keys are matched as they
 * stand, without scanning the string first; any other key is scanned (EK_OTHER). */
static int event_key(cursor *c) {
    if (c->p >= c->end || *c->p != '"') return -1;
    if (c->end - c->p > 1) {
        switch (c->p[1]) {
            case 'p':
                if (TAKE_KEY(c, "ph\"")) return EK_PH;
                if (TAKE_KEY(c, "pid\"")) return EK_PID;
                break;
            case 't':
                if (TAKE_KEY(c, "ts\"")) return EK_TS;
                if (TAKE_KEY(c, "tid\"")) return EK_TID;
                break;
            case 'n':
                if (TAKE_KEY(c, "name\"")) return EK_NAME;
                break;
            case 'c':
                if (TAKE_KEY(c, "cat\"")) return EK_CAT;
                break;
            case 'd':
                if (TAKE_KEY(c, "dur\"")) return EK_DUR;
                break;
            case 'i':
                if (TAKE_KEY(c, "id\"")) return EK_ID;
                break;
            case 'a':
                if (TAKE_KEY(c, "args\"")) return EK_ARGS;
                break;
            case 's':
                if (TAKE_KEY(c, "s\"")) return EK_SAME;
                break;
            case 'b':
                if (TAKE_KEY(c, "bp\"")) return EK_SAME;
                break;
        }
    }
    const char *k;
    Py_ssize_t kn;
    if (scan_string(c, &k, &kn) < 0 || c->escaped) return -1;
    return EK_OTHER; /* every key read above has matched as it stands */
}

/* The keys of an event's args that the scanner reads; AK_OTHER for any other, AK_SAME for
 * one whose value it skips and an event kind repeats (learnt with its layout). */
enum { AK_OTHER, AK_DEVICE, AK_STREAM, AK_CORRELATION, AK_EXT, AK_EXT_LOWER, AK_BYTES,
       AK_ALLOC_BYTES, AK_TOTAL_ALLOCATED, AK_TOTAL_RESERVED, AK_DEVICE_ID, AK_DEVICE_TYPE,
       AK_SEQ, AK_FWD, AK_COLL, AK_DIMS, AK_TYPES, AK_STRIDES, AK_CONCRETE, AK_SAME };

/* The key of an args member, as event_key does it. Kineto's other frequent keys (kernel
 * launch facts, Python ids, trace names) are matched too, to skip scanning them. */
static int args_key(cursor *c) {
    if (c->p >= c->end || *c->p != '"') return -1;
    if (c->end - c->p > 1) {
        switch (c->p[1]) {
            case 'd':
                if (TAKE_KEY(c, "device\"")) return AK_DEVICE;
                break;
            case 's':
                if (TAKE_KEY(c, "stream\"")) return AK_STREAM;
                if (TAKE_KEY(c, "shared memory\"")) return AK_OTHER;
                break;
            case 'c':
                if (TAKE_KEY(c, "correlation\"")) return AK_CORRELATION;
                if (TAKE_KEY(c, "cbid\"")) return AK_SAME;
                if (TAKE_KEY(c, "context\"")) return AK_SAME;
                break;
            case 'E':
                if (TAKE_KEY(c, "External id\"")) return AK_EXT;
                if (TAKE_KEY(c, "Ev Idx\"")) return AK_OTHER;
                break;
            case 'e':
                if (TAKE_KEY(c, "external id\"")) return AK_EXT_LOWER;
                if (TAKE_KEY(c, "external ts\"")) return AK_OTHER;
                if (TAKE_KEY(c, "est. achieved occupancy %\"")) return AK_OTHER;
                break;
            case 'b':
                if (TAKE_KEY(c, "bytes\"")) return AK_BYTES;
                if (TAKE_KEY(c, "blocks per SM\"")) return AK_OTHER;
                if (TAKE_KEY(c, "block\"")) return AK_OTHER;
                break;
            case 'B':
                if (TAKE_KEY(c, "Bytes\"")) return AK_ALLOC_BYTES;
                break;
            case 'T':
                if (TAKE_KEY(c, "Total Allocated\"")) return AK_TOTAL_ALLOCATED;
                if (TAKE_KEY(c, "Total Reserved\"")) return AK_TOTAL_RESERVED;
                if (TAKE_KEY(c, "Trace name\"")) return AK_SAME;
                if (TAKE_KEY(c, "Trace iteration\"")) return AK_SAME;
                break;
            case 'D':
                if (TAKE_KEY(c, "Device Id\"")) return AK_DEVICE_ID;
                if (TAKE_KEY(c, "Device Type\"")) return AK_DEVICE_TYPE;
                if (TAKE_KEY(c, "Device\"")) return AK_SAME;
                break;
            case 'S':
                if (TAKE_KEY(c, "Sequence number\"")) return AK_SEQ;
                break;
            case 'F':
                if (TAKE_KEY(c, "Fwd thread id\"")) return AK_FWD;
                break;
            case 'C':
                if (TAKE_KEY(c, "Collective name\"")) return AK_COLL;
                if (TAKE_KEY(c, "Concrete Inputs\"")) return AK_CONCRETE;
                if (TAKE_KEY(c, "Call stack\"")) return AK_OTHER;
                break;
            case 'w':
                if (TAKE_KEY(c, "wait_on_stream\"")) return AK_COLL;
                if (TAKE_KEY(c, "wait_on_cuda_event_record_corr_id\"")) return AK_COLL;
                if (TAKE_KEY(c, "warps per SM\"")) return AK_OTHER;
                break;
            case 'I':
                if (TAKE_KEY(c, "Input Dims\"")) return AK_DIMS;
                if (TAKE_KEY(c, "Input type\"")) return AK_TYPES;
                if (TAKE_KEY(c, "Input Strides\"")) return AK_STRIDES;
                break;
            case 'q':
                if (TAKE_KEY(c, "queued\"")) return AK_SAME;
                break;
            case 'r':
                if (TAKE_KEY(c, "registers per thread\"")) return AK_OTHER;
                break;
            case 'g':
                if (TAKE_KEY(c, "grid\"")) return AK_OTHER;
                break;
            case 'P':
                if (TAKE_KEY(c, "Python id\"")) return AK_OTHER;
                if (TAKE_KEY(c, "Python parent id\"")) return AK_OTHER;
                break;
            case 'R':
                if (TAKE_KEY(c, "Record function id\"")) return AK_SAME;
                break;
        }
    }
    const char *k;
    Py_ssize_t kn;
    if (scan_string(c, &k, &kn) < 0 || c->escaped) return -1;
    return AK_OTHER; /* every key read above has matched as it stands */
}

typedef struct {
    int64_t device, stream, correlation, ext, ext_lower, bytes, alloc_bytes, total_allocated,
        total_reserved, device_id, device_type;
} args_t;

/* Shape arguments of an op (record_shapes=True): the spans of the four lists in the input
 * (NULL: absent, or not a list), and the two integers (NO_ID: absent). */
enum { OP_DIMS, OP_TYPES, OP_STRIDES, OP_CONCRETE, N_OP_LISTS };

typedef struct {
    const char *ptr[N_OP_LISTS];
    Py_ssize_t len[N_OP_LISTS];
    int64_t seq, fwd;
} op_t;

static const op_t NO_OP = {{NULL, NULL, NULL, NULL}, {0, 0, 0, 0}, NO_ID, NO_ID};

enum { COL_PHASE, COL_CAT, COL_NAME, COL_PID, COL_PID_LABEL, COL_TID, COL_TID_LABEL, COL_TS,
       COL_HAS_TS, COL_DUR, COL_HAS_DUR, COL_ID, COL_ID_LABEL, COL_DEVICE, COL_STREAM,
       COL_CORRELATION, COL_EXT, COL_EXT_LOWER, COL_BYTES, COL_ALLOC_BYTES,
       COL_TOTAL_ALLOCATED, COL_TOTAL_RESERVED, COL_DEVICE_ID, COL_DEVICE_TYPE,
       COL_META_ROW, COL_META_OFF, COL_META_LEN, COL_OP_ROW, COL_OP_DIMS, COL_OP_TYPES,
       COL_OP_STRIDES, COL_OP_CONCRETE, COL_OP_SEQ, COL_OP_FWD, N_COLS };

/* Bytes per row of each column, in enum order. */
static const unsigned char COL_SIZE[N_COLS] = {
    1, 4, 4, 8, 4, 8, 4, 8, 1, 8, 1, 8, 4,  /* phase .. id_label */
    8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,        /* device .. device_type */
    8, 8, 8,                                /* meta_row, meta_off, meta_len */
    8, 4, 4, 4, 4, 8, 8};                   /* op_row .. op_fwd */

/* The columns every kept row fills (phase .. device_type): written at the row's index, with
 * one check for room per row; their `len` is set from `rows` when read (rows_done). */
#define N_ROW_COLS COL_META_ROW

/* Row columns that most rows leave NO_ID (string labels, flow ids, the allocator's and the
 * copies' args): a row writes one only where it holds a value, after filling the rows since
 * the last written with NO_ID (whose bytes are all 0xFF) in one run; rows_done fills the rest.
 * Most rows then write 13 of the 24 row columns one by one, the other 11 filled in runs. */
#define RARE_COLS                                                                          \
    ((1u << COL_PID_LABEL) | (1u << COL_TID_LABEL) | (1u << COL_ID) | (1u << COL_ID_LABEL) | \
     (1u << COL_EXT_LOWER) | (1u << COL_BYTES) | (1u << COL_ALLOC_BYTES) |                  \
     (1u << COL_TOTAL_ALLOCATED) | (1u << COL_TOTAL_RESERVED) | (1u << COL_DEVICE_ID) |     \
     (1u << COL_DEVICE_TYPE))

/* ---- layouts: the bytes between an event's values, learnt and matched ------------------ *
 *
 * Kineto writes every event of a kind alike: the same keys in the same order, with the same
 * punctuation and whitespace between them; only the values differ. An event is a sequence
 * of steps, each the literal bytes up to a value (`,"ts":`, with any whitespace) and what to
 * do with the value there (its action: the key's, as the general way reads it). Each event
 * that the general way reads is recorded as such a sequence and added to a trie of the
 * layouts seen in the piece; the next event is matched against the trie first: compare a
 * step's literal, read its value by its action, go on with the children of that step.
 *
 * Matched, an event is read as the general way reads it, exactly: the literal bytes are the
 * ones the general way skips or matches as keys (whitespace, punctuation, key strings), and
 * each value is read by the same function, from the same byte, with the same key. Where a
 * literal does not match or a value's read fails, the event is read again from its start the
 * general way (which decides what to accept and what to refuse), so a layout never changes
 * what is accepted. */

/* Actions: a top-level key (EK_*, below 32), an args key (32 + AK_*), and three more. */
enum { ACT_ARGS = 32, ACT_ARGS_OPEN = 64, ACT_ARGS_CLOSE, ACT_END };

#define MAX_STEPS 96           /* steps recorded per event; an event with more adds none */
#define MAX_LAYOUT_NODES 4096  /* trie nodes per piece; once full, no layout is added */
#define N_SHORTS 4             /* children too short for a node's window, tried by name */
#define MAX_LAYOUT_BYTES 65536 /* literal bytes per piece */
#define MAX_LITERAL 1024       /* longer literals are not learnt */
#define MAX_MISSES 256         /* misses a piece allows before it stops matching (at 20 %) */

/* Values that an event kind repeats ("ph", "cat", "pid", "tid", the args' "device",
 * "stream", "Fwd thread id", "Device Type", "Device Id", and the EK_SAME and AK_SAME keys,
 * which set nothing) are learnt with the bytes around them: the
 * literal runs through the value, and the node keeps what the value read into (the same
 * bytes read the same way give the same value: the interners are the piece's, as the trie
 * is). */
enum { CONST_PH = 1, CONST_CAT = 2, CONST_PID = 4, CONST_TID = 8, CONST_DEVICE = 16,
       CONST_STREAM = 32, CONST_FWD = 64, CONST_SAME = 128, CONST_DEVICE_TYPE = 256,
       CONST_DEVICE_ID = 512 };
#define MAX_CONST_VALUE 64 /* longer values are read, not learnt */

/* An args object's start ('{') and end (past its '}') are learnt within a literal as well:
 * the node marks them (at open_at and close_at in its literal), unless an args value learnt
 * before the start in the same literal would have to be set before the start resets it. */
enum { MARK_OPEN = 1, MARK_CLOSE = 2 };
#define ARGS_CONSTS \
    (CONST_DEVICE | CONST_STREAM | CONST_FWD | CONST_SAME | CONST_DEVICE_TYPE | CONST_DEVICE_ID)

typedef struct {
    uint32_t off;    /* the literal: its offset in the arena and its length */
    uint16_t len;
    uint8_t action;
    uint16_t consts; /* CONST_*: the values the literal holds */
    uint8_t marks;   /* MARK_*: where args open and close within the literal */
    uint8_t reindexed; /* child tables built again for a new child that shared a hash */
    uint16_t tail;   /* movemask bits of the literal's last (partial) 16 bytes */
    int16_t open_at, close_at;
    int32_t child;   /* first child, -1: none */
    int32_t sibling; /* next sibling, -1: none */
    int32_t phase, cat, pid_label, tid_label;
    int64_t pid, tid, device, stream, fwd, device_type, device_id;
    int32_t table;   /* with two children or more: its child table, -1: none */
    uint32_t apart;  /* where the window of up to 8 bytes that tells its children apart */
    uint64_t window; /* begins, and the mask of its bytes */
    int16_t shorts[N_SHORTS]; /* children whose literal ends before the window (-1: none) */
    uint32_t children;        /* how many it has */
    uint32_t least;      /* the table holds children of at least this many bytes only */
} lnode;

/* A node's children by a hash of their literal's bytes in its window: the first child with
 * that hash (-1: none), tried before the others, so that an event picks its layout among
 * many in one compare. */
#define WINDOW_HASH(w) ((unsigned)(((w) * 0x9E3779B97F4A7C15ULL) >> 56))
#define MAX_TABLES 256
typedef int16_t child_table[256];

typedef struct {
    const char *start, *end; /* where its value lies (start == end: nothing read) */
    int action;
} step;

/* An op's shape lists repeat with its name: the text a name's list had last, and its id. A
 * list at the cursor that begins with that text (a whole JSON array) is that text. */
typedef struct {
    const char *ptr;
    Py_ssize_t len;
    int32_t id;
} list_memo;

typedef struct {
    column cols[N_COLS];
    interner strings; /* cat and name */
    interner labels;  /* string pid/tid/id */
    interner values;  /* raw texts of the shape-argument lists of kept rows */
    Py_ssize_t seen;
    const char *base; /* start of the input: meta_off counts from here */
    size_t rows;      /* kept rows */
    size_t room;      /* rows the row columns hold without growing */
    size_t written[N_ROW_COLS]; /* of a RARE_COLS column: rows below this one are written */
    lnode *nodes;     /* layout trie: node 0 is its root (no literal) */
    int32_t n_nodes;
    char *arena;      /* literal bytes (+ 16 spare, for 16-byte loads) */
    size_t arena_len;
    int layouts_full; /* no more layouts are added (full, or out of memory) */
    int layouts_off;  /* no more events are matched: most did not match */
    Py_ssize_t matched, missed;
    Py_ssize_t searched; /* steps whose child was found among all children, one by one */
    child_table *tables;
    int32_t n_tables;
    list_memo *memo; /* per name id, per shape list: the list text it had last */
    size_t memo_names;
    step steps[MAX_STEPS];
    int n_steps;      /* recorded steps of the event read the general way; -1: too many */
} scan_state;

/* A RARE_COLS column's rows from its last written up to row r (not included) set to NO_ID. */
static inline void fill_rare(scan_state *st, int col, size_t r) {
    size_t from = st->written[col];
    if (from < r) {
        memset(st->cols[col].data + from * COL_SIZE[col], 0xFF, (r - from) * COL_SIZE[col]);
        st->written[col] = r;
    }
}

/* Set the row columns' `len` from the rows kept (every row of the rare ones written). */
static void rows_done(scan_state *st) {
    for (int i = 0; i < N_ROW_COLS; i++) {
        if (RARE_COLS & (1u << i)) fill_rare(st, i, st->rows);
        st->cols[i].len = st->rows * COL_SIZE[i];
    }
}

/* Room for one more row in every row column; st->room rows then fit. */
static int row_room(scan_state *st) {
    size_t room = SIZE_MAX;
    rows_done(st);
    for (int i = 0; i < N_ROW_COLS; i++) {
        column *c = &st->cols[i];
        if (c->len + COL_SIZE[i] > c->cap && col_grow(c, COL_SIZE[i]) < 0) return -1;
        if (c->cap / COL_SIZE[i] < room) room = c->cap / COL_SIZE[i];
    }
    st->room = room;
    return 0;
}

static int phase_code(const char *s, Py_ssize_t n) {
    if (n != 1) return -1;
    switch (s[0]) {
        case 'X': return 0;
        case 's': return 1;
        case 'f': return 2;
        case 't': return 3;
        case 'i':
        case 'I': return 4; /* instant: kept only for allocator events */
        default: return -1;
    }
}

/* Whether events are matched against learnt layouts, shape lists taken as remembered and
 * skipped by skip_shape_list (BADPUT_NO_LAYOUTS: never, to compare the result with). */
static int use_layouts = 1;

/* What an event's members set, read either way. */
typedef struct {
    int phase; /* -2: no "ph" */
    int32_t cat, name, pid_label, tid_label, id_label;
    int64_t pid, tid, ts, dur, id;
    int8_t has_ts, has_dur;
    args_t a;
    op_t op;
    const char *name_ptr;
    Py_ssize_t name_len;
    const char *args_ptr;
    int64_t args_len;
    int has_coll;
    int op_known;                 /* bit i: op_ids[i] is shape list i's id (remembered) */
    int32_t op_ids[N_OP_LISTS];
} event_t;

static const args_t NO_ARGS = {NO_ID, NO_ID, NO_ID, NO_ID, NO_ID, NO_ID,
                               NO_ID, NO_ID, NO_ID, NO_ID, NO_ID};

static void event_init(event_t *e) {
    e->phase = -2;
    e->cat = e->name = e->pid_label = e->tid_label = e->id_label = NO_ID;
    e->pid = e->tid = e->id = NO_ID;
    e->ts = e->dur = 0;
    e->has_ts = e->has_dur = 0;
    e->a = NO_ARGS;
    e->op = NO_OP;
    e->name_ptr = NULL;
    e->name_len = 0;
    e->args_ptr = NULL;
    e->args_len = 0;
    e->has_coll = 0;
    e->op_known = 0;
}

/* The value of a top-level member (not "args") at c->p, by its key. */
static ALWAYS_INLINE int event_member(cursor *c, scan_state *st, event_t *e, int key) {
    switch (key) {
        case EK_PH: {
            const char *s;
            Py_ssize_t n;
            if (scan_string(c, &s, &n) < 0) return -1;
            e->phase = phase_code(s, n);
            return 0;
        }
        case EK_CAT:
        case EK_NAME: {
            const char *s;
            Py_ssize_t n;
            if (scan_string(c, &s, &n) < 0) return -1; /* null or a number: refused */
            int32_t v = intern(&st->strings, s, n);
            if (v < 0) return -1;
            if (key == EK_CAT) {
                e->cat = v;
            } else {
                e->name = v;
                e->name_ptr = s;
                e->name_len = n;
            }
            return 0;
        }
        case EK_PID:
            return scan_id(c, &st->labels, &e->pid, &e->pid_label);
        case EK_TID:
            return scan_id(c, &st->labels, &e->tid, &e->tid_label);
        case EK_ID:
            return scan_id(c, &st->labels, &e->id, &e->id_label);
        case EK_TS:
            e->has_ts = 1;
            return scan_us(c, &e->ts);
        case EK_DUR:
            e->has_dur = 1;
            return scan_us(c, &e->dur);
        default:
            return skip_value(c, 1);
    }
}

/* A string where the "stream" arg is read. The complete path reads an integer arg's string
 * as its integer where it is ASCII digits (a '-', spaces around) and as no value (NO_ID)
 * otherwise. A string holding a printable ASCII byte no such text holds (ROCm writes "0x0"
 * for a runtime call's stream) is no integer: NO_ID here too. Any other string (digits, an
 * escape, other bytes) is refused: the complete path reads it. */
static int scan_stream_text(cursor *c, int64_t *out) {
    const char *p = c->p + 1;
    int other = 0;
    while (p < c->end && *p != '"') {
        unsigned char b = (unsigned char)*p;
        if (b == '\\' || b < 0x20) return -1;
        if (b >= 0x21 && b <= 0x7e && !(b >= '0' && b <= '9') && b != '-') other = 1;
        p++;
    }
    if (p >= c->end || !other) return -1;
    c->p = p + 1;
    *out = NO_ID;
    return 0;
}

/* The value of an args member at c->p, by its key. has_coll is set for a "Collective name"
 * key (NCCL metadata) or a key that names the record a cuda_sync row waited on. */
static ALWAYS_INLINE int args_member(cursor *c, scan_state *st, event_t *e, int key) {
    int64_t *target = NULL;
    switch (key) {
        case AK_DEVICE: target = &e->a.device; break;
        case AK_STREAM: target = &e->a.stream; break;
        case AK_CORRELATION: target = &e->a.correlation; break;
        case AK_EXT: target = &e->a.ext; break;
        case AK_EXT_LOWER: target = &e->a.ext_lower; break;
        case AK_BYTES: target = &e->a.bytes; break;
        case AK_ALLOC_BYTES: target = &e->a.alloc_bytes; break;
        case AK_TOTAL_ALLOCATED: target = &e->a.total_allocated; break;
        case AK_TOTAL_RESERVED: target = &e->a.total_reserved; break;
        case AK_DEVICE_ID: target = &e->a.device_id; break;
        case AK_DEVICE_TYPE: target = &e->a.device_type; break;
        case AK_SEQ: target = &e->op.seq; break;
        case AK_FWD: target = &e->op.fwd; break;
    }
    if (target) {
        if (key == AK_STREAM && c->p < c->end && *c->p == '"') return scan_stream_text(c, target);
        return scan_int(c, target);
    }
    int list = key == AK_DIMS       ? OP_DIMS
               : key == AK_TYPES    ? OP_TYPES
               : key == AK_STRIDES  ? OP_STRIDES
               : key == AK_CONCRETE ? OP_CONCRETE
                                    : -1;
    const char *start = c->p;
    if (list >= 0 && use_layouts && e->name >= 0 && (size_t)e->name < st->memo_names) {
        const list_memo *m = &st->memo[(size_t)e->name * N_OP_LISTS + list];
        if (m->ptr && (size_t)(c->end - c->p) >= (size_t)m->len &&
            same_bytes(c->p, m->ptr, (size_t)m->len)) {
            c->p += m->len;
            e->op.ptr[list] = start;
            e->op.len[list] = m->len;
            e->op_ids[list] = m->id;
            e->op_known |= 1 << list;
            return 0;
        }
    }
    if (key == AK_COLL) e->has_coll = 1;
    if (!(list >= 0 && use_layouts && skip_shape_list(c)) && skip_value(c, 2) < 0) return -1;
    if (list >= 0) { /* a repeated key: the last one counts, as in msgspec */
        e->op.ptr[list] = *start == '[' ? start : NULL;
        e->op.len[list] = c->p - start;
        e->op_known &= ~(1 << list);
    }
    return 0;
}

/* Record a step of the event read the general way. */
static ALWAYS_INLINE void record(scan_state *st, const char *start, const char *end, int action) {
    if (st->n_steps < 0) return;
    if (st->n_steps == MAX_STEPS) {
        st->n_steps = -1;
        return;
    }
    step *s = &st->steps[st->n_steps++];
    s->start = start;
    s->end = end;
    s->action = action;
}

/* The members of an object, the general way: object_open past its '{' (1: "{}", closed at
 * once, the cursor past it), member_colon past the ':' between a key and its value (with the
 * whitespace around it), member_next past the ',' (0) or the '}' (1) after a value; -1 where
 * the text is not that. */
static ALWAYS_INLINE int object_open(cursor *c) {
    if (c->p >= c->end || *c->p != '{') return -1;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 1;
    }
    return 0;
}

static ALWAYS_INLINE int member_colon(cursor *c) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    skip_ws(c);
    return 0;
}

static ALWAYS_INLINE int member_next(cursor *c) {
    skip_ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == ',') {
        c->p++;
        return 0;
    }
    if (*c->p == '}') {
        c->p++;
        return 1;
    }
    return -1;
}

/* The args object at c->p, the general way. */
static int scan_args(cursor *c, scan_state *st, event_t *e) {
    int rc = object_open(c);
    while (rc == 0) {
        skip_ws(c);
        int key = args_key(c);
        if (key < 0 || member_colon(c) < 0) return -1;
        const char *v = c->p;
        if (args_member(c, st, e, key) < 0) return -1;
        record(st, v, c->p, ACT_ARGS + key);
        rc = member_next(c);
    }
    return rc < 0 ? -1 : 0;
}

/* Start of the args object at p: a repeated "args" key, the last one counts, as in msgspec. */
static ALWAYS_INLINE void args_open(event_t *e, const char *p) {
    e->args_ptr = p;
    e->has_coll = 0;
    e->a = NO_ARGS;
    e->op = NO_OP;
    e->op_known = 0;
}

/* One event object at c->p ('{'), the general way, its steps recorded. */
static int parse_event(cursor *c, scan_state *st, event_t *e) {
    int rc = object_open(c);
    while (rc == 0) {
        skip_ws(c);
        int key = event_key(c);
        if (key < 0 || member_colon(c) < 0) return -1;
        const char *v = c->p;
        if (key == EK_ARGS) {
            record(st, v, v, ACT_ARGS_OPEN);
            args_open(e, v);
            if (scan_args(c, st, e) < 0) return -1;
            e->args_len = (int64_t)(c->p - v);
            record(st, c->p, c->p, ACT_ARGS_CLOSE);
        } else {
            if (event_member(c, st, e, key) < 0) return -1;
            record(st, v, c->p, key);
        }
        rc = member_next(c);
    }
    return rc < 0 ? -1 : 0;
}

/* Whether the bytes at p (before end) are node n's literal (16 readable bytes past its end:
 * the arena's spare). Sixteen bytes at a time where the input has them. */
static ALWAYS_INLINE int literal_at(const char *p, const char *end, const char *arena,
                                    const lnode *n) {
    size_t left = (size_t)(end - p), len = n->len;
    const char *lit = arena + n->off;
#ifdef VEC_SCAN
    if (left >= len + 16) {
        size_t i = 0;
        for (; i + 16 < len; i += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i y = _mm_loadu_si128((const __m128i *)(lit + i));
            if (_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) != 0xFFFF) return 0;
        }
        __m128i x = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i y = _mm_loadu_si128((const __m128i *)(lit + i));
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, y));
        return (m & n->tail) == n->tail;
    }
#endif
    return left >= len && memcmp(p, lit, len) == 0;
}

/* What the values learnt with a node's literal read into. */
static ALWAYS_INLINE void apply_consts(const lnode *n, event_t *e) {
    unsigned k = n->consts;
    if (k & CONST_PH) e->phase = n->phase;
    if (k & CONST_CAT) e->cat = n->cat;
    if (k & CONST_PID) {
        e->pid = n->pid;
        e->pid_label = n->pid_label;
    }
    if (k & CONST_TID) {
        e->tid = n->tid;
        e->tid_label = n->tid_label;
    }
    if (k & CONST_DEVICE) e->a.device = n->device;
    if (k & CONST_STREAM) e->a.stream = n->stream;
    if (k & CONST_FWD) e->op.fwd = n->fwd;
    if (k & CONST_DEVICE_TYPE) e->a.device_type = n->device_type;
    if (k & CONST_DEVICE_ID) e->a.device_id = n->device_id;
}

/* The event at c->p ('{') by a learnt layout: 1 when one matched it whole (the cursor past
 * it), 0 when none did (e is then partly set, the cursor anywhere in the event). */
static int match_event(cursor *c, scan_state *st, event_t *e) {
    const lnode *nodes = st->nodes;
    const char *arena = st->arena;
    int32_t at = 0;
    for (;;) {
        const lnode *parent = &nodes[at];
        int32_t k = parent->child; /* the one child, or the table's pick among many */
        if (parent->table >= 0 && (size_t)(c->end - c->p) >= parent->apart + 8) {
            uint64_t w;
            memcpy(&w, c->p + parent->apart, 8);
            k = st->tables[parent->table][WINDOW_HASH(w & parent->window)];
        }
        if (k < 0 || !literal_at(c->p, c->end, arena, &nodes[k])) {
            k = -1;
            for (int i = 0; i < N_SHORTS && parent->shorts[i] >= 0; i++) {
                if (literal_at(c->p, c->end, arena, &nodes[parent->shorts[i]])) {
                    k = parent->shorts[i];
                    break;
                }
            }
            if (k < 0) { /* a child whose window's hash another took first, or none */
                st->searched++;
                k = parent->child;
                while (k >= 0 && !literal_at(c->p, c->end, arena, &nodes[k])) k = nodes[k].sibling;
                if (k < 0) return 0;
            }
        }
        const lnode *n = &nodes[k];
        const char *literal = c->p;
        c->p += n->len;
        if (n->consts | n->marks) {
            if (n->marks & MARK_OPEN) args_open(e, literal + n->open_at);
            if (n->consts) apply_consts(n, e);
            if (n->marks & MARK_CLOSE)
                e->args_len = (int64_t)(literal + n->close_at - e->args_ptr);
        }
        int action = n->action;
        if (action < ACT_ARGS) {
            if (event_member(c, st, e, action) < 0) return 0;
        } else if (action < ACT_ARGS_OPEN) {
            if (args_member(c, st, e, action - ACT_ARGS) < 0) return 0;
        } else if (action == ACT_ARGS_OPEN) {
            args_open(e, c->p);
        } else if (action == ACT_ARGS_CLOSE) {
            e->args_len = (int64_t)(c->p - e->args_ptr);
        } else {
            return 1; /* ACT_END: its literal closed the event */
        }
        at = k;
    }
}

/* The bytes of a node's literal in a window (at most 8, at `apart`, masked). */
static uint64_t window_of(const scan_state *st, const lnode *n, uint32_t apart, uint64_t mask) {
    uint64_t w = 0;
    memcpy(&w, st->arena + n->off + apart, 8); /* the arena's spare covers the last literal */
    return w & mask;
}

#define MAX_INDEXED 64 /* children looked at to choose a window */
#define MAX_APART 64   /* where a window may begin, at most (its choice stays cheap) */
#define MAX_REINDEX 8  /* tables a node builds again when a new child shares a hash */

/* A node's children whose literal ends before its window does (`least`): the first
 * N_SHORTS of them, in the order they are added; the others are found by the search. */
static void add_short(lnode *p, int32_t k) {
    for (int i = 0; i < N_SHORTS; i++) {
        if (p->shorts[i] < 0) {
            p->shorts[i] = (int16_t)k;
            return;
        }
    }
}

/* (Re)build the child table of a node with two children or more. Its window is the 8 bytes
 * (fewer where fewer than two children have 8) at the offset where the most children are
 * found at once: those whose literals reach past the window and differ in it, and up to
 * N_SHORTS whose literal ends before it, tried next, one by one (`shorts`). So that
 * `{"ph":"f","id":` beside `{"ph":"X","cat":"kernel","name":` does not keep the window at
 * the phase, where every complete event looks alike: it goes to the "cat", past where the
 * flow's literal ends. A child that shares its window's hash with another is found last,
 * among all of them. */
static void index_children(scan_state *st, int32_t at) {
    lnode *nodes = st->nodes;
    uint32_t shortest = UINT32_MAX, longest = 0;
    int m = 0, m_long = 0;
    for (int32_t a = nodes[at].child; a >= 0; a = nodes[a].sibling, m++) {
        if (nodes[a].len < shortest) shortest = nodes[a].len;
        if (nodes[a].len > longest) longest = nodes[a].len;
        if (nodes[a].len >= 8) m_long++;
    }
    if (m < 2 || shortest == 0) return; /* an empty literal: its children searched in order */
    uint32_t width = m_long >= 2 ? 8 : shortest;
    uint64_t mask = width == 8 ? ~0ULL : (1ULL << (8 * width)) - 1;
    uint32_t best = 0, best_found = 0, best_short = UINT32_MAX;
    for (uint32_t apart = 0; apart + width <= longest && apart < MAX_APART; apart++) {
        uint64_t seen[MAX_INDEXED];
        uint32_t distinct = 0, short_ones = 0;
        int k = 0;
        for (int32_t a = nodes[at].child; a >= 0 && k < MAX_INDEXED; a = nodes[a].sibling, k++) {
            if (nodes[a].len < apart + width) {
                short_ones++;
                continue;
            }
            uint64_t w = window_of(st, &nodes[a], apart, mask);
            int dup = 0;
            for (uint32_t j = 0; j < distinct && !dup; j++) dup = seen[j] == w;
            if (!dup) seen[distinct++] = w;
        }
        /* Found at once: one per distinct window, and the short ones (by name) */
        uint32_t found = distinct + (short_ones < N_SHORTS ? short_ones : N_SHORTS);
        if (found > best_found || (found == best_found && short_ones < best_short)) {
            best_found = found;
            best_short = short_ones;
            best = apart;
            if (distinct == (uint32_t)m) break; /* every child told apart by its window */
        }
    }
    if (nodes[at].table < 0) {
        if (!st->tables) st->tables = malloc(sizeof(child_table) * MAX_TABLES);
        if (!st->tables || st->n_tables >= MAX_TABLES) return; /* searched one by one */
        nodes[at].table = st->n_tables++;
    }
    nodes[at].apart = best;
    nodes[at].window = mask;
    nodes[at].least = best + width;
    for (int i = 0; i < N_SHORTS; i++) nodes[at].shorts[i] = -1;
    int16_t *table = st->tables[nodes[at].table];
    for (int i = 0; i < 256; i++) table[i] = -1;
    for (int32_t a = nodes[at].child; a >= 0; a = nodes[a].sibling) {
        if (nodes[a].len < nodes[at].least) {
            add_short(&nodes[at], a);
            continue;
        }
        unsigned h = WINDOW_HASH(window_of(st, &nodes[a], best, mask));
        if (table[h] < 0) table[h] = (int16_t)a;
    }
}

/* A node's new child k into its table, as `index_children` would put it there. Where another
 * child has k's window hash, the table is built again (a window chosen before k came need
 * not tell k apart), at most MAX_REINDEX times per node. */
static void add_to_table(scan_state *st, int32_t at, int32_t k) {
    lnode *p = &st->nodes[at];
    if (p->table < 0) return; /* searched one by one */
    if (st->nodes[k].len < p->least) {
        add_short(p, k);
        return;
    }
    int16_t *table = st->tables[p->table];
    unsigned h = WINDOW_HASH(window_of(st, &st->nodes[k], p->apart, p->window));
    if (table[h] < 0) {
        table[h] = (int16_t)k;
    } else if (p->reindexed < MAX_REINDEX) {
        p->reindexed++;
        index_children(st, at);
    }
}

/* A node with no literal, no values learnt, no children and no child table. */
static void node_clear(lnode *n) {
    memset(n, 0, sizeof(*n));
    n->child = n->sibling = n->table = -1;
    for (int i = 0; i < N_SHORTS; i++) n->shorts[i] = -1;
}

/* A new trie node under `parent` (after its last child `last`, -1: it has none); -1 when
 * the trie is full. A parent's table is built again each time its children double (so that
 * its window tells most of them apart), the new child added to it otherwise. */
static int32_t add_node(scan_state *st, int32_t parent, int32_t last, const char *lit,
                        size_t len, int action, int consts, int marks, int open_at,
                        int close_at, const event_t *e) {
    if (st->n_nodes >= MAX_LAYOUT_NODES || st->arena_len + len > MAX_LAYOUT_BYTES) return -1;
    int32_t k = st->n_nodes++;
    lnode *n = &st->nodes[k];
    node_clear(n);
    n->off = (uint32_t)st->arena_len;
    n->len = (uint16_t)len;
    n->action = (uint8_t)action;
    n->consts = (uint16_t)consts;
    n->marks = (uint8_t)marks;
    n->open_at = (int16_t)open_at;
    n->close_at = (int16_t)close_at;
    n->tail = (uint16_t)(len % 16 ? (1u << (len % 16)) - 1 : len ? 0xFFFF : 0);
    n->phase = e->phase;
    n->cat = e->cat;
    n->pid = e->pid;
    n->pid_label = e->pid_label;
    n->tid = e->tid;
    n->tid_label = e->tid_label;
    n->device = e->a.device;
    n->stream = e->a.stream;
    n->fwd = e->op.fwd;
    n->device_type = e->a.device_type;
    n->device_id = e->a.device_id;
    memcpy(st->arena + st->arena_len, lit, len);
    st->arena_len += len;
    if (last >= 0) st->nodes[last].sibling = k;
    else st->nodes[parent].child = k;
    uint32_t m = ++st->nodes[parent].children;
    if (m >= 2) {
        if ((m & (m - 1)) == 0) index_children(st, parent);
        else add_to_table(st, parent, k);
    }
    return k;
}

/* The CONST_* of a step whose value may be learnt with the literal around it (0: read). */
static int const_of(const step *s) {
    int c = 0;
    switch (s->action) {
        case EK_PH: c = CONST_PH; break;
        case EK_CAT: c = CONST_CAT; break;
        case EK_PID: c = CONST_PID; break;
        case EK_TID: c = CONST_TID; break;
        case ACT_ARGS + AK_DEVICE: c = CONST_DEVICE; break;
        case ACT_ARGS + AK_STREAM: c = CONST_STREAM; break;
        case ACT_ARGS + AK_FWD: c = CONST_FWD; break;
        case ACT_ARGS + AK_SAME: c = CONST_SAME; break;
        case EK_SAME: c = CONST_SAME; break;
        case ACT_ARGS + AK_DEVICE_TYPE: c = CONST_DEVICE_TYPE; break;
        case ACT_ARGS + AK_DEVICE_ID: c = CONST_DEVICE_ID; break;
    }
    if (!c || s->end - s->start > MAX_CONST_VALUE) return 0;
    return c;
}

/* Add the layout of the event [start, end) just read the general way (its recorded steps),
 * e what it read. */
static void learn(scan_state *st, const char *start, const char *end, const event_t *e) {
    if (st->n_steps < 0 || st->layouts_full) return;
    if (!st->nodes) {
        st->nodes = malloc(sizeof(lnode) * MAX_LAYOUT_NODES);
        st->arena = malloc(MAX_LAYOUT_BYTES + 16);
        if (!st->nodes || !st->arena) {
            st->layouts_full = 1;
            return;
        }
        memset(st->arena, 0, MAX_LAYOUT_BYTES + 16);
        node_clear(&st->nodes[0]); /* the root: its children are the events' first literals */
        st->n_nodes = 1;
    }
    /* A node keeps the values the event read last. Another event may share the node and
     * read no more after it, so a value is learnt only where nothing after it sets the same
     * field: not for a key met twice, nor for an args value where a second "args" follows. */
    int seen = 0, twice = 0, opens = 0;
    for (int i = 0; i < st->n_steps; i++) {
        int c = const_of(&st->steps[i]);
        twice |= seen & c;
        seen |= c;
        opens += st->steps[i].action == ACT_ARGS_OPEN;
    }
    if (opens > 1) twice |= ARGS_CONSTS;
    int32_t at = 0;
    const char *from = start;
    int consts = 0, marks = 0, open_at = 0, close_at = 0;
    for (int i = 0; i <= st->n_steps; i++) {
        if (i < st->n_steps) {
            const step *s = &st->steps[i];
            int c = const_of(s) & ~twice;
            if (c) { /* the value joins the literal, which goes on after it */
                consts |= c;
                continue;
            }
            if (s->action == ACT_ARGS_OPEN && !marks && !(consts & ARGS_CONSTS)) {
                marks = MARK_OPEN;
                open_at = (int)(s->start - from);
                continue;
            }
            if (s->action == ACT_ARGS_CLOSE && !(marks & MARK_CLOSE)) {
                marks |= MARK_CLOSE;
                close_at = (int)(s->start - from);
                continue;
            }
        }
        const char *to = i < st->n_steps ? st->steps[i].start : end;
        int action = i < st->n_steps ? st->steps[i].action : ACT_END;
        size_t len = (size_t)(to - from);
        if (len > MAX_LITERAL) return; /* a prefix learnt without its end matches nothing */
        int32_t k = st->nodes[at].child, last = -1;
        while (k >= 0 && !(st->nodes[k].action == action && st->nodes[k].len == len &&
                           st->nodes[k].consts == consts && st->nodes[k].marks == marks &&
                           (!marks || (st->nodes[k].open_at == open_at &&
                                       st->nodes[k].close_at == close_at)) &&
                           memcmp(st->arena + st->nodes[k].off, from, len) == 0)) {
            last = k;
            k = st->nodes[k].sibling;
        }
        if (k < 0 && (k = add_node(st, at, last, from, len, action, consts, marks, open_at,
                                   close_at, e)) < 0) {
            st->layouts_full = 1;
            return;
        }
        at = k;
        consts = marks = open_at = close_at = 0;
        if (i < st->n_steps) from = st->steps[i].end;
    }
}

/* The row of an event read either way; 1 if kept, 0 if its phase is not kept, -1 if the
 * fast path refuses it. */
static int emit(scan_state *st, event_t *e) {
    st->seen++;
    if (e->phase == -2) return -1; /* no ph: the slow path keeps the same accounting */
    if (e->phase < 0) return 0;
    if (e->phase == 4 && !(e->name_len == 8 && memcmp(e->name_ptr, "[memory]", 8) == 0))
        return 0;
    int8_t ph8 = (int8_t)e->phase;
    if (st->rows >= st->room && row_room(st) < 0) return -1;
    size_t r = st->rows++;
/* The value at row r of a row column (its type's size is the column's). */
#define PUT(col, v) memcpy(st->cols[col].data + r * sizeof(v), &(v), sizeof(v))
/* The same for a RARE_COLS column: only a value, after the NO_ID rows before it. */
#define PUT_RARE(col, v)              \
    do {                              \
        if ((v) != NO_ID) {           \
            fill_rare(st, (col), r);  \
            PUT(col, v);              \
            st->written[col] = r + 1; \
        }                             \
    } while (0)
    PUT(COL_PHASE, ph8);
    PUT(COL_CAT, e->cat);
    PUT(COL_NAME, e->name);
    PUT(COL_PID, e->pid);
    PUT_RARE(COL_PID_LABEL, e->pid_label);
    PUT(COL_TID, e->tid);
    PUT_RARE(COL_TID_LABEL, e->tid_label);
    PUT(COL_TS, e->ts);
    PUT(COL_HAS_TS, e->has_ts);
    PUT(COL_DUR, e->dur);
    PUT(COL_HAS_DUR, e->has_dur);
    PUT_RARE(COL_ID, e->id);
    PUT_RARE(COL_ID_LABEL, e->id_label);
    PUT(COL_DEVICE, e->a.device);
    PUT(COL_STREAM, e->a.stream);
    PUT(COL_CORRELATION, e->a.correlation);
    PUT(COL_EXT, e->a.ext);
    PUT_RARE(COL_EXT_LOWER, e->a.ext_lower);
    PUT_RARE(COL_BYTES, e->a.bytes);
    PUT_RARE(COL_ALLOC_BYTES, e->a.alloc_bytes);
    PUT_RARE(COL_TOTAL_ALLOCATED, e->a.total_allocated);
    PUT_RARE(COL_TOTAL_RESERVED, e->a.total_reserved);
    PUT_RARE(COL_DEVICE_ID, e->a.device_id);
    PUT_RARE(COL_DEVICE_TYPE, e->a.device_type);
#undef PUT_RARE
#undef PUT
    if (e->has_coll) {
        int64_t row = (int64_t)r;
        int64_t off = (int64_t)(e->args_ptr - st->base);
        if (col_push(&st->cols[COL_META_ROW], &row, 8) < 0 ||
            col_push(&st->cols[COL_META_OFF], &off, 8) < 0 ||
            col_push(&st->cols[COL_META_LEN], &e->args_len, 8) < 0)
            return -1;
    }
    const op_t *op = &e->op;
    if (op->ptr[OP_DIMS] || op->ptr[OP_TYPES] || op->ptr[OP_STRIDES] || op->ptr[OP_CONCRETE] ||
        op->seq != NO_ID || op->fwd != NO_ID) {
        int64_t row = (int64_t)r;
        int32_t ids[N_OP_LISTS];
        for (int i = 0; i < N_OP_LISTS; i++) {
            if (e->op_known & (1 << i)) ids[i] = e->op_ids[i];
            else ids[i] = op->ptr[i] ? intern(&st->values, op->ptr[i], op->len[i]) : NO_ID;
            if (ids[i] == -2) return -1;
            e->op_ids[i] = ids[i];
        }
        if (col_push(&st->cols[COL_OP_ROW], &row, 8) < 0 ||
            col_push(&st->cols[COL_OP_DIMS], &ids[OP_DIMS], 4) < 0 ||
            col_push(&st->cols[COL_OP_TYPES], &ids[OP_TYPES], 4) < 0 ||
            col_push(&st->cols[COL_OP_STRIDES], &ids[OP_STRIDES], 4) < 0 ||
            col_push(&st->cols[COL_OP_CONCRETE], &ids[OP_CONCRETE], 4) < 0 ||
            col_push(&st->cols[COL_OP_SEQ], &op->seq, 8) < 0 ||
            col_push(&st->cols[COL_OP_FWD], &op->fwd, 8) < 0)
            return -1;
    } else {
        for (int i = 0; i < N_OP_LISTS; i++) e->op_ids[i] = NO_ID; /* no list: none is */
    }
    return 1;
}

/* Remember the shape lists of a kept row (their ids found by emit) under its name. */
static void remember_lists(scan_state *st, const event_t *e) {
    if (e->name < 0) return;
    if ((size_t)e->name >= st->memo_names) {
        size_t names = st->memo_names ? st->memo_names : 1024;
        while (names <= (size_t)e->name) names *= 2;
        list_memo *memo = realloc(st->memo, names * N_OP_LISTS * sizeof(list_memo));
        if (!memo) return; /* read, not remembered */
        memset(memo + st->memo_names * N_OP_LISTS, 0,
               (names - st->memo_names) * N_OP_LISTS * sizeof(list_memo));
        st->memo = memo;
        st->memo_names = names;
    }
    list_memo *m = &st->memo[(size_t)e->name * N_OP_LISTS];
    for (int i = 0; i < N_OP_LISTS; i++) {
        if (e->op.ptr[i] && !(e->op_known & (1 << i))) {
            m[i].ptr = e->op.ptr[i];
            m[i].len = e->op.len[i];
            m[i].id = e->op_ids[i];
        }
    }
}

/* How many events were matched against learnt layouts, in every piece scanned so far (for
 * the tests). */
static long long layouts_matched_total, layouts_searched_total;

/* One event object; 1 if kept, 0 if its phase is not kept, -1 if the fast path refuses. */
static int scan_event(cursor *c, scan_state *st) {
    if (c->p >= c->end || *c->p != '{') return -1;
    const char *start = c->p;
    event_t e;
    event_init(&e);
    int matched = st->n_nodes > 1 && !st->layouts_off && match_event(c, st, &e);
    if (matched) {
        st->matched++;
    } else {
        if (st->n_nodes > 1 && !st->layouts_off) {
            c->p = start; /* read it again, the general way */
            event_init(&e);
            /* a piece whose events keep changing layout: read the general way from now on */
            if (++st->missed > MAX_MISSES && st->missed > st->matched / 4) st->layouts_off = 1;
        }
        st->n_steps = use_layouts && !st->layouts_full && !st->layouts_off ? 0 : -1;
        if (parse_event(c, st, &e) < 0) return -1;
    }
    int kept = emit(st, &e);
    if (!matched && kept >= 0) learn(st, start, c->p, &e);
    if (kept > 0 && use_layouts) remember_lists(st, &e);
    return kept;
}

/* Room for `rows` rows in every column, so that none grows (and copies) while scanning. A
 * kept event takes at least 10 bytes of text ({"ph":"X"}), so text_len / 10 + 1 rows never
 * run out; pages that stay unused are never touched, so they cost no memory. */
static int reserve_columns(scan_state *st, size_t rows) {
    for (int i = 0; i < N_COLS; i++) {
        if (st->cols[i].cap == 0 && col_grow(&st->cols[i], rows * COL_SIZE[i]) < 0) return -1;
    }
    return 0;
}

static void state_free(scan_state *st) {
    for (int i = 0; i < N_COLS; i++) col_release(st->cols[i].data, st->cols[i].cap);
    free(st->strings.slots);
    col_release(st->strings.order.data, st->strings.order.cap);
    free(st->labels.slots);
    col_release(st->labels.order.data, st->labels.order.cap);
    free(st->values.slots);
    col_release(st->values.order.data, st->values.order.cap);
    __atomic_fetch_add(&layouts_matched_total, (long long)st->matched, __ATOMIC_RELAXED);
    __atomic_fetch_add(&layouts_searched_total, (long long)st->searched, __ATOMIC_RELAXED);
    free(st->nodes);
    free(st->arena);
    free(st->tables);
    free(st->memo);
}

/* ---- the texts handed to Python, kept across pieces ------------------------------------- */

/* A trace's pieces repeat their texts (a profiled step repeats its op names and shapes: the
 * same few hundred in every piece of a long trace). Each text becomes a Python object once,
 * and later pieces get that same object again: no new object, and Python's dicts that map
 * the texts to ids find it by its kept hash and its identity. The objects are immutable, so
 * sharing them changes nothing else. Touched only with the GIL held (as the lists are
 * made). Bounded: past TEXT_CACHE_ENTRIES texts or TEXT_CACHE_BYTES of them (a trace of
 * millions of distinct names), texts become fresh objects as they would without it. */
#define TEXT_CACHE_SLOTS (1u << 16)
#define TEXT_CACHE_ENTRIES (TEXT_CACHE_SLOTS / 2)
#define TEXT_CACHE_BYTES ((size_t)8 << 20)
typedef struct {
    uint64_t h;
    char *text; /* NULL: a free slot */
    Py_ssize_t len;
    int as_text;
    PyObject *obj;
} cached_text;
static cached_text *text_cache;
static size_t text_cache_count, text_cache_bytes;

/* The cache's slot for the text (its own, or the free one where it would go); NULL without
 * a cache. */
static cached_text *text_slot(const char *p, Py_ssize_t n, int as_text, uint64_t h) {
    if (!text_cache) {
        text_cache = calloc(TEXT_CACHE_SLOTS, sizeof(cached_text));
        if (!text_cache) return NULL;
    }
    for (size_t i = (size_t)h & (TEXT_CACHE_SLOTS - 1);; i = (i + 1) & (TEXT_CACHE_SLOTS - 1)) {
        cached_text *e = &text_cache[i];
        if (!e->text) return e;
        if (e->h == h && e->len == n && e->as_text == as_text &&
            memcmp(e->text, p, (size_t)n) == 0)
            return e;
    }
}

/* A new reference to the object of one interned string (as `interned_list` makes them), from
 * the cache where it holds it. */
static PyObject *text_object(const char *p, Py_ssize_t n, int as_text) {
    const uint64_t h = hash_bytes(p, n);
    cached_text *e = text_slot(p, n, as_text, h);
    if (e && e->text) {
        Py_INCREF(e->obj);
        return e->obj;
    }
    PyObject *s = NULL;
    if (as_text && !memchr(p, '\\', (size_t)n)) {
        s = PyUnicode_DecodeUTF8(p, n, NULL);
        if (!s) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL; /* no memory */
            PyErr_Clear(); /* not UTF-8: given as bytes, for Python to refuse */
        }
    }
    if (!s) s = PyBytes_FromStringAndSize(p, n);
    if (!s) return NULL;
    if (e && text_cache_count < TEXT_CACHE_ENTRIES &&
        text_cache_bytes + (size_t)n <= TEXT_CACHE_BYTES) {
        char *copy = malloc((size_t)n + 1);
        if (copy) {
            memcpy(copy, p, (size_t)n);
            e->h = h;
            e->text = copy;
            e->len = n;
            e->as_text = as_text;
            Py_INCREF(s);
            e->obj = s;
            text_cache_count++;
            text_cache_bytes += (size_t)n;
        }
    }
    return s;
}

/* The interned strings, as raw bytes; with `as_text` (names and labels), as str where the
 * raw bytes hold no escape and are UTF-8 (the text is then those bytes), else still as raw
 * bytes, which Python decodes as JSON (an escape) or refuses (not UTF-8). Made here, each
 * string's decode is no Python call. */
static PyObject *interned_list(interner *t, int as_text) {
    PyObject *list = PyList_New(t->count);
    if (!list) return NULL;
    slot *slots = (slot *)t->order.data;
    for (int32_t i = 0; i < t->count; i++) {
        PyObject *s = text_object(slots[i].ptr, slots[i].len, as_text);
        if (!s) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}

/* ---- a run of events: one piece of the events array, cut anywhere ----------------------- */

/* How a run of events ended (scan_events' status). */
enum {
    RUN_MORE,      /* the piece ended after a ',' between events: more follow */
    RUN_DONE,      /* the ']' that closes the array: `end` is just past it */
    RUN_TRUNCATED, /* the event at `end` does not end inside the piece (or no ',' follows it) */
    RUN_REFUSED,   /* the event at `end` is whole JSON the fast path does not take: the caller
                      decodes buffer[end:value_end] itself and goes on after it */
    RUN_MALFORMED  /* not JSON the caller can go on from: the complete decoder says why */
};

/* Bytes from the end of the piece within which a failure may be the piece's end, not the
 * text's fault: a "\u" escape or a literal cut short fails up to six bytes before it. */
#define CUT_SLACK 8

/* Events from c->p on (`first`: just past the array's '[', where ']' may come at once).
 * Kept events go to `st`; returns a RUN_* status, `*at` the offset it is about, and for
 * RUN_REFUSED `*value_end` the end of that event's JSON value. */
static int scan_run(cursor *c, scan_state *st, int first, const char **at,
                    const char **value_end) {
    int after_comma = !first;
    for (;;) {
        skip_ws(c);
        *at = c->p;
        if (c->p >= c->end) return after_comma ? RUN_MORE : RUN_TRUNCATED;
        if (*c->p == ']') {
            if (after_comma) return RUN_MALFORMED; /* a trailing comma */
            c->p++;
            *at = c->p;
            return RUN_DONE;
        }
        const char *q = c->p;
        if (scan_event(c, st) < 0) {
            cursor t = {q, c->end, 0};
            *at = q;
            if (skip_value(&t, 1) == 0 && *q == '{') {
                *value_end = t.p;
                return RUN_REFUSED;
            }
            return t.p >= c->end - CUT_SLACK ? RUN_TRUNCATED : RUN_MALFORMED;
        }
        skip_ws(c);
        if (c->p >= c->end) {
            *at = c->p;
            return RUN_TRUNCATED; /* an event, then the end: no ',' or ']' yet */
        }
        if (*c->p == ',') {
            c->p++;
            after_comma = 1;
            continue;
        }
        if (*c->p == ']') {
            c->p++;
            *at = c->p;
            return RUN_DONE;
        }
        *at = c->p;
        return RUN_MALFORMED;
    }
}

/* A whole JSON array of events, and nothing after it but whitespace: one run, to its ']'. */
static int scan_array(cursor *c, scan_state *st) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != '[') return -1;
    c->p++;
    const char *at, *value_end;
    if (scan_run(c, st, 1, &at, &value_end) != RUN_DONE) return -1;
    skip_ws(c);
    return c->p == c->end ? 0 : -1;
}

/* ---- columns handed over ----------------------------------------------------------------- */

/* A column given to Python as it is: its buffer (read-only, as bytes would be), freed with
 * the object. Copying every column into a bytes object cost a tenth of a scan, and held the
 * GIL while it ran. len() gives its size in bytes. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
    size_t cap; /* bytes held (whole pages where mapped) */
} colbuf;

static char EMPTY_COLUMN[1];

static int colbuf_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    colbuf *b = (colbuf *)self;
    return PyBuffer_FillInfo(view, self, b->data ? b->data : EMPTY_COLUMN, b->len, 1, flags);
}

static void colbuf_dealloc(PyObject *self) {
    col_release(((colbuf *)self)->data, ((colbuf *)self)->cap);
    PyObject_Free(self);
}

static Py_ssize_t colbuf_length(PyObject *self) { return ((colbuf *)self)->len; }

static PyBufferProcs colbuf_as_buffer = {colbuf_getbuffer, NULL};
static PySequenceMethods colbuf_as_sequence = {.sq_length = colbuf_length};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "badput.trace._scan.Column",
    .tp_basicsize = sizeof(colbuf),
    .tp_dealloc = colbuf_dealloc,
    .tp_as_buffer = &colbuf_as_buffer,
    .tp_as_sequence = &colbuf_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A scanned column: read-only bytes of packed native integers (buffer protocol).",
};

/* The column's buffer as a Column object; the state lets go of it. */
static PyObject *column_object(column *c) {
    colbuf *b = PyObject_New(colbuf, &ColumnType);
    if (!b) return NULL;
    b->data = c->data;
    b->len = (Py_ssize_t)c->len;
    b->cap = c->cap;
    c->data = NULL;
    c->len = c->cap = 0;
    return (PyObject *)b;
}

/* The result tuple: the columns, the string tables, the count of events seen; NULL on error. */
static PyObject *columns_tuple(scan_state *st, Py_ssize_t extra) {
    rows_done(st);
    PyObject *result = PyTuple_New(N_COLS + 4 + extra);
    if (!result) return NULL;
    for (int i = 0; i < N_COLS; i++) {
        PyObject *b = column_object(&st->cols[i]);
        if (!b) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, b);
    }
    PyObject *strings = interned_list(&st->strings, 1);
    PyObject *labels = strings ? interned_list(&st->labels, 1) : NULL;
    PyObject *seen = labels ? PyLong_FromSsize_t(st->seen) : NULL;
    PyObject *values = seen ? interned_list(&st->values, 0) : NULL;
    if (!values) {
        Py_XDECREF(strings);
        Py_XDECREF(labels);
        Py_XDECREF(seen);
        Py_DECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, N_COLS, strings);
    PyTuple_SET_ITEM(result, N_COLS + 1, labels);
    PyTuple_SET_ITEM(result, N_COLS + 2, seen);
    PyTuple_SET_ITEM(result, N_COLS + 3, values);
    return result;
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    scan_state st;
    memset(&st, 0, sizeof(st));
    cursor c = {(const char *)view.buf, (const char *)view.buf + view.len, 0};
    st.base = (const char *)view.buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan_array(&c, &st);
    Py_END_ALLOW_THREADS
    PyObject *result;
    if (rc < 0) {
        result = Py_None;
        Py_INCREF(result);
    } else {
        result = columns_tuple(&st, 0);
    }
    state_free(&st);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *scan_events(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    int first;
    if (!PyArg_ParseTuple(args, "y*np", &view, &start, &first)) return NULL;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start out of range");
        return NULL;
    }
    scan_state st;
    memset(&st, 0, sizeof(st));
    st.base = (const char *)view.buf;
    cursor c = {(const char *)view.buf + start, (const char *)view.buf + view.len, 0};
    const char *at = c.p, *value_end = c.p;
    int status = RUN_MALFORMED;
    int reserved;
    Py_BEGIN_ALLOW_THREADS
    reserved = reserve_columns(&st, (size_t)(view.len - start) / 10 + 1);
    if (reserved == 0) status = scan_run(&c, &st, first, &at, &value_end);
    Py_END_ALLOW_THREADS
    if (reserved < 0) {
        state_free(&st);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    PyObject *result = columns_tuple(&st, 3);
    if (result) {
        PyObject *a = PyLong_FromSsize_t((Py_ssize_t)(at - st.base));
        PyObject *b = a ? PyLong_FromLong(status) : NULL;
        PyObject *v = b ? PyLong_FromSsize_t((Py_ssize_t)(value_end - st.base)) : NULL;
        if (!v) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            Py_CLEAR(result);
        } else {
            PyTuple_SET_ITEM(result, N_COLS + 4, a);
            PyTuple_SET_ITEM(result, N_COLS + 5, b);
            PyTuple_SET_ITEM(result, N_COLS + 6, v);
        }
    }
    state_free(&st);
    PyBuffer_Release(&view);
    return result;
}

/* ---- a piece's rows, derived in one pass ---------------------------------------------- */

/* The writable memory of a Column (the caller's to overwrite: Python sees it read-only). */
static char *column_data(PyObject *o, Py_ssize_t want, const char *what) {
    if (!PyObject_TypeCheck(o, &ColumnType)) {
        PyErr_Format(PyExc_TypeError, "derive: %s is not a scanned Column", what);
        return NULL;
    }
    colbuf *b = (colbuf *)o;
    if (b->len != want) {
        PyErr_Format(PyExc_ValueError, "derive: %s holds %zd bytes, not %zd", what, b->len, want);
        return NULL;
    }
    return b->data ? b->data : EMPTY_COLUMN;
}

enum { D_PHASE, D_HAS_TS, D_TS, D_EXT_LOWER, D_ALLOC, D_DEV_TYPE, D_DEV_ID, D_ID,
       D_PID_LABEL, D_TID_LABEL, D_ID_LABEL, D_KIND_LUT, D_NAME_LUT, D_LABEL_IDS, D_GPU_SIDE,
       D_KIND_OUT, N_D_BUFS };
/* The columns written over: cat (read), name (-> name_id), dur, device, stream, ext
 * (-> external_id), bytes, pid, tid, correlation. */
enum { C_CAT, C_NAME, C_DUR, C_DEVICE, C_STREAM, C_EXT, C_BYTES, C_PID, C_TID, C_CORR, N_C };

/* mark(ids, seen): see the method table. */
static PyObject *mark(PyObject *self, PyObject *args) {
    Py_buffer ids, seen;
    if (!PyArg_ParseTuple(args, "y*w*", &ids, &seen)) return NULL;
    int ok = ids.len % 4 == 0 && seen.len > 0;
    if (ok) {
        const int32_t *v = ids.buf;
        unsigned char *mark_of = seen.buf;
        const Py_ssize_t n = ids.len / 4, last = seen.len - 1;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int32_t id = v[i];
            if (id < -1 || id >= last) {
                ok = 0;
                break;
            }
            mark_of[id < 0 ? last : id] = 1;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&ids);
    PyBuffer_Release(&seen);
    return PyBool_FromLong(ok);
}

/* derive(buffers, columns, constants): see the method table. */
static PyObject *derive(PyObject *self, PyObject *args) {
    PyObject *bufs, *cols;
    long long complete, instant, flow_kind, memory_kind, cuda_type;
    if (!PyArg_ParseTuple(args, "O!O!(LLLLL)", &PyTuple_Type, &bufs, &PyTuple_Type, &cols,
                          &complete, &instant, &flow_kind, &memory_kind, &cuda_type)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(bufs) != N_D_BUFS || PyTuple_GET_SIZE(cols) != N_C) {
        PyErr_SetString(PyExc_ValueError, "derive: wrong number of buffers or columns");
        return NULL;
    }
    Py_buffer v[N_D_BUFS];
    int got = 0;
    PyObject *result = NULL;
    for (; got < N_D_BUFS; got++) {
        int flags = got == D_KIND_OUT ? PyBUF_WRITABLE : PyBUF_SIMPLE;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(bufs, got), &v[got], flags) < 0) goto done;
    }
    Py_ssize_t n = v[D_PHASE].len; /* int8 */
    static const unsigned char size[N_D_BUFS] = {1, 1, 8, 8, 8, 8, 8, 8, 4, 4, 4, 0, 0, 0, 0, 1};
    for (int i = 0; i < N_D_BUFS; i++) {
        if (size[i] && v[i].len != n * size[i]) {
            PyErr_Format(PyExc_ValueError, "derive: buffer %d holds %zd bytes for %zd rows", i,
                         v[i].len, n);
            goto done;
        }
    }
    Py_ssize_t n_kinds = v[D_KIND_LUT].len, n_names = v[D_NAME_LUT].len / 4;
    Py_ssize_t n_labels = v[D_LABEL_IDS].len / 8;
    if (n_kinds < 1 || n_names < 1 || n_labels < 1 || v[D_GPU_SIDE].len != 256) {
        PyErr_SetString(PyExc_ValueError, "derive: a lookup table of the wrong size");
        goto done;
    }
    static const char *what[N_C] = {"cat", "name", "dur", "device", "stream", "ext", "bytes",
                                    "pid", "tid", "correlation"};
    static const unsigned char csize[N_C] = {4, 4, 8, 8, 8, 8, 8, 8, 8, 8};
    char *c[N_C];
    for (int i = 0; i < N_C; i++) {
        c[i] = column_data(PyTuple_GET_ITEM(cols, i), n * csize[i], what[i]);
        if (!c[i]) goto done;
    }
    const int8_t *phase = v[D_PHASE].buf, *has_ts = v[D_HAS_TS].buf, *kind_lut = v[D_KIND_LUT].buf;
    const int64_t *ts = v[D_TS].buf, *ext_lower = v[D_EXT_LOWER].buf, *alloc = v[D_ALLOC].buf;
    const int64_t *dev_type = v[D_DEV_TYPE].buf, *dev_id = v[D_DEV_ID].buf, *id = v[D_ID].buf;
    const int32_t *pid_label = v[D_PID_LABEL].buf, *tid_label = v[D_TID_LABEL].buf;
    const int32_t *id_label = v[D_ID_LABEL].buf, *name_lut = v[D_NAME_LUT].buf;
    const int64_t *label_ids = v[D_LABEL_IDS].buf;
    const unsigned char *gpu_side = v[D_GPU_SIDE].buf;
    int8_t *kind = v[D_KIND_OUT].buf;
    const int32_t *cat = (const int32_t *)c[C_CAT];
    int32_t *name = (int32_t *)c[C_NAME];
    int64_t *dur = (int64_t *)c[C_DUR], *device = (int64_t *)c[C_DEVICE];
    int64_t *stream = (int64_t *)c[C_STREAM], *ext = (int64_t *)c[C_EXT];
    int64_t *bytes = (int64_t *)c[C_BYTES], *pid = (int64_t *)c[C_PID], *tid = (int64_t *)c[C_TID];
    int64_t *corr = (int64_t *)c[C_CORR];
    const int labels = n_labels > 1; /* the last slot is NO_ID: a piece without labels */
    Py_ssize_t bad = 0, negative = 0, first_negative = -1, out_of_range = -1;
    /* Whether some value of each id column (as written) lies beyond int32: one flag each,
     * or-ed in without a branch (a value v fits iff v + 2**31 < 2**32, unsigned). */
    uint64_t wide_device = 0, wide_stream = 0, wide_ext = 0, wide_pid = 0, wide_tid = 0;
    uint64_t wide_corr = 0;
#define WIDE(v) ((uint64_t)(v) + 0x80000000ULL > 0xFFFFFFFFULL)
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t ci = cat[i] < 0 ? n_kinds + cat[i] : cat[i];
        Py_ssize_t ni = name[i] < 0 ? n_names + name[i] : name[i];
        if (ci < 0 || ci >= n_kinds || ni < 0 || ni >= n_names) {
            out_of_range = i;
            break;
        }
        if (labels) { /* a label (a string pid, tid or flow id) stands for its id */
            int32_t pl = pid_label[i], tl = tid_label[i];
            if (pl >= n_labels || tl >= n_labels) {
                out_of_range = i;
                break;
            }
            if (pl >= 0) pid[i] = label_ids[pl];
            if (tl >= 0) tid[i] = label_ids[tl];
        }
        int8_t k = kind_lut[ci];
        name[i] = name_lut[ni];
        int64_t d = dur[i];
        int is_complete = phase[i] == complete, is_memory = phase[i] == instant;
        /* A complete event needs a start, and an end within int64 nanoseconds. */
        int is_bad = is_complete && (!has_ts[i] || ts[i] > INT64_MAX - (d > 0 ? d : 0));
        bad += is_bad;
        if (d < 0 && !is_bad) {
            if (negative++ == 0) first_negative = i;
        }
        if (!is_complete) {
            dur[i] = 0;
            k = (int8_t)(is_memory ? memory_kind : flow_kind);
            if (!is_memory) { /* a flow arrow's id is its correlation */
                int32_t il = labels ? id_label[i] : -1;
                if (il >= n_labels) {
                    out_of_range = i;
                    break;
                }
                corr[i] = il >= 0 ? label_ids[il] : id[i];
            }
        }
        kind[i] = k;
        if (gpu_side[(uint8_t)k]) {
            if (device[i] == NO_ID) device[i] = pid[i];
            if (stream[i] == NO_ID) stream[i] = tid[i];
        } else {
            device[i] = NO_ID;
            stream[i] = NO_ID;
        }
        if (is_memory) {
            if (dev_type[i] == cuda_type) device[i] = dev_id[i];
            bytes[i] = alloc[i];
        }
        if (ext[i] == NO_ID) ext[i] = ext_lower[i];
        wide_device |= WIDE(device[i]);
        wide_stream |= WIDE(stream[i]);
        wide_ext |= WIDE(ext[i]);
        wide_pid |= WIDE(pid[i]);
        wide_tid |= WIDE(tid[i]);
        wide_corr |= WIDE(corr[i]);
    }
    Py_END_ALLOW_THREADS
#undef WIDE
    if (out_of_range >= 0) {
        PyErr_Format(PyExc_ValueError, "derive: row %zd has an id beyond its table", out_of_range);
        goto done;
    }
    result = Py_BuildValue("nnn(NNNNNN)", bad, negative, first_negative,
                           PyBool_FromLong(!wide_device), PyBool_FromLong(!wide_stream),
                           PyBool_FromLong(!wide_ext), PyBool_FromLong(!wide_pid),
                           PyBool_FromLong(!wide_tid), PyBool_FromLong(!wide_corr));
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return result;
}

static PyObject *drop_spare(PyObject *self, PyObject *unused) {
#ifdef COL_MAPPED
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < pool_n; i++) munmap(pool[i].data, pool[i].cap);
    pool_n = 0;
    pthread_mutex_unlock(&pool_lock);
#endif
    Py_RETURN_NONE;
}

static PyObject *layouts(PyObject *self, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    int was = use_layouts;
    use_layouts = on;
    return PyBool_FromLong(was);
}

static PyObject *layouts_matched(PyObject *self, PyObject *unused) {
    return PyLong_FromLongLong(__atomic_load_n(&layouts_matched_total, __ATOMIC_RELAXED));
}

static PyObject *layouts_searched(PyObject *self, PyObject *unused) {
    return PyLong_FromLongLong(__atomic_load_n(&layouts_searched_total, __ATOMIC_RELAXED));
}

/* ---- a mapped file that shrinks while it is read ---------------------------------------- */

/* A plain trace is read through a mapping of the file. Should the file shrink while it is read
 * (truncated, or rewritten in place by a profiler that writes it again), touching the mapping
 * past the new end raises SIGBUS, which would end the process with no word of why. `guard`
 * names a mapping and the words to say then: the handler, finding the faulting address inside
 * a guarded mapping, writes them to stderr and ends the process with exit status 2 (only
 * async-signal-safe calls: write and _exit). A fault anywhere else goes to the handler that
 * was there before (Python's faulthandler, or the default: the process ends as it would have). */
#if defined(__linux__)
#include <signal.h>
#include <unistd.h>
#define GUARDS 8
#define GUARD_TEXT 1024
static struct {
    uintptr_t lo, hi; /* hi == 0: a free slot */
    char text[GUARD_TEXT];
    size_t len;
} guards[GUARDS];
static struct sigaction bus_before;
static int bus_installed;

static void on_bus(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)context;
    uintptr_t at = (uintptr_t)info->si_addr;
    if (info->si_code > 0) { /* raised by the kernel for an access, not sent by a process */
        for (int i = 0; i < GUARDS; i++) {
            uintptr_t hi = __atomic_load_n(&guards[i].hi, __ATOMIC_ACQUIRE);
            if (hi != 0 && guards[i].lo <= at && at < hi) {
                ssize_t written = write(2, guards[i].text, guards[i].len);
                (void)written;
                _exit(2);
            }
        }
    }
    /* Not ours: the handler before takes it when the access runs again on return. */
    sigaction(SIGBUS, &bus_before, NULL);
}
#endif

static PyObject *guard(PyObject *self, PyObject *args) {
    PyObject *mapping;
    const char *text;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "Oy#", &mapping, &text, &len)) return NULL;
#if defined(__linux__)
    Py_buffer view;
    if (PyObject_GetBuffer(mapping, &view, PyBUF_SIMPLE) < 0) return NULL;
    uintptr_t lo = (uintptr_t)view.buf, hi = lo + (uintptr_t)view.len;
    PyBuffer_Release(&view);
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0) hi = (hi + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    if (hi <= lo) return PyLong_FromLong(-1);
    if (!bus_installed) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = on_bus;
        action.sa_flags = SA_SIGINFO;
        sigemptyset(&action.sa_mask);
        if (sigaction(SIGBUS, &action, &bus_before) != 0) return PyLong_FromLong(-1);
        bus_installed = 1;
    }
    for (int i = 0; i < GUARDS; i++) {
        if (__atomic_load_n(&guards[i].hi, __ATOMIC_ACQUIRE) != 0) continue;
        size_t n = (size_t)len < GUARD_TEXT ? (size_t)len : GUARD_TEXT;
        memcpy(guards[i].text, text, n);
        guards[i].len = n;
        guards[i].lo = lo;
        __atomic_store_n(&guards[i].hi, hi, __ATOMIC_RELEASE); /* the slot is whole: in use */
        return PyLong_FromLong(i);
    }
#else
    (void)mapping;
    (void)text;
    (void)len;
#endif
    return PyLong_FromLong(-1);
}

static PyObject *unguard(PyObject *self, PyObject *arg) {
    long slot = PyLong_AsLong(arg);
    if (slot == -1 && PyErr_Occurred()) return NULL;
#if defined(__linux__)
    if (slot >= 0 && slot < GUARDS) __atomic_store_n(&guards[slot].hi, 0, __ATOMIC_RELEASE);
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"layouts_matched", layouts_matched, METH_NOARGS,
     "layouts_matched() -> int: events matched against learnt layouts since the module loaded."},
    {"layouts_searched", layouts_searched, METH_NOARGS,
     "layouts_searched() -> int: steps of layout matching that searched all of a node's "
     "children one by one, found or not (neither its child table nor its short children had "
     "the next step), since the module loaded."},
    {"layouts", layouts, METH_O,
     "layouts(on) -> bool: whether events are matched against the layouts learnt in their "
     "piece (on by default; BADPUT_NO_LAYOUTS=1 turns it off); returns the setting before."},
    {"drop_spare", drop_spare, METH_NOARGS,
     "drop_spare() -> None: unmap the spare column buffers kept for the next piece's columns."},
    {"mark", mark, METH_VARARGS,
     "mark(ids, seen) -> bool: seen[i] = 1 for each id i of the int32 ids (the last slot for "
     "-1, none), in one pass; False at the first id outside [-1, len(seen) - 1)."},
    {"derive", derive, METH_VARARGS,
     "derive(buffers, columns, constants) -> (bad, negative, first_negative, fits): a piece's "
     "kinds, name ids, pids, tids, flow ids, lengths, devices, streams, op ids and byte counts "
     "in one pass, and whether int32 holds each of device, stream, ext, pid, tid and "
     "correlation (see _fastscan.derive)."},
    {"scan", scan, METH_O,
     "scan(buffer) -> tuple | None: typed columns of a JSON array of trace events, or None "
     "when the text needs the complete decoder."},
    {"guard", guard, METH_VARARGS,
     "guard(mapping, text) -> int: should an access to `mapping` (a buffer: a file's mmap) "
     "fault with SIGBUS (the file shrank), write `text` to stderr and end the process with "
     "status 2; the slot to hand to unguard, -1 where that cannot be (not Linux, all slots "
     "taken)."},
    {"unguard", unguard, METH_O,
     "unguard(slot) -> None: the mapping of `guard`'s slot is no longer guarded (-1: none)."},
    {"scan_events", scan_events, METH_VARARGS,
     "scan_events(buffer, start, first) -> tuple: the columns of the events from `start` on, "
     "then (offset, status, value_end): how the run ended (see scan_run)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&ColumnType) < 0) return NULL;
#ifdef WIDE_SCAN
    __builtin_cpu_init();
    wide_scan = __builtin_cpu_supports("avx2");
#endif
    const char *off = getenv("BADPUT_NO_LAYOUTS");
    if (off && *off && strcmp(off, "0") != 0) use_layouts = 0;
#ifdef COL_MAPPED
    static int at_fork;
    if (!at_fork && pthread_atfork(pool_prefork, pool_postfork, pool_postfork_child) == 0) {
        at_fork = 1;
    }
#endif
    return PyModule_Create(&module);
}
