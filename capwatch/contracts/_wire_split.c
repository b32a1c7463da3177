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
 * way, which is complete on its own.
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

static inline const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end) {
    while (p < end && is_ws(*p))
        p++;
    return p;
}

/* One past the ']' that closes the array opening at p (*p == '['), brackets inside
 * strings not counted; NULL when the text ends first. The message holds no backslash, so
 * a string ends at the next quote. */
static const unsigned char *skip_array(const unsigned char *p, const unsigned char *end) {
    Py_ssize_t depth = 0;
    int in_string = 0;
    const unsigned char *q = p;
#ifdef __SSE2__
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
#endif
    for (; q < end; q++) {
        unsigned char c = *q;
        if (in_string) {
            if (c == '"')
                in_string = 0;
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

static PyObject *split(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "split() takes bytes");
        return NULL;
    }
    const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    const unsigned char *end = start + n;
    if (memchr(start, '\\', (size_t)n) != NULL)
        Py_RETURN_NONE;
    const unsigned char *key_at[MAX_KEYS];
    Py_ssize_t key_len[MAX_KEYS];
    int keys = 0;
    const unsigned char *state = NULL, *state_end = NULL, *next = NULL, *next_end = NULL;
    const unsigned char *p = skip_ws(start, end);
    if (p == end || *p != '{')
        Py_RETURN_NONE;
    p = skip_ws(p + 1, end);
    for (;;) {
        if (p == end || *p != '"')
            Py_RETURN_NONE;
        const unsigned char *k = p + 1;
        const unsigned char *k_end = memchr(k, '"', (size_t)(end - k));
        if (k_end == NULL || keys == MAX_KEYS)
            Py_RETURN_NONE;
        Py_ssize_t len = k_end - k;
        for (int i = 0; i < keys; i++) {
            if (key_len[i] == len && memcmp(key_at[i], k, (size_t)len) == 0)
                Py_RETURN_NONE;  /* a key twice: the schema's decoder says so */
        }
        key_at[keys] = k;
        key_len[keys++] = len;
        p = skip_ws(k_end + 1, end);
        if (p == end || *p != ':')
            Py_RETURN_NONE;
        p = skip_ws(p + 1, end);
        if (p == end)
            Py_RETURN_NONE;
        const unsigned char *value = p;
        if (*p == '"') {
            const unsigned char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
            if (q == NULL)
                Py_RETURN_NONE;
            p = q + 1;
        } else if (*p == '[') {
            p = skip_array(p, end);
            if (p == NULL)
                Py_RETURN_NONE;
        } else if (*p == '{') {
            Py_RETURN_NONE;  /* no member of an event is an object */
        } else {
            while (p < end && *p != ',' && *p != '}' && *p != ']' && !is_ws(*p))
                p++;
        }
        if (len == 5 && memcmp(k, "state", 5) == 0) {
            if (*value != '[')
                Py_RETURN_NONE;
            state = value;
            state_end = p;
        } else if (len == 10 && memcmp(k, "next_state", 10) == 0) {
            if (*value != '[')
                Py_RETURN_NONE;
            next = value;
            next_end = p;
        }
        p = skip_ws(p, end);
        if (p == end)
            Py_RETURN_NONE;
        if (*p == '}')
            break;
        if (*p != ',')
            Py_RETURN_NONE;
        p = skip_ws(p + 1, end);
    }
    if (skip_ws(p + 1, end) != end || state == NULL || next == NULL)
        Py_RETURN_NONE;
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

static PyMethodDef methods[] = {
    {"split", split, METH_O,
     "split(raw) -> (envelope, state, next_state, keys) | None: see capwatch/contracts/wire_split.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "capwatch.contracts._wire_split", NULL, -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire_split(void) {
    return PyModule_Create(&module_def);
}
