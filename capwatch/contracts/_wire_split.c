/* The fast decoder's splitter (capwatch/contracts/wire_split.py has the contract and a
 * pure-Python reference of it; docs/performance.md "The hot path").
 *
 * split(raw) cuts a transition event's two state texts out of its message in one pass:
 * msgspec's own parse then reads only the rest (an "envelope" where each state's array is
 * replaced by "[]"), where it skipped the states' texts byte by byte (~0.7 ns a byte), and
 * the keys are compared here, exactly, where the key guard counted colons over the
 * message. Nothing is validated here: the envelope is parsed by msgspec, and the states'
 * texts are read (known text, known pieces, or parsed) by wire_fast as before. Whatever
 * this returns for a message that is not valid JSON, one of those refuses it (see
 * wire_split.py for why). A message this does not cut (None) takes the decoder's other
 * way, which is complete on its own. Strings may hold escapes (a backslash takes the byte
 * after it); a key holding one is not compared here, and the message is not cut.
 *
 * split_trace(raw) does the same for a trace event's "states", each state's text cut out.
 *
 * canonical(text) sorts a state text's atoms when they are out of order (wire_split.py's
 * canonical has the contract and the reasons), for the decoder's texts not read before.
 *
 * piece_ids(text, pieces) is wire_atoms.ids' lookup of a state's pieces in one table
 * (wire_atoms.reference_ids has the contract): the pieces cut at each ']' and looked up
 * here, where bytes.split built a list of them, _first the first one's spelling, and
 * map() called the dict's __getitem__ through its method wrapper for each.
 *
 * Built by setup.py with CAPWATCH_COMPILE=1 beside the mypyc modules; never required.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_KEYS 32

static inline int is_ws(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Without -mpopcnt (not every x86-64 has the instruction), GCC's builtin is a call. */
static inline Py_ssize_t bits(uint32_t x) {
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0F0F0F0Fu;
    return (Py_ssize_t)((x * 0x01010101u) >> 24);
}

/* A run of whitespace past its first two bytes, 16 bytes at a time: an indented text's
 * runs (a newline and the indent before each atom and string) were walked byte by byte. */
static const unsigned char *skip_ws_run(const unsigned char *p, const unsigned char *end) {
#ifdef __SSE2__
    const __m128i sp = _mm_set1_epi8(' '), tab = _mm_set1_epi8('\t'),
                  nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, sp), _mm_cmpeq_epi8(v, tab)),
                                  _mm_or_si128(_mm_cmpeq_epi8(v, nl), _mm_cmpeq_epi8(v, cr)));
        uint32_t other = ~(uint32_t)_mm_movemask_epi8(ws) & 0xFFFFu;
        if (other)
            return p + __builtin_ctz(other);
        p += 16;
    }
#endif
    while (p < end && is_ws(*p))
        p++;
    return p;
}

/* The first byte at or after p that is not whitespace (end when none): a compact text's
 * runs (none, or the space after a comma) in two comparisons, longer runs by blocks. */
static inline const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end) {
    if (p < end && is_ws(*p)) {
        p++;
        if (p < end && is_ws(*p))
            return skip_ws_run(p + 1, end);
    }
    return p;
}

/* One past the quote closing the string opening at p (*p == '"'), a backslash taking the
 * byte after it as JSON's escapes do; NULL when the text ends first. */
static const unsigned char *skip_string(const unsigned char *p, const unsigned char *end) {
    for (const unsigned char *q = p + 1; q < end; q++) {
        if (*q == '"')
            return q + 1;
        if (*q == '\\') {
            if (end - q < 2)
                return NULL;
            q++;
        }
    }
    return NULL;
}

#ifdef __SSE2__
/* Bit i set when byte i of the 32 at q is c. */
static inline uint32_t mask32(__m128i lo, __m128i hi, char c) {
    const __m128i v = _mm_set1_epi8(c);
    return (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(lo, v))
        | ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(hi, v)) << 16);
}

/* Bit i set when an odd number of the quotes' bits are at or below i: the bytes of a
 * string but its closing quote (no backslash), carry the state before the block. */
static inline uint32_t inside_strings(uint32_t quotes, uint32_t *carry) {
    uint32_t inside = quotes;
    inside ^= inside << 1;
    inside ^= inside << 2;
    inside ^= inside << 4;
    inside ^= inside << 8;
    inside ^= inside << 16;
    inside ^= *carry;
    *carry = (inside & 0x80000000u) ? 0xFFFFFFFFu : 0;
    return inside;
}
#endif

/* One past the ']' that closes the array opening at p (*p == '['), brackets inside
 * strings not counted; NULL when the text ends first. With escapes (the message holds a
 * backslash), the scalar loop only. */
static const unsigned char *skip_array(const unsigned char *p, const unsigned char *end,
                                       int escapes) {
    Py_ssize_t depth = 0;
    int in_string = 0;
    const unsigned char *q = p;
#ifdef __SSE2__
    if (escapes)
        goto scalar;
    /* 32 bytes at a time: the bytes inside strings found by a prefix xor of the quotes'
     * mask; a block whose closing brackets cannot bring the depth to zero is only
     * counted, the others walked bracket by bracket. */
    const __m128i quote = _mm_set1_epi8('"'), open = _mm_set1_epi8('['),
                  close = _mm_set1_epi8(']');
    uint32_t carry = 0;
    while (end - q >= 32) {
        __m128i lo = _mm_loadu_si128((const __m128i *)q);
        __m128i hi = _mm_loadu_si128((const __m128i *)(q + 16));
        uint32_t quotes = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(lo, quote))
            | ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(hi, quote)) << 16);
        uint32_t opens = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(lo, open))
            | ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(hi, open)) << 16);
        uint32_t closes = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(lo, close))
            | ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(hi, close)) << 16);
        uint32_t inside = quotes;
        inside ^= inside << 1;
        inside ^= inside << 2;
        inside ^= inside << 4;
        inside ^= inside << 8;
        inside ^= inside << 16;
        inside ^= carry;
        carry = (inside & 0x80000000u) ? 0xFFFFFFFFu : 0;
        opens &= ~inside;
        closes &= ~inside;
        Py_ssize_t n_close = bits(closes);
        if (depth - n_close > 0) {
            depth += bits(opens) - n_close;
        } else {
            uint32_t marks = opens | closes;
            while (marks) {
                int i = __builtin_ctz(marks);
                marks &= marks - 1;
                if ((opens >> i) & 1)
                    depth++;
                else if (--depth == 0)
                    return q + i + 1;
            }
        }
        q += 32;
    }
    in_string = carry != 0;
scalar:
#endif
    for (; q < end; q++) {
        unsigned char c = *q;
        if (in_string) {
            if (c == '"') {
                in_string = 0;
            } else if (c == '\\') {
                if (end - q < 2)
                    return NULL;
                q++;
            }
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '[') {
            depth++;
        } else if (c == ']') {
            if (--depth == 0)
                return q + 1;
        }
    }
    return NULL;
}

/* A state's text in its canonical form (wire_split.canonical has the contract): the text
 * itself unless its atoms are flat and out of order (as bytes); then the atoms' texts
 * without whitespace but one space after each comma, sorted as bytes, joined by ", ". */
typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} piece;

/* The order of bytes objects: memcmp, then the shorter first. */
static inline int compare_bytes(const unsigned char *a, Py_ssize_t an, const unsigned char *b,
                                Py_ssize_t bn) {
    int c = memcmp(a, b, (size_t)(an < bn ? an : bn));
    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn;
}

/* The order of bytes objects over pieces, the first 8 bytes compared as one big-endian
 * word before memcmp's call (a state's atoms mostly differ there: names, or their first
 * argument). */
static inline int piece_order(const piece *a, const piece *b) {
    if (a->n >= 8 && b->n >= 8) {
        uint64_t x, y;
        memcpy(&x, a->p, 8);
        memcpy(&y, b->p, 8);
        if (x != y) {
            x = __builtin_bswap64(x);
            y = __builtin_bswap64(y);
            return x < y ? -1 : 1;
        }
    }
    return compare_bytes(a->p, a->n, b->p, b->n);
}

/* v[0:n] sorted by piece_order: a merge sort (tmp holds n / 2 + 1 pieces), insertion
 * below SMALL_SORT, a half already before the other left as it is. qsort's merge sort
 * called a comparison through a pointer for each comparison and copied the pieces
 * through a generic swap (~9 k instructions a state of ~30 atoms, a third of
 * canonical_text on a steady outside message, callgrind, session 19). Equal pieces are
 * equal bytes, so the text written is the same whatever the order among them. */
#define SMALL_SORT 12
static void sort_pieces(piece *v, piece *tmp, Py_ssize_t n) {
    if (n <= SMALL_SORT) {
        for (Py_ssize_t i = 1; i < n; i++) {
            piece x = v[i];
            Py_ssize_t j = i;
            while (j > 0 && piece_order(&v[j - 1], &x) > 0) {
                v[j] = v[j - 1];
                j--;
            }
            v[j] = x;
        }
        return;
    }
    Py_ssize_t m = n / 2;
    sort_pieces(v, tmp, m);
    sort_pieces(v + m, tmp, n - m);
    if (piece_order(&v[m - 1], &v[m]) <= 0)
        return;
    memcpy(tmp, v, sizeof(piece) * (size_t)m);
    Py_ssize_t i = 0, j = m, k = 0;
    while (i < m && j < n)
        v[k++] = piece_order(&v[j], &tmp[i]) < 0 ? v[j++] : tmp[i++];
    while (i < m)
        v[k++] = tmp[i++];
}

#ifdef __SSE2__
/* What canonical() makes of the text [a, n) (a[0] == '['), decided in one pass of 32-byte
 * masks, a walk over the brackets and a comparison per atom (~0.3 us for 46 atoms): 1
 * when it is the text itself (its atoms, as the brackets outside strings delimit them, in
 * order as bytes; one holding another (not flat); or the text not one array, its brackets
 * never closing or closing before its end); 0 when its atoms are out of order and the
 * array ends at the text's end (canonical_build decides); -1 when a backslash comes
 * before either is known (the scalar walks decide). The array's end is checked here, in
 * the same pass, where skip_array walked the whole text once more before this (~1% of a
 * steady outside message, callgrind, session 19): the walk up to a decision sees the
 * tokens skip_array sees (no backslash in any block walked), and a text not flat, or in
 * order, is the text itself whether or not the array ends where the text does. */
static int canonical_check(const unsigned char *a, Py_ssize_t n) {
    Py_ssize_t at = 0;
    uint32_t carry = 0;
    int depth = 0, in_order = 1;
    Py_ssize_t atom = -1, prev = -1, prev_n = 0;
    unsigned char tail[32];
    while (at < n) {
        const unsigned char *q = a + at;
        uint32_t valid = 0xFFFFFFFFu;
        if (n - at < 32) {
            memset(tail, 0, sizeof tail);
            memcpy(tail, q, (size_t)(n - at));
            q = tail;
            valid = (1u << (n - at)) - 1;
        }
        __m128i lo = _mm_loadu_si128((const __m128i *)q);
        __m128i hi = _mm_loadu_si128((const __m128i *)(q + 16));
        if (mask32(lo, hi, '\\') & valid)
            return -1;
        uint32_t out = ~inside_strings(mask32(lo, hi, '"'), &carry) & valid;
        uint32_t opens = mask32(lo, hi, '[') & out;
        uint32_t marks = (opens | mask32(lo, hi, ']')) & out;
        while (marks) {
            int i = __builtin_ctz(marks);
            marks &= marks - 1;
            Py_ssize_t g = at + i;
            if ((opens >> i) & 1) {
                if (depth == 2)
                    return 1;  /* not flat: as it is */
                if (depth++ == 1)
                    atom = g;
            } else if (depth == 2) {
                Py_ssize_t len = g + 1 - atom;
                if (in_order && prev >= 0 && compare_bytes(a + prev, prev_n, a + atom, len) > 0)
                    in_order = 0;  /* walked on to the array's end, counting only */
                prev = atom;
                prev_n = len;
                depth = 1;
            } else {
                /* The array's closing bracket (a[0] opened it: no ']' comes at depth 0). */
                return in_order || g != n - 1 ? 1 : 0;
            }
        }
        at += 32;
    }
    return 1;  /* never closed: not an array, as it is */
}
#endif

/* The canonical text of [a, b), an array as skip_array found it (a new reference): a copy
 * of it as it is unless it is an array of flat arrays (outside strings only brackets,
 * commas and whitespace, one comma between atoms) out of order. */
static PyObject *canonical_build(const unsigned char *a, const unsigned char *b, int escapes) {
    Py_ssize_t n = b - a;
    /* Each atom's canonical text written to buf (at most twice its bytes: a space after
     * each comma), its place in atoms. */
    unsigned char *buf = PyMem_Malloc((size_t)(2 * n + 2));
    piece *atoms = PyMem_Malloc(sizeof(piece) * (size_t)(n / 2 + 1));
    if (buf == NULL || atoms == NULL) {
        PyMem_Free(buf);
        PyMem_Free(atoms);
        return PyErr_NoMemory();
    }
    Py_ssize_t count = 0, total = 0;
    unsigned char *w = buf;
    const unsigned char *last = b - 1, *p = skip_ws(a + 1, last);
    const unsigned char *raw_prev = NULL;
    Py_ssize_t raw_prev_n = 0;
    int ok = 1, sorted = 1;
    if (p < last) {
        for (;;) {
            if (*p != '[') {
                ok = 0;
                break;
            }
            unsigned char *start = w;
            const unsigned char *raw_start = p;
            *w++ = '[';
            p++;
            for (;;) {
                p = skip_ws(p, last);
                const unsigned char *q;
                if (p == last) {
                    ok = 0;
                    break;
                }
                if (*p == '"') {
                    /* Without escapes, a string ends at the next quote (memchr: names of
                     * 100-250 characters were copied at ~1 ns a byte). */
                    if (escapes) {
                        q = skip_string(p, last);
                    } else {
                        q = memchr(p + 1, '"', (size_t)(last - p - 1));
                        q = q == NULL ? NULL : q + 1;
                    }
                    if (q == NULL) {
                        ok = 0;
                        break;
                    }
                    memcpy(w, p, (size_t)(q - p));
                    w += q - p;
                    p = q;
                } else if (*p == ',') {
                    *w++ = ',';
                    *w++ = ' ';
                    p++;
                } else if (*p == ']') {
                    *w++ = ']';
                    p++;
                    break;
                } else {
                    ok = 0;
                    break;
                }
            }
            if (!ok)
                break;
            if (count > 0 && compare_bytes(raw_prev, raw_prev_n, raw_start, p - raw_start) > 0)
                sorted = 0;
            raw_prev = raw_start;
            raw_prev_n = p - raw_start;
            atoms[count].p = start;
            atoms[count++].n = w - start;
            total += w - start;
            p = skip_ws(p, last);
            if (p == last)
                break;
            if (*p != ',') {
                ok = 0;
                break;
            }
            p = skip_ws(p + 1, last);
            if (p == last) {
                ok = 0;
                break;
            }
        }
    }
    Py_ssize_t size = total + 2 * (count > 0 ? count - 1 : 0) + 2;
    int same = !ok || sorted;
    PyObject *result;
    if (same) {
        result = PyBytes_FromStringAndSize((const char *)a, n);
    } else {
        piece *tmp = PyMem_Malloc(sizeof(piece) * (size_t)(count / 2 + 1));
        if (tmp == NULL) {
            PyMem_Free(buf);
            PyMem_Free(atoms);
            return PyErr_NoMemory();
        }
        sort_pieces(atoms, tmp, count);
        PyMem_Free(tmp);
        result = PyBytes_FromStringAndSize(NULL, size);
        if (result != NULL) {
            char *o = PyBytes_AS_STRING(result);
            *o++ = '[';
            for (Py_ssize_t i = 0; i < count; i++) {
                if (i > 0) {
                    *o++ = ',';
                    *o++ = ' ';
                }
                memcpy(o, atoms[i].p, (size_t)atoms[i].n);
                o += atoms[i].n;
            }
            *o = ']';
        }
    }
    PyMem_Free(buf);
    PyMem_Free(atoms);
    return result;
}

/* The members' walk of both splitters (wire_split._members): 1 when the text [start, end)
 * is one object whose keys hold no backslash and are all different, its member count in
 * *keys and the spans of the values (each an array: else 0) of "state" and "next_state"
 * (trace 0) or of "states" (trace 1) given, and with trace 1 each state's text appended
 * to `states` (cut_states); 0 otherwise; -1 on a Python error. */
typedef struct {
    const unsigned char *at, *end;
} span;

/* A trace's "states" array opening at p, walked element by element: each element (an
 * array) appended to `states` as its text; one past the array's closing bracket, NULL
 * when it is not an array of arrays (*error set on a Python error). The elements' walks
 * see the tokens a walk of the whole array sees, so this ends where skip_array would;
 * walked here once, where split_trace walked the array whole (inside members) and then
 * each element again (~8% of a steady outside message, callgrind, session 19). */
static const unsigned char *cut_states(const unsigned char *p, const unsigned char *end,
                                       int escapes, PyObject *states, int *error) {
    p = skip_ws(p + 1, end);
    if (p == end)
        return NULL;
    if (*p == ']')
        return p + 1;
    for (;;) {
        if (*p != '[')
            return NULL;
        const unsigned char *q = skip_array(p, end, escapes);
        if (q == NULL)
            return NULL;
        PyObject *text = PyBytes_FromStringAndSize((const char *)p, q - p);
        if (text == NULL || PyList_Append(states, text) < 0) {
            Py_XDECREF(text);
            *error = 1;
            return NULL;
        }
        Py_DECREF(text);
        p = skip_ws(q, end);
        if (p == end)
            return NULL;
        if (*p == ']')
            return p + 1;
        if (*p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
        if (p == end || *p == ']')
            return NULL;  /* a comma before the closing bracket */
    }
}

static inline __attribute__((always_inline)) int members(
        const unsigned char *start, const unsigned char *end, int escapes, int trace,
        span *spans, int *keys_out, PyObject *states) {
    const unsigned char *key_at[MAX_KEYS];
    Py_ssize_t key_len[MAX_KEYS];
    int keys = 0;
    const unsigned char *p = skip_ws(start, end);
    if (p == end || *p != '{')
        return 0;
    p = skip_ws(p + 1, end);
    for (;;) {
        if (p == end || *p != '"')
            return 0;
        const unsigned char *k = p + 1;
        const unsigned char *k_end = memchr(k, '"', (size_t)(end - k));
        if (k_end == NULL || keys == MAX_KEYS)
            return 0;
        Py_ssize_t len = k_end - k;
        /* A key with an escape is compared as its bytes nowhere: not cut. */
        if (escapes && memchr(k, '\\', (size_t)len) != NULL)
            return 0;
        for (int i = 0; i < keys; i++) {
            if (key_len[i] == len && memcmp(key_at[i], k, (size_t)len) == 0)
                return 0;  /* a key twice: the schema's decoder says so */
        }
        key_at[keys] = k;
        key_len[keys++] = len;
        /* A trace's states: no transition, and the trace splitter walks it next (walked
         * to its end here, a trace's states cost ~3.5% of its decode, callgrind). */
        if (!trace && len == 6 && memcmp(k, "states", 6) == 0)
            return 0;
        p = skip_ws(k_end + 1, end);
        if (p == end || *p != ':')
            return 0;
        p = skip_ws(p + 1, end);
        if (p == end)
            return 0;
        const unsigned char *value = p;
        if (*p == '"') {
            p = skip_string(p, end);
            if (p == NULL)
                return 0;
        } else if (*p == '[') {
            if (trace && len == 6 && memcmp(k, "states", 6) == 0) {
                int error = 0;
                p = cut_states(p, end, escapes, states, &error);
                if (error)
                    return -1;
            } else {
                p = skip_array(p, end, escapes);
            }
            if (p == NULL)
                return 0;
        } else if (*p == '{') {
            return 0;  /* no member of an event is an object */
        } else {
            while (p < end && *p != ',' && *p != '}' && *p != ']' && !is_ws(*p))
                p++;
        }
        /* Constant names and lengths (inlined with trace constant: a loop over the
         * names cost ~800 instructions a transition message, callgrind). */
        int at = -1;
        if (trace) {
            if (len == 6 && memcmp(k, "states", 6) == 0)
                at = 0;
        } else if (len == 5 && memcmp(k, "state", 5) == 0) {
            at = 0;
        } else if (len == 10 && memcmp(k, "next_state", 10) == 0) {
            at = 1;
        }
        if (at >= 0) {
            if (*value != '[')
                return 0;
            spans[at].at = value;
            spans[at].end = p;
        }
        p = skip_ws(p, end);
        if (p == end)
            return 0;
        if (*p == '}')
            break;
        if (*p != ',')
            return 0;
        p = skip_ws(p + 1, end);
    }
    if (skip_ws(p + 1, end) != end)
        return 0;
    *keys_out = keys;
    return 1;
}


static PyObject *split(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "split() takes bytes");
        return NULL;
    }
    const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    const unsigned char *end = start + n;
    int escapes = memchr(start, '\\', (size_t)n) != NULL;
    span spans[2] = {{NULL, NULL}, {NULL, NULL}};
    int keys = 0;
    if (members(start, end, escapes, 0, spans, &keys, NULL) != 1
        || spans[0].at == NULL || spans[1].at == NULL)
        Py_RETURN_NONE;
    const unsigned char *state = spans[0].at, *state_end = spans[0].end;
    const unsigned char *next = spans[1].at, *next_end = spans[1].end;
    /* The envelope: the message with each state's array replaced by "[]". */
    const unsigned char *a = state, *b = state_end, *c = next, *d = next_end;
    if (c < a) {
        a = next, b = next_end, c = state, d = state_end;
    }
    Py_ssize_t size = n - (b - a) - (d - c) + 4;
    PyObject *envelope = PyBytes_FromStringAndSize(NULL, size);
    if (envelope == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(envelope);
    memcpy(out, start, (size_t)(a - start));
    out += a - start;
    memcpy(out, "[]", 2);
    out += 2;
    memcpy(out, b, (size_t)(c - b));
    out += c - b;
    memcpy(out, "[]", 2);
    out += 2;
    memcpy(out, d, (size_t)(end - d));
    PyObject *state_text = PyBytes_FromStringAndSize((const char *)state, state_end - state);
    PyObject *next_text = PyBytes_FromStringAndSize((const char *)next, next_end - next);
    if (state_text == NULL || next_text == NULL) {
        Py_DECREF(envelope);
        Py_XDECREF(state_text);
        Py_XDECREF(next_text);
        return NULL;
    }
    PyObject *count = PyLong_FromLong(keys);
    PyObject *result = count == NULL ? NULL : PyTuple_New(4);
    if (result == NULL) {
        Py_DECREF(envelope);
        Py_DECREF(state_text);
        Py_DECREF(next_text);
        Py_XDECREF(count);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, envelope);
    PyTuple_SET_ITEM(result, 1, state_text);
    PyTuple_SET_ITEM(result, 2, next_text);
    PyTuple_SET_ITEM(result, 3, count);
    return result;
}

/* wire_split.reference_trace: a trace's states' texts cut out of its message, msgspec
 * then parsing the rest only (it skipped the texts byte by byte for their Raw members,
 * and the key guard counted the colons over them). */
static PyObject *split_trace(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "split_trace() takes bytes");
        return NULL;
    }
    const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    const unsigned char *end = start + n;
    int escapes = memchr(start, '\\', (size_t)n) != NULL;
    span spans[1] = {{NULL, NULL}};
    int keys = 0;
    PyObject *states = PyList_New(0);
    if (states == NULL)
        return NULL;
    int walked = members(start, end, escapes, 1, spans, &keys, states);
    if (walked < 0) {
        Py_DECREF(states);
        return NULL;
    }
    if (walked == 0 || spans[0].at == NULL)
        goto uncut;
    const unsigned char *a = spans[0].at, *b = spans[0].end;
    PyObject *envelope = PyBytes_FromStringAndSize(NULL, n - (b - a) + 2);
    if (envelope == NULL) {
        Py_DECREF(states);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(envelope);
    memcpy(out, start, (size_t)(a - start));
    out += a - start;
    memcpy(out, "[]", 2);
    out += 2;
    memcpy(out, b, (size_t)(end - b));
    PyObject *count = PyLong_FromLong(keys);
    PyObject *result = count == NULL ? NULL : PyTuple_New(3);
    if (result == NULL) {
        Py_DECREF(envelope);
        Py_DECREF(states);
        Py_XDECREF(count);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, envelope);
    PyTuple_SET_ITEM(result, 1, states);
    PyTuple_SET_ITEM(result, 2, count);
    return result;
uncut:
    Py_DECREF(states);
    Py_RETURN_NONE;
}

static PyObject *canonical_text(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "canonical() takes bytes");
        return NULL;
    }
    const unsigned char *a = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    if (n < 2 || a[0] != '[') {
        Py_INCREF(arg);
        return arg;
    }
#ifdef __SSE2__
    int check = canonical_check(a, n);
    if (check == 1) {
        Py_INCREF(arg);
        return arg;
    }
    if (check == 0)
        return canonical_build(a, a + n, 0);
#endif
    /* A backslash (or no SSE2): the array's end found by the scalar walk. */
    int escapes = memchr(a, '\\', (size_t)n) != NULL;
    if (skip_array(a, a + n, escapes) != a + n) {
        Py_INCREF(arg);
        return arg;
    }
    return canonical_build(a, a + n, escapes);
}

/* Whether canonical_text would return the text itself (wire_split.in_order): its check's
 * pass alone where the check decides, without the build (~4 of ~19 k instructions of a
 * 1 KB text out of order). A backslash leaves the decision to canonical_text itself. */
static PyObject *in_order(PyObject *module, PyObject *arg) {
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "in_order() takes bytes");
        return NULL;
    }
    const unsigned char *a = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    if (n < 2 || a[0] != '[')
        Py_RETURN_TRUE;
#ifdef __SSE2__
    int check = canonical_check(a, n);
    if (check == 1)
        Py_RETURN_TRUE;
    if (check == 0)
        Py_RETURN_FALSE;  /* canonical_build returns a new object */
#endif
    PyObject *canon = canonical_text(module, arg);
    if (canon == NULL)
        return NULL;
    int same = canon == arg;
    Py_DECREF(canon);
    return PyBool_FromLong(same);
}

/* PieceIndex: wire_atoms.PIECES' current table mirrored for piece_ids (wire_atoms has
 * the contract: every entry here is one of PIECES', with its id; PIECES may hold more).
 * piece_ids over a dict made a bytes object of each piece, hashed it with SipHash and
 * looked it up (~20% of a trace's decode on an outside producer's fleet, session 16);
 * here a piece is hashed where it lies in the text, with a keyed multiply-mix hash, and
 * compared in place with its key (memcmp): no object is made. The hash is no defence
 * against collisions chosen by a producer, so a probe stops after MAX_PROBE slots: a
 * piece beyond that is not added (add() returns False) and is not found, and its state
 * is parsed whole by msgspec as any state with a piece not known (correct, slower). */
#define MAX_PROBE 32

typedef struct {
    uint64_t hash; /* 0: an empty slot */
    PyObject *key;  /* bytes */
    PyObject *value;
} index_slot;

typedef struct {
    PyObject_HEAD
    index_slot *slots;
    Py_ssize_t size; /* a power of two, or 0 */
    Py_ssize_t used;
    uint64_t seed;
} PieceIndex;

static inline uint64_t load64(const unsigned char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline uint64_t mix(uint64_t a, uint64_t b) {
    /* The high and low halves of a 64x64 product folded (wyhash's "mum"). */
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/* A piece's hash, as wyhash reads a short text: 16 bytes at a time, the last 1-7 by
 * overlapping loads; the length is mixed in first. */
static inline uint32_t load32(const unsigned char *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

static inline uint64_t piece_hash(uint64_t seed, const unsigned char *p, Py_ssize_t n) {
    uint64_t h = seed ^ mix((uint64_t)n ^ 0x9E3779B97F4A7C15ull, 0xA0761D6478BD642Full);
    while (n >= 16) {
        h = mix(load64(p) ^ h ^ 0xA0761D6478BD642Full, load64(p + 8) ^ 0xE7037ED1A0B428DBull);
        p += 16;
        n -= 16;
    }
    uint64_t a = 0, b = 0;
    if (n >= 8) {
        a = load64(p);
        b = load64(p + n - 8);
    } else if (n >= 4) {
        a = load32(p);
        b = load32(p + n - 4);
    } else if (n > 0) {
        a = ((uint64_t)p[0] << 16) | ((uint64_t)p[n >> 1] << 8) | p[n - 1];
    }
    h = mix(a ^ h ^ 0x8EBC6AF09C88C6E3ull, b ^ 0x589965CC75374CC3ull);
    h = mix(h ^ seed, 0x1D8E4E27C47D124Full);
    return h == 0 ? 1 : h;
}

/* The slot of the piece [a, a + an) (found: its key equal), or NULL. */
static inline index_slot *index_find(PieceIndex *index, const unsigned char *a, Py_ssize_t an) {
    if (index->used == 0)
        return NULL;
    uint64_t h = piece_hash(index->seed, a, an);
    Py_ssize_t mask = index->size - 1, at = (Py_ssize_t)(h >> 7) & mask;
    for (int probe = 0; probe < MAX_PROBE; probe++) {
        index_slot *slot = &index->slots[at];
        if (slot->hash == 0)
            return NULL;
        if (slot->hash == h && PyBytes_GET_SIZE(slot->key) == an
            && memcmp(PyBytes_AS_STRING(slot->key), a, (size_t)an) == 0)
            return slot;
        at = (at + 1) & mask;
    }
    return NULL;
}

static void index_release(PieceIndex *index) {
    for (Py_ssize_t i = 0; i < index->size; i++) {
        if (index->slots[i].hash != 0) {
            Py_DECREF(index->slots[i].key);
            Py_DECREF(index->slots[i].value);
        }
    }
    PyMem_Free(index->slots);
    index->slots = NULL;
    index->size = 0;
    index->used = 0;
}

/* Places an entry (its hash known) in a table with room; 0 when MAX_PROBE slots are all
 * taken. */
static int index_place(index_slot *slots, Py_ssize_t size, index_slot entry) {
    Py_ssize_t mask = size - 1, at = (Py_ssize_t)(entry.hash >> 7) & mask;
    for (int probe = 0; probe < MAX_PROBE; probe++) {
        if (slots[at].hash == 0) {
            slots[at] = entry;
            return 1;
        }
        at = (at + 1) & mask;
    }
    return 0;
}

/* Whether a slot within MAX_PROBE of the hash's is free. */
static int index_free(PieceIndex *index, uint64_t hash) {
    Py_ssize_t mask = index->size - 1, at = (Py_ssize_t)(hash >> 7) & mask;
    for (int probe = 0; probe < MAX_PROBE && index->size > 0; probe++) {
        if (index->slots[at].hash == 0)
            return 1;
        at = (at + 1) & mask;
    }
    return 0;
}

static PyObject *index_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PieceIndex *index = (PieceIndex *)self;
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "add() takes bytes and an int");
        return NULL;
    }
    const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    index_slot *found = index_find(index, k, n);
    if (found != NULL) {
        Py_INCREF(args[1]);
        Py_SETREF(found->value, args[1]);
        Py_RETURN_TRUE;
    }
    index_slot entry = {piece_hash(index->seed, k, n), args[0], args[1]};
    /* Grown to twice its size when half full, or when the probe is too long and the
     * table a quarter full (chance); a probe too long in a sparser table is collisions
     * (chosen ones, say): the piece is not kept. An entry that no longer fits its probe
     * in the grown table is dropped (the index holds a subset of PIECES). */
    while (2 * (index->used + 1) > index->size
           || (!index_free(index, entry.hash) && 4 * index->used > index->size)) {
        Py_ssize_t size = index->size == 0 ? 1024 : 2 * index->size;
        index_slot *slots = PyMem_Calloc((size_t)size, sizeof(index_slot));
        if (slots == NULL)
            return PyErr_NoMemory();
        Py_ssize_t used = 0;
        for (Py_ssize_t i = 0; i < index->size; i++) {
            index_slot e = index->slots[i];
            if (e.hash == 0)
                continue;
            if (index_place(slots, size, e)) {
                used++;
            } else {
                Py_DECREF(e.key);
                Py_DECREF(e.value);
            }
        }
        PyMem_Free(index->slots);
        index->slots = slots;
        index->size = size;
        index->used = used;
    }
    if (!index_place(index->slots, index->size, entry))
        Py_RETURN_FALSE;
    Py_INCREF(args[0]);
    Py_INCREF(args[1]);
    index->used++;
    Py_RETURN_TRUE;
}

static PyObject *index_get(PyObject *self, PyObject *arg) {
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "get() takes bytes");
        return NULL;
    }
    const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(arg);
    index_slot *found = index_find((PieceIndex *)self, k, PyBytes_GET_SIZE(arg));
    if (found == NULL)
        Py_RETURN_NONE;
    Py_INCREF(found->value);
    return found->value;
}

static PyObject *index_clear(PyObject *self, PyObject *unused) {
    (void)unused;
    index_release((PieceIndex *)self);
    Py_RETURN_NONE;
}

static Py_ssize_t index_len(PyObject *self) {
    return ((PieceIndex *)self)->used;
}

static PyObject *index_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "PieceIndex() takes no arguments");
        return NULL;
    }
    PieceIndex *index = (PieceIndex *)type->tp_alloc(type, 0);
    if (index == NULL)
        return NULL;
    /* Keyed per index from Python's own random hash secret (a bytes hash, different per
     * process unless PYTHONHASHSEED fixes it) and the object's address. */
    PyObject *probe = PyBytes_FromStringAndSize("capwatch piece index", 20);
    if (probe == NULL) {
        Py_DECREF(index);
        return NULL;
    }
    Py_hash_t h = PyObject_Hash(probe);
    Py_DECREF(probe);
    index->seed = mix((uint64_t)h ^ 0x2D358DCCAA6C78A5ull,
                      (uint64_t)(uintptr_t)index ^ 0x8BB84B93962EACC9ull);
    return (PyObject *)index;
}

static void index_dealloc(PyObject *self) {
    index_release((PieceIndex *)self);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef index_methods[] = {
    {"add", (PyCFunction)(void (*)(void))index_add, METH_FASTCALL,
     "add(piece, id) -> bool: False when the piece is not kept (its probe too long)"},
    {"get", index_get, METH_O, "get(piece) -> int | None"},
    {"clear", index_clear, METH_NOARGS, "clear() -> None"},
    {NULL, NULL, 0, NULL},
};

static PyMappingMethods index_mapping = {index_len, NULL, NULL};

static PyTypeObject PieceIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "capwatch.contracts._wire_split.PieceIndex",
    .tp_basicsize = sizeof(PieceIndex),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "wire_atoms.PIECES' current table mirrored for piece_ids (a subset of it).",
    .tp_new = index_new,
    .tp_dealloc = index_dealloc,
    .tp_methods = index_methods,
    .tp_as_mapping = &index_mapping,
};

/* wire_atoms.reference_ids over one table: the ids of the atoms of a state's text, cut
 * into pieces at every ']' (the first piece spelt as wire_atoms._first spells it), each
 * looked up in `pieces` (a dict: piece -> id, or a PieceIndex); None when the text is not
 * so cut or a piece is not in the table. */
#define CLOSES 512

static PyObject *piece_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyBytes_CheckExact(args[0])
        || !(PyDict_CheckExact(args[1]) || Py_IS_TYPE(args[1], &PieceIndexType))) {
        PyErr_SetString(PyExc_TypeError, "piece_ids() takes bytes and a dict or PieceIndex");
        return NULL;
    }
    PyObject *pieces = args[1];
    PieceIndex *index = PyDict_CheckExact(pieces) ? NULL : (PieceIndex *)pieces;
    const char *a = PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if (n < 1 || a[0] != '[')
        Py_RETURN_NONE;
    /* text[1:-1] */
    const char *p = a + 1;
    const char *end = n >= 2 ? a + n - 1 : a + 1;
    Py_ssize_t count = 0;
    const char *last = p; /* the start of the piece after the last ']' */
    /* The first CLOSES pieces' ends noted as they are counted: the lookups below then
     * take them from here, where a second memchr per piece found them again. */
    const char *closes[CLOSES];
    for (const char *q = p; q < end;) {
        const char *c = memchr(q, ']', (size_t)(end - q));
        if (c == NULL)
            break;
        if (count < CLOSES)
            closes[count] = c;
        count++;
        q = last = c + 1;
    }
    for (const char *q = last; q < end; q++)
        if (!is_ws((unsigned char)*q))
            Py_RETURN_NONE;
    if (index != NULL && index->used == 0 && count > 0)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(count);
    if (out == NULL)
        return NULL;
    if (count == 0)
        return out;
    const char *first_end = closes[0];
    /* The first piece: sep then head (sep empty: "," then the piece as it is). */
    const char *sep = ",", *head = p;
    Py_ssize_t sep_n = 1;
    if (count > 1) {
        const char *h = p;
        while (h < first_end && is_ws((unsigned char)*h))
            h++;
        if (h < first_end && *h == '[') {
            const char *second = first_end + 1;
            const char *second_end = closes[1];
            const char *at = memchr(second, '[', (size_t)(second_end - second));
            if (at != NULL && at > second) {
                sep = second;
                sep_n = at - second;
                head = h;
            }
        }
    }
    const char *q = first_end + 1;
    const char *piece = head, *piece_end = first_end;
    for (Py_ssize_t i = 0;;) {
        PyObject *found;
        if (index != NULL) {
            index_slot *slot;
            if (i == 0) {
                /* The first piece spelt in a buffer of its own (its separator and head
                 * are apart in the text). */
                Py_ssize_t len = sep_n + (piece_end - piece);
                unsigned char local[256];
                unsigned char *buf = len <= 256 ? local : PyMem_Malloc((size_t)len);
                if (buf == NULL) {
                    PyErr_NoMemory();
                    goto error;
                }
                memcpy(buf, sep, (size_t)sep_n);
                memcpy(buf + sep_n, piece, (size_t)(piece_end - piece));
                slot = index_find(index, buf, len);
                if (buf != local)
                    PyMem_Free(buf);
            } else {
                slot = index_find(index, (const unsigned char *)piece, piece_end - piece);
            }
            found = slot == NULL ? NULL : slot->value;
        } else {
            PyObject *key;
            if (i == 0) {
                key = PyBytes_FromStringAndSize(NULL, sep_n + (piece_end - piece));
                if (key != NULL) {
                    char *k = PyBytes_AS_STRING(key);
                    memcpy(k, sep, (size_t)sep_n);
                    memcpy(k + sep_n, piece, (size_t)(piece_end - piece));
                }
            } else {
                key = PyBytes_FromStringAndSize(piece, piece_end - piece);
            }
            if (key == NULL)
                goto error;
            found = PyDict_GetItemWithError(pieces, key);
            Py_DECREF(key);
            if (found == NULL && PyErr_Occurred())
                goto error;
        }
        if (found == NULL) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        Py_INCREF(found);
        PyList_SET_ITEM(out, i, found);
        if (++i == count)
            break;
        const char *c = i < CLOSES ? closes[i] : memchr(q, ']', (size_t)(end - q));
        piece = q;
        piece_end = c;
        q = c + 1;
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

/* wire_fast.reference_flips: the ids in exactly one of two ids lists (as sets), each
 * once, as ATOM's atoms (`atoms`, the vocabulary's list: id -> atom); the state's first
 * (`before`, in its order), then the next state's (`after`). Both lists are a state
 * read's ids of one generation, so that ids and atoms correspond one to one: an id only
 * one list holds is an atom only one of the two sets holds. The Python way built a
 * frozenset of one list (each id hashed and inserted), took its symmetric difference with
 * the other and mapped the result through ATOM.__getitem__ (~22% of a trace's decode on
 * an outside producer's fleet with the atoms' sets' differences, session 16). */
typedef struct {
    Py_ssize_t id;
    int seen; /* 1: in before, 2: in after, 4: written out */
} slot;

/* The diff by a table of the ids on the stack (or the heap): the way for ids that are
 * not all of the vocabulary (diff_marks takes the others). `ids` holds before's nb ids
 * then after's na. */
static PyObject *diff_table(const Py_ssize_t *ids, Py_ssize_t nb, Py_ssize_t na,
                            PyObject *atoms, Py_ssize_t *gone) {
    Py_ssize_t size = 64;
    while (size < 2 * (nb + na))
        size <<= 1;
    slot local[256];
    slot *table = local;
    if (size > 256) {
        table = PyMem_Malloc(sizeof(slot) * (size_t)size);
        if (table == NULL)
            return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < size; i++)
        table[i].seen = 0;
    PyObject *out = NULL;
    Py_ssize_t mask = size - 1, differ = 0;
    for (Py_ssize_t i = 0; i < nb + na; i++) {
        Py_ssize_t id = ids[i];
        int bit = i < nb ? 1 : 2;
        Py_ssize_t h = (Py_ssize_t)(((size_t)id * (size_t)0x9E3779B97F4A7C15ull) >> 7) & mask;
        while (table[h].seen && table[h].id != id)
            h = (h + 1) & mask;
        if (!table[h].seen) {
            table[h].id = id;
            table[h].seen = bit;
            differ++;
        } else if (!(table[h].seen & bit)) {
            table[h].seen |= bit;
            differ--;
        }
    }
    out = PyList_New(differ);
    if (out == NULL || differ == 0)
        goto done;
    Py_ssize_t at = 0, n_atoms = PyList_GET_SIZE(atoms);
    for (Py_ssize_t i = 0; i < nb + na; i++) {
        if (i == nb)
            *gone = at;
        Py_ssize_t id = ids[i];
        int bit = i < nb ? 1 : 2;
        Py_ssize_t h = (Py_ssize_t)(((size_t)id * (size_t)0x9E3779B97F4A7C15ull) >> 7) & mask;
        while (table[h].id != id)
            h = (h + 1) & mask;
        if (table[h].seen != bit)
            continue; /* in both, or written out already */
        table[h].seen |= 4;
        if (id < 0 || id >= n_atoms) {
            PyErr_SetString(PyExc_IndexError, "flips(): an id with no atom");
            Py_CLEAR(out);
            goto done;
        }
        PyObject *atom = PyList_GET_ITEM(atoms, id);
        Py_INCREF(atom);
        PyList_SET_ITEM(out, at++, atom);
    }
    if (nb + na == nb)
        *gone = at;
done:
    if (table != local)
        PyMem_Free(table);
    return out;
}

/* The diff by a mark per id of the vocabulary (ids are dense, 0 <= id < len(atoms)):
 * each id's mark is read and written in place, where the table above was cleared,
 * hashed into and probed at every call (~4,800 instructions a step of 31 atoms, the
 * most of a step's diff on an outside producer's fleet, session 18). A call's marks are
 * `stamp` plus 1 (in before only), 2 (in after only), 3 (in both) or 4 (written out);
 * a mark below `stamp` is an earlier call's, so nothing is cleared between calls.
 * Owned by the decoder's thread, as the vocabulary is (the GIL is held throughout). */
static uint32_t *marks = NULL;
static Py_ssize_t marks_size = 0;
static uint32_t stamp = 0;

static int marks_ready(Py_ssize_t n_atoms) {
    if (n_atoms > marks_size) {
        Py_ssize_t size = marks_size > 0 ? marks_size : 1024;
        while (size < n_atoms)
            size <<= 1;
        uint32_t *grown = PyMem_Realloc(marks, sizeof(uint32_t) * (size_t)size);
        if (grown == NULL)
            return 0; /* the table's way, no error */
        memset(grown + marks_size, 0, sizeof(uint32_t) * (size_t)(size - marks_size));
        marks = grown;
        marks_size = size;
    }
    if (stamp >= UINT32_MAX - 16) {
        memset(marks, 0, sizeof(uint32_t) * (size_t)marks_size);
        stamp = 0;
    }
    stamp += 8;
    return 1;
}

static PyObject *diff_marks(const Py_ssize_t *ids, Py_ssize_t nb, Py_ssize_t na,
                            PyObject *atoms, Py_ssize_t *gone) {
    const uint32_t only_before = stamp + 1, only_after = stamp + 2, both = stamp + 3,
                   written = stamp + 4;
    Py_ssize_t differ = 0;
    for (Py_ssize_t i = 0; i < nb; i++) {
        uint32_t *m = &marks[ids[i]];
        if (*m < stamp) {
            *m = only_before;
            differ++;
        }
    }
    for (Py_ssize_t i = nb; i < nb + na; i++) {
        uint32_t *m = &marks[ids[i]];
        if (*m < stamp) {
            *m = only_after;
            differ++;
        } else if (*m == only_before) {
            *m = both;
            differ--;
        }
    }
    PyObject *out = PyList_New(differ);
    if (out == NULL || differ == 0)
        return out;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < nb + na; i++) {
        if (i == nb)
            *gone = at;
        uint32_t *m = &marks[ids[i]];
        if (*m != (i < nb ? only_before : only_after))
            continue; /* in both, or written out already */
        *m = written;
        PyObject *atom = PyList_GET_ITEM(atoms, ids[i]);
        Py_INCREF(atom);
        PyList_SET_ITEM(out, at++, atom);
    }
    if (na == 0)
        *gone = at;
    return out;
}

/* The diff itself, for flips() and step(): the list, with in *gone how many of its
 * atoms (its first ones) are the state's (ids only `before` holds). */
static PyObject *diff(PyObject *before, PyObject *after, PyObject *atoms, Py_ssize_t *gone) {
    if (!PyList_CheckExact(before) || !PyList_CheckExact(after) || !PyList_CheckExact(atoms)) {
        PyErr_SetString(PyExc_TypeError, "flips() and step() take lists of ids and atoms");
        return NULL;
    }
    Py_ssize_t nb = PyList_GET_SIZE(before), na = PyList_GET_SIZE(after);
    Py_ssize_t n_atoms = PyList_GET_SIZE(atoms);
    Py_ssize_t local[512];
    Py_ssize_t *ids = local;
    if (nb + na > 512) {
        ids = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(nb + na));
        if (ids == NULL)
            return PyErr_NoMemory();
    }
    PyObject *out = NULL;
    int in_range = 1;
    for (Py_ssize_t i = 0; i < nb + na; i++) {
        PyObject *item = i < nb ? PyList_GET_ITEM(before, i) : PyList_GET_ITEM(after, i - nb);
        if (!PyLong_CheckExact(item)) {
            PyErr_SetString(PyExc_TypeError, "flips() takes lists of ids");
            goto done;
        }
        Py_ssize_t id;
#if PY_VERSION_HEX < 0x030C0000
        /* An id of the vocabulary is one digit (< 2**30): read in place, where
         * PyLong_AsSsize_t's call was a fifth of the diff (the layout changed in 3.12). */
        if (Py_SIZE(item) == 1)
            id = (Py_ssize_t)((PyLongObject *)item)->ob_digit[0];
        else
#endif
        {
            id = PyLong_AsSsize_t(item);
            if (id == -1 && PyErr_Occurred())
                goto done;
        }
        ids[i] = id;
        in_range &= id >= 0 && id < n_atoms;
    }
    *gone = 0;
    out = in_range && marks_ready(n_atoms) ? diff_marks(ids, nb, na, atoms, gone)
                                           : diff_table(ids, nb, na, atoms, gone);
done:
    if (ids != local)
        PyMem_Free(ids);
    return out;
}

static PyObject *flips(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "flips() takes three lists");
        return NULL;
    }
    Py_ssize_t gone = 0;
    return diff(args[0], args[1], args[2], &gone);
}

/* wire_fast.reference_step: the diff (as flips) and the next state's set made from the
 * state's by its two halves: `state` less the atoms of ids only `before` holds, with
 * those of ids only `after` holds; the state itself, the very object, when none differ.
 * Under the decoder's invariant (`state` is the set of `before`'s atoms) that is the
 * symmetric difference the Python way takes, which built a set of the flipped atoms
 * (each tuple hashed again) and inserted every atom of the state into it, growing its
 * table twice (~10% of a trace's decode on an outside producer's fleet, session 17).
 *
 * The next set is one copy of the state's table with its stored hashes
 * (PyFrozenSet_New of a frozenset), the atoms that go taken out of the copy in place
 * and the new ones added (PySet_Add fills a frozenset no other code holds yet, as the
 * C API allows). The public API has no discard on a frozenset: an atom goes as
 * CPython's own discard takes it out (its slot keeps the set's dummy, hash -1, and
 * `used` counts one less; iteration, lookups, equality and frozenset's hash all read
 * such slots, as in a set), found by identity in the copy's table (the state holds the
 * vocabulary's very atom objects, as `atoms` does). The first version copied the state
 * into a set, discarded and added there, and copied that into a frozenset: the second
 * copy, of a table holding dummies, was the most of a step (session 17). Where the
 * layout is not known (other CPython versions), or an atom to take out is in the set
 * only as an equal object, the way of two copies. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && !defined(Py_GIL_DISABLED)
#define STEP_IN_PLACE 1
/* 1: taken out, 0: no such object in the table. */
static int take_out(PyObject *frozen, PyObject *key) {
    PySetObject *so = (PySetObject *)frozen;
    setentry *entry = so->table, *last = so->table + so->mask;
    for (; entry <= last; entry++) {
        if (entry->key == key) {
            entry->key = _PySet_Dummy;
            entry->hash = -1;
            so->used--;
            Py_DECREF(key);
            return 1;
        }
    }
    return 0;
}
#endif

static PyObject *next_set(PyObject *state, PyObject *flipped, Py_ssize_t gone) {
    Py_ssize_t n = PyList_GET_SIZE(flipped);
#ifdef STEP_IN_PLACE
    PyObject *next = PyFrozenSet_New(state);
    if (next == NULL)
        return NULL;
    if (Py_REFCNT(next) == 1 && Py_IS_TYPE(next, &PyFrozenSet_Type)) {
        Py_ssize_t i = 0;
        for (; i < n; i++) {
            PyObject *atom = PyList_GET_ITEM(flipped, i);
            if (i < gone) {
                if (take_out(next, atom))
                    continue;
                int held = PySet_Contains(next, atom);
                if (held < 0) {
                    Py_DECREF(next);
                    return NULL;
                }
                if (held)
                    break; /* an equal object, not this one: the other way */
            } else if (PySet_Add(next, atom) < 0) {
                Py_DECREF(next);
                return NULL;
            }
        }
        if (i == n)
            return next;
    }
    Py_DECREF(next);
#endif
    PyObject *work = PySet_New(state);
    if (work == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *atom = PyList_GET_ITEM(flipped, i);
        if ((i < gone ? PySet_Discard(work, atom) : PySet_Add(work, atom)) < 0) {
            Py_DECREF(work);
            return NULL;
        }
    }
    PyObject *out = PyFrozenSet_New(work);
    Py_DECREF(work);
    return out;
}

static PyObject *step(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyFrozenSet_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "step() takes a frozenset and three lists");
        return NULL;
    }
    PyObject *state = args[0];
    Py_ssize_t gone = 0;
    PyObject *flipped = diff(args[1], args[2], args[3], &gone);
    if (flipped == NULL)
        return NULL;
    PyObject *next = PyList_GET_SIZE(flipped) == 0 ? Py_NewRef(state)
                                                   : next_set(state, flipped, gone);
    PyObject *out = next == NULL ? NULL : PyTuple_Pack(2, flipped, next);
    Py_XDECREF(next);
    Py_DECREF(flipped);
    return out;
}

static PyMethodDef methods[] = {
    {"canonical", canonical_text, METH_O,
     "canonical(text) -> bytes: see capwatch/contracts/wire_split.py"},
    {"in_order", in_order, METH_O,
     "in_order(text) -> bool: canonical(text) is text, see capwatch/contracts/wire_split.py"},
    {"split", split, METH_O,
     "split(raw) -> (envelope, state, next_state, keys) | None: see capwatch/contracts/wire_split.py"},
    {"split_trace", split_trace, METH_O,
     "split_trace(raw) -> (envelope, states, keys) | None: see capwatch/contracts/wire_split.py"},
    {"piece_ids", (PyCFunction)(void (*)(void))piece_ids, METH_FASTCALL,
     "piece_ids(text, pieces) -> list[int] | None: see capwatch/contracts/wire_atoms.py"},
    {"flips", (PyCFunction)(void (*)(void))flips, METH_FASTCALL,
     "flips(before, after, atoms) -> list: see capwatch/contracts/wire_fast.py"},
    {"step", (PyCFunction)(void (*)(void))step, METH_FASTCALL,
     "step(state, before, after, atoms) -> (list, frozenset): see capwatch/contracts/wire_fast.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "capwatch.contracts._wire_split", NULL, -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire_split(void) {
    if (PyType_Ready(&PieceIndexType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(&PieceIndexType);
    if (PyModule_AddObject(module, "PieceIndex", (PyObject *)&PieceIndexType) < 0) {
        Py_DECREF(&PieceIndexType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
