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
    for (Py_ssize_t i = 0; i < n; i++) w |= (uint64_t)(unsigned char)p[i] << (8 * i);
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

/* Id of the string, adding it if new; -2 on memory failure. */
static int32_t intern(interner *t, const char *p, Py_ssize_t n) {
    if ((size_t)(t->count + 1) * 2 > t->cap && intern_grow(t) < 0) return -2;
    size_t j = hash_bytes(p, n) & (t->cap - 1);
    while (t->slots[j].ptr) {
        if (t->slots[j].len == n && memcmp(t->slots[j].ptr, p, n) == 0) return t->slots[j].id;
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

static inline void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
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

/* Scan a string starting at its opening quote; set [*s, *s + *n) to its raw content. */
static int scan_string(cursor *c, const char **s, Py_ssize_t *n) {
    if (c->p >= c->end || *c->p != '"') return -1;
    const char *start = ++c->p;
    c->escaped = 0;
    while (c->p < c->end) {
#ifdef VEC_SCAN
        int skip16;
        while (c->end - c->p >= 16 && (skip16 = first_special16(c->p)) == 16) c->p += 16;
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
static int scan_int(cursor *c, int64_t *out) {
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
static int scan_us(cursor *c, int64_t *out) {
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

/* memcmp(p, lit, n) == 0 for a short constant n, in a few word compares (overlapping where n
 * is not a multiple of the word); the compiler folds the literal's words. */
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

/* The keys of an event that the scanner reads; EK_OTHER for any other (its value skipped). */
enum { EK_OTHER, EK_PH, EK_CAT, EK_NAME, EK_PID, EK_TID, EK_ID, EK_TS, EK_DUR, EK_ARGS };

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
                if (TAKE_KEY(c, "s\"")) return EK_OTHER;
                break;
            case 'b':
                if (TAKE_KEY(c, "bp\"")) return EK_OTHER;
                break;
        }
    }
    const char *k;
    Py_ssize_t kn;
    if (scan_string(c, &k, &kn) < 0 || c->escaped) return -1;
    return EK_OTHER; /* every key read above has matched as it stands */
}

/* The keys of an event's args that the scanner reads; AK_OTHER for any other. */
enum { AK_OTHER, AK_DEVICE, AK_STREAM, AK_CORRELATION, AK_EXT, AK_EXT_LOWER, AK_BYTES,
       AK_ALLOC_BYTES, AK_TOTAL_ALLOCATED, AK_TOTAL_RESERVED, AK_DEVICE_ID, AK_DEVICE_TYPE,
       AK_SEQ, AK_FWD, AK_COLL, AK_DIMS, AK_TYPES, AK_STRIDES, AK_CONCRETE };

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
                if (TAKE_KEY(c, "cbid\"")) return AK_OTHER;
                if (TAKE_KEY(c, "context\"")) return AK_OTHER;
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
                if (TAKE_KEY(c, "Trace name\"")) return AK_OTHER;
                if (TAKE_KEY(c, "Trace iteration\"")) return AK_OTHER;
                break;
            case 'D':
                if (TAKE_KEY(c, "Device Id\"")) return AK_DEVICE_ID;
                if (TAKE_KEY(c, "Device Type\"")) return AK_DEVICE_TYPE;
                if (TAKE_KEY(c, "Device\"")) return AK_OTHER;
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
                if (TAKE_KEY(c, "queued\"")) return AK_OTHER;
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
                if (TAKE_KEY(c, "Record function id\"")) return AK_OTHER;
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

/* has_coll is set when the args hold a "Collective name" key (NCCL metadata) or a key that
 * names the record a cuda_sync row waited on. */
static int scan_args(cursor *c, args_t *a, int *has_coll, op_t *op) {
    if (c->p >= c->end || *c->p != '{') return -1;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        skip_ws(c);
        int key = args_key(c);
        if (key < 0) return -1;
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') return -1;
        c->p++;
        skip_ws(c);
        int64_t *target = NULL;
        switch (key) {
            case AK_DEVICE: target = &a->device; break;
            case AK_STREAM: target = &a->stream; break;
            case AK_CORRELATION: target = &a->correlation; break;
            case AK_EXT: target = &a->ext; break;
            case AK_EXT_LOWER: target = &a->ext_lower; break;
            case AK_BYTES: target = &a->bytes; break;
            case AK_ALLOC_BYTES: target = &a->alloc_bytes; break;
            case AK_TOTAL_ALLOCATED: target = &a->total_allocated; break;
            case AK_TOTAL_RESERVED: target = &a->total_reserved; break;
            case AK_DEVICE_ID: target = &a->device_id; break;
            case AK_DEVICE_TYPE: target = &a->device_type; break;
            case AK_SEQ: target = &op->seq; break;
            case AK_FWD: target = &op->fwd; break;
        }
        if (target) {
            if (scan_int(c, target) < 0) return -1;
        } else {
            int list = key == AK_DIMS       ? OP_DIMS
                       : key == AK_TYPES    ? OP_TYPES
                       : key == AK_STRIDES  ? OP_STRIDES
                       : key == AK_CONCRETE ? OP_CONCRETE
                                            : -1;
            const char *start = c->p;
            if (key == AK_COLL) *has_coll = 1;
            if (skip_value(c, 2) < 0) return -1;
            if (list >= 0) { /* a repeated key: the last one counts, as in msgspec */
                op->ptr[list] = *start == '[' ? start : NULL;
                op->len[list] = c->p - start;
            }
        }
        skip_ws(c);
        if (c->p >= c->end) return -1;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == '}') {
            c->p++;
            return 0;
        }
        return -1;
    }
}

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

typedef struct {
    column cols[N_COLS];
    interner strings; /* cat and name */
    interner labels;  /* string pid/tid/id */
    interner values;  /* raw texts of the shape-argument lists of kept rows */
    Py_ssize_t seen;
    const char *base; /* start of the input: meta_off counts from here */
    size_t rows;      /* kept rows */
    size_t room;      /* rows the row columns hold without growing */
} scan_state;

/* Set the row columns' `len` from the rows kept. */
static void rows_done(scan_state *st) {
    for (int i = 0; i < N_ROW_COLS; i++) st->cols[i].len = st->rows * COL_SIZE[i];
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

/* One event object; 1 if kept, 0 if its phase is not kept, -1 if the fast path refuses. */
static int scan_event(cursor *c, scan_state *st) {
    if (c->p >= c->end || *c->p != '{') return -1;
    c->p++;
    int phase = -2; /* -2: no "ph" */
    int32_t cat = NO_ID, name = NO_ID, pid_label = NO_ID, tid_label = NO_ID, id_label = NO_ID;
    int64_t pid = NO_ID, tid = NO_ID, ts = 0, dur = 0, id = NO_ID;
    int8_t has_ts = 0, has_dur = 0;
    static const args_t NO_ARGS = {NO_ID, NO_ID, NO_ID, NO_ID, NO_ID, NO_ID,
                                   NO_ID, NO_ID, NO_ID, NO_ID, NO_ID};
    args_t a = NO_ARGS;
    op_t op = NO_OP;
    const char *name_ptr = NULL;
    Py_ssize_t name_len = 0;
    const char *args_ptr = NULL;
    int64_t args_len = 0;
    int has_coll = 0;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            skip_ws(c);
            int key = event_key(c);
            if (key < 0) return -1;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') return -1;
            c->p++;
            skip_ws(c);
            int rc = 0;
            switch (key) {
                case EK_PH: {
                    const char *s;
                    Py_ssize_t n;
                    rc = scan_string(c, &s, &n);
                    if (rc == 0) phase = phase_code(s, n);
                    break;
                }
                case EK_CAT:
                case EK_NAME: {
                    const char *s;
                    Py_ssize_t n;
                    rc = scan_string(c, &s, &n); /* null or a number: refused */
                    if (rc == 0) {
                        int32_t v = intern(&st->strings, s, n);
                        if (v < 0) return -1;
                        if (key == EK_CAT) {
                            cat = v;
                        } else {
                            name = v;
                            name_ptr = s;
                            name_len = n;
                        }
                    }
                    break;
                }
                case EK_PID:
                    rc = scan_id(c, &st->labels, &pid, &pid_label);
                    break;
                case EK_TID:
                    rc = scan_id(c, &st->labels, &tid, &tid_label);
                    break;
                case EK_ID:
                    rc = scan_id(c, &st->labels, &id, &id_label);
                    break;
                case EK_TS:
                    rc = scan_us(c, &ts);
                    has_ts = 1;
                    break;
                case EK_DUR:
                    rc = scan_us(c, &dur);
                    has_dur = 1;
                    break;
                case EK_ARGS:
                    args_ptr = c->p;
                    /* a repeated "args" key: the last one counts, as in msgspec */
                    has_coll = 0;
                    a = NO_ARGS;
                    op = NO_OP;
                    rc = scan_args(c, &a, &has_coll, &op);
                    args_len = (int64_t)(c->p - args_ptr);
                    break;
                default:
                    rc = skip_value(c, 1);
            }
            if (rc < 0) return -1;
            skip_ws(c);
            if (c->p >= c->end) return -1;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p == '}') {
                c->p++;
                break;
            }
            return -1;
        }
    }
    st->seen++;
    if (phase == -2) return -1; /* no ph: the slow path keeps the same accounting */
    if (phase < 0) return 0;
    if (phase == 4 && !(name_len == 8 && memcmp(name_ptr, "[memory]", 8) == 0)) return 0;
    int8_t ph8 = (int8_t)phase;
    if (st->rows >= st->room && row_room(st) < 0) return -1;
    size_t r = st->rows++;
/* The value at row r of a row column (its type's size is the column's). */
#define PUT(col, v) memcpy(st->cols[col].data + r * sizeof(v), &(v), sizeof(v))
    PUT(COL_PHASE, ph8);
    PUT(COL_CAT, cat);
    PUT(COL_NAME, name);
    PUT(COL_PID, pid);
    PUT(COL_PID_LABEL, pid_label);
    PUT(COL_TID, tid);
    PUT(COL_TID_LABEL, tid_label);
    PUT(COL_TS, ts);
    PUT(COL_HAS_TS, has_ts);
    PUT(COL_DUR, dur);
    PUT(COL_HAS_DUR, has_dur);
    PUT(COL_ID, id);
    PUT(COL_ID_LABEL, id_label);
    PUT(COL_DEVICE, a.device);
    PUT(COL_STREAM, a.stream);
    PUT(COL_CORRELATION, a.correlation);
    PUT(COL_EXT, a.ext);
    PUT(COL_EXT_LOWER, a.ext_lower);
    PUT(COL_BYTES, a.bytes);
    PUT(COL_ALLOC_BYTES, a.alloc_bytes);
    PUT(COL_TOTAL_ALLOCATED, a.total_allocated);
    PUT(COL_TOTAL_RESERVED, a.total_reserved);
    PUT(COL_DEVICE_ID, a.device_id);
    PUT(COL_DEVICE_TYPE, a.device_type);
#undef PUT
    if (has_coll) {
        int64_t row = (int64_t)r;
        int64_t off = (int64_t)(args_ptr - st->base);
        if (col_push(&st->cols[COL_META_ROW], &row, 8) < 0 ||
            col_push(&st->cols[COL_META_OFF], &off, 8) < 0 ||
            col_push(&st->cols[COL_META_LEN], &args_len, 8) < 0)
            return -1;
    }
    if (op.ptr[OP_DIMS] || op.ptr[OP_TYPES] || op.ptr[OP_STRIDES] || op.ptr[OP_CONCRETE] ||
        op.seq != NO_ID || op.fwd != NO_ID) {
        int64_t row = (int64_t)r;
        int32_t ids[N_OP_LISTS];
        for (int i = 0; i < N_OP_LISTS; i++) {
            ids[i] = op.ptr[i] ? intern(&st->values, op.ptr[i], op.len[i]) : NO_ID;
            if (ids[i] == -2) return -1;
        }
        if (col_push(&st->cols[COL_OP_ROW], &row, 8) < 0 ||
            col_push(&st->cols[COL_OP_DIMS], &ids[OP_DIMS], 4) < 0 ||
            col_push(&st->cols[COL_OP_TYPES], &ids[OP_TYPES], 4) < 0 ||
            col_push(&st->cols[COL_OP_STRIDES], &ids[OP_STRIDES], 4) < 0 ||
            col_push(&st->cols[COL_OP_CONCRETE], &ids[OP_CONCRETE], 4) < 0 ||
            col_push(&st->cols[COL_OP_SEQ], &op.seq, 8) < 0 ||
            col_push(&st->cols[COL_OP_FWD], &op.fwd, 8) < 0)
            return -1;
    }
    return 1;
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
        const char *p = slots[i].ptr;
        Py_ssize_t n = slots[i].len;
        PyObject *s = NULL;
        if (as_text && !memchr(p, '\\', (size_t)n)) {
            s = PyUnicode_DecodeUTF8(p, n, NULL);
            if (!s) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {  /* out of memory */
                    Py_DECREF(list);
                    return NULL;
                }
                PyErr_Clear();  /* not UTF-8: given as bytes, for Python to refuse */
            }
        }
        if (!s) s = PyBytes_FromStringAndSize(p, n);
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

static PyMethodDef methods[] = {
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
    {"scan_events", scan_events, METH_VARARGS,
     "scan_events(buffer, start, first) -> tuple: the columns of the events from `start` on, "
     "then (offset, status, value_end): how the run ended (see scan_run)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&ColumnType) < 0) return NULL;
#ifdef COL_MAPPED
    static int at_fork;
    if (!at_fork && pthread_atfork(pool_prefork, pool_postfork, pool_postfork_child) == 0) {
        at_fork = 1;
    }
#endif
    return PyModule_Create(&module);
}
