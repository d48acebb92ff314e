/* rainierd's compiled passes: plain C over array pointers, loaded with ctypes
 * by rainierd/native/__init__.py, which declares each signature and checks
 * what it hands over.  Built by the install step (pyproject.toml's
 * ext-modules: `pip install` runs the compiler, never rainierd); nothing is
 * compiled at run time.  No Python headers: a plain shared library.
 *
 * Every function checks the indices it is given against the sizes it is
 * given and returns 0, or -1 having written nothing out of bounds: a wrong
 * argument is a refused call, never a write past a buffer.
 */
#include <stdint.h>
#include <math.h>
#include <string.h>

/* Join one column of n parts end to end into out (out_bytes long): part p's
 * bytes[p] bytes from base[p] + start[p], or zeros where start[p] < 0 (the
 * part lacks the column).  The parts' bytes must add up to out_bytes. */
int64_t rd_join(int64_t n, const uint64_t *base, const int64_t *start, const int64_t *bytes,
                uint8_t *out, int64_t out_bytes)
{
    int64_t at = 0;
    for (int64_t p = 0; p < n; p++) {
        if (bytes[p] < 0 || bytes[p] > out_bytes - at)
            return -1;
        if (start[p] < 0)
            memset(out + at, 0, (size_t)bytes[p]);
        else
            memcpy(out + at, (const uint8_t *)(uintptr_t)base[p] + start[p], (size_t)bytes[p]);
        at += bytes[p];
    }
    return at == out_bytes ? 0 : -1;
}

/* Scatter one column of n parts into the rows of out (n_rows rows of
 * row_bytes): part p holds entries[p] consecutive rows from base[p] +
 * start[p] (zeros where start[p] < 0), and the window's e-th entry, counting
 * through the parts in order, goes to row row[e].  This is the join and the
 * reorder into node order in one pass: each entry's bytes are read once, from
 * the payload they arrived in, and written once, where they are stored. */
int64_t rd_scatter_rows(int64_t n, const uint64_t *base, const int64_t *start, const int64_t *entries,
                        const int64_t *row, int64_t n_entries, int64_t n_rows, int64_t row_bytes, uint8_t *out)
{
    int64_t e = 0;
    if (row_bytes < 0)
        return -1;
    for (int64_t p = 0; p < n; p++) {
        if (entries[p] < 0 || entries[p] > n_entries - e)
            return -1;
        const uint8_t *src = start[p] < 0 ? NULL : (const uint8_t *)(uintptr_t)base[p] + start[p];
        for (int64_t k = 0; k < entries[p]; k++, e++) {
            int64_t r = row[e];
            if (r < 0 || r >= n_rows)
                return -1;
            uint8_t *dst = out + r * row_bytes;
            if (src == NULL)
                memset(dst, 0, (size_t)row_bytes);
            else
                memcpy(dst, src + k * row_bytes, (size_t)row_bytes);
        }
    }
    return e == n_entries ? 0 : -1;
}

/* A counter's new totals into its table: for each of n samples, the entity
 * it is for (at[i], or first + i where at is NULL; within n_total) gets
 * new[i] as its total, and diff[i] (unless NULL) is new[i] less the total it
 * replaces, both as doubles (numpy's float64 subtraction of the two).  One
 * pass where the numpy way was a subtraction into a temporary and a copy.
 * An entity outside the table refuses the call before anything is written. */
#define COUNTER_STEP(NAME, T)                                                                           \
    int64_t NAME(int64_t n, const T *new_total, T *total, const int64_t *at, int64_t first, int64_t n_total, \
                 double *diff)                                                                          \
    {                                                                                                   \
        if (at == NULL && (first < 0 || n > n_total - first))                                           \
            return -1;                                                                                  \
        for (int64_t i = 0; at != NULL && i < n; i++)                                                   \
            if (at[i] < 0 || at[i] >= n_total)                                                          \
                return -1;                                                                              \
        for (int64_t i = 0; i < n; i++) {                                                               \
            int64_t j = at == NULL ? first + i : at[i];                                                 \
            if (diff != NULL)                                                                           \
                diff[i] = (double)new_total[i] - (double)total[j];                                      \
            total[j] = new_total[i];                                                                    \
        }                                                                                               \
        return 0;                                                                                       \
    }

COUNTER_STEP(rd_counter_step_u64, uint64_t)
COUNTER_STEP(rd_counter_step_u32, uint32_t)
COUNTER_STEP(rd_counter_step_i64, int64_t)
COUNTER_STEP(rd_counter_step_f64, double)

/* A rated counter's new totals into its table and its rate into the table's rate column, in one pass
 * (rainierd/core/state.py Table._store_counters documents the rule; the numpy it replaced was a difference
 * into a temporary, a copy, and six passes more).  For each of n samples, entity j (at[i], or first + i where
 * at is NULL; within n_total) gets new[i] as its total, and its rate is the difference with the total it
 * replaces, as doubles, over dt[i] seconds:
 *   unknown (NaN) where the entity's last sample lacked the counter (had[j] & bit clear; had NULL: all had
 *   it) or this one does (present[i] & bit clear; present NULL: all carry it), or dt[i] is NaN;
 *   mode 0: over its bound where the difference exceeds limit (EXACT), a reset where it is negative;
 *   mode 1: over where the rate exceeds limit (per second), a reset where the rate is negative;
 *   mode 2: as mode 1 with the limit of the entity's kind, per_kind[kind_of[j]] (n_kinds of them).
 * A sample over its bound or across a reset has no rate (NaN); counts[0] counts those over the bound, and a
 * reset is refused (counts[1]: a negative new total; counts[2]: a new total above the bound over its
 * interval, limit x dt in modes 1 and 2) or believed (a restart from zero).  An entity outside the table
 * refuses the call before anything is written; a kind outside per_kind is -1 after the pass (its limit read
 * as the first kind's: nothing is read or written out of bounds). */
#define COUNTER_RATE(NAME, T, R)                                                                                \
    int64_t NAME(int64_t n, const T *restrict new_total, T *restrict total, const int64_t *restrict at,        \
                 int64_t first, int64_t n_total, const float *restrict dt, const uint16_t *restrict had,        \
                 const uint16_t *restrict present, int64_t bit, int64_t mode, double limit,                     \
                 const double *restrict per_kind, const int64_t *restrict kind_of, int64_t n_kinds,             \
                 R *restrict rate, int64_t *restrict counts)                                                    \
    {                                                                                                           \
        if (at == NULL && (first < 0 || n > n_total - first))                                                   \
            return -1;                                                                                          \
        for (int64_t i = 0; at != NULL && i < n; i++)                                                           \
            if (at[i] < 0 || at[i] >= n_total)                                                                  \
                return -1;                                                                                      \
        if (mode == 2 && n_kinds < 1)                                                                           \
            return -1;                                                                                          \
        int64_t over = 0, negative = 0, reset_over = 0, bad_kind = 0;                                           \
        uint16_t mask = (uint16_t)bit;                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                                       \
            int64_t j = at == NULL ? first + i : at[i];                                                         \
            T nv = new_total[i];                                                                                \
            double d = (double)nv - (double)total[j];                                                           \
            total[j] = nv;                                                                                      \
            if ((had != NULL && !(had[j] & mask)) || (present != NULL && !(present[i] & mask)))                 \
                d = NAN;                                                                                        \
            double seconds = (double)dt[i];                                                                     \
            double r, bound = limit;                                                                            \
            int is_over, fell;                                                                                  \
            if (mode == 0) {                                                                                    \
                is_over = d > limit;                                                                            \
                fell = d < 0;                                                                                   \
                r = d / seconds;                                                                                \
            } else {                                                                                            \
                if (mode == 2) {                                                                                \
                    int64_t k = kind_of[j];                                                                     \
                    int inside = k >= 0 && k < n_kinds;                                                         \
                    bad_kind += !inside;                                                                        \
                    bound = per_kind[inside ? k : 0];                                                           \
                }                                                                                               \
                r = d / seconds;                                                                                \
                is_over = r > bound;                                                                            \
                fell = r < 0;                                                                                   \
                bound *= seconds;                                                                               \
            }                                                                                                   \
            if (is_over) {                                                                                      \
                over++;                                                                                         \
                r = NAN;                                                                                        \
            } else if (fell) {                                                                                  \
                double value = (double)nv;                                                                      \
                int below_zero = value < 0;                                                                     \
                negative += below_zero;                                                                         \
                reset_over += !below_zero && !(value <= bound); /* a NaN bound: not believed */                 \
                r = NAN;                                                                                        \
            }                                                                                                   \
            rate[j] = (R)r;                                                                                     \
        }                                                                                                       \
        counts[0] = over;                                                                                       \
        counts[1] = negative;                                                                                   \
        counts[2] = reset_over;                                                                                 \
        return bad_kind ? -1 : 0;                                                                               \
    }

COUNTER_RATE(rd_counter_rate_u64_f32, uint64_t, float)
COUNTER_RATE(rd_counter_rate_u64_f64, uint64_t, double)
COUNTER_RATE(rd_counter_rate_u32_f32, uint32_t, float)
COUNTER_RATE(rd_counter_rate_u32_f64, uint32_t, double)
COUNTER_RATE(rd_counter_rate_i64_f32, int64_t, float)
COUNTER_RATE(rd_counter_rate_i64_f64, int64_t, double)
COUNTER_RATE(rd_counter_rate_f64_f32, double, float)
COUNTER_RATE(rd_counter_rate_f64_f64, double, double)

/* One step of n one-sided CUSUMs (rainierd/core/detect/_stats.py ClippedCusum.update, which documents the
 * rule), in float32 as numpy computed it, operation for operation, so the sums are bit for bit numpy's:
 *   step = min(x, cap) (0 where x is NaN) - k; with seconds: step = min(step * max(seconds, 0), h / samples);
 *   in alarm (s >= h), a negative step drains at least k over its span (1, or the interval, or the longer of
 *   the interval and drain_seconds); s = clip(s + step, 0, ceiling) where x is known and mask holds.
 * seconds and drain_seconds may be NULL (none), else one a sum.  alarm[i] is s[i] >= h afterwards.
 * Branch-free, each min a compare and a select (a NaN step stays NaN, as numpy's minimum keeps it), so the
 * compiler makes each loop SIMD: the branching form measured no faster than numpy's twelve passes. */
static inline __attribute__((always_inline)) float cusum_next(float before, float xi, int judged, int has_seconds,
                                                               float given, int has_drain, float drain, float k,
                                                               float h, float cap, float per_sample, float ceiling)
{
    int known = (xi == xi) & judged;
    float step = xi == xi ? (xi > cap ? cap : xi) : 0.0f;
    step -= k;
    float span = 1.0f;
    if (has_seconds) {
        float interval = given > 0.0f ? given : 0.0f; /* np.fmax(seconds, 0): a NaN is 0 s */
        step *= interval;
        step = step > per_sample ? per_sample : step;
        span = interval;
        if (has_drain)
            span = drain > span ? drain : span; /* np.fmax: a NaN loses */
    }
    float full = -k * span;
    float drained = ((step < 0.0f) & (step > full)) ? full : step;
    float after = (before >= h ? drained : step) + before;
    after = after < 0.0f ? 0.0f : after;
    after = after > ceiling ? ceiling : after;
    return known ? after : before;
}

#define CUSUM_LOOP(HAS_SECONDS, HAS_DRAIN)                                                                      \
    for (int64_t i = 0; i < n; i++) {                                                                           \
        float now = cusum_next(s[i], x[i], mask[i] != 0, HAS_SECONDS, HAS_SECONDS ? seconds[i] : 0.0f,          \
                               HAS_DRAIN, HAS_DRAIN ? drain_seconds[i] : 0.0f, k, h, cap, per_sample, ceiling); \
        s[i] = now;                                                                                             \
        alarm[i] = now >= h;                                                                                    \
    }

int64_t rd_cusum_step(int64_t n, float *restrict s, const float *restrict x, const uint8_t *restrict mask,
                      const float *restrict seconds, const float *restrict drain_seconds, float k, float h,
                      float cap, float per_sample, float ceiling, uint8_t *restrict alarm)
{
    if (seconds == NULL)
        CUSUM_LOOP(0, 0)
    else if (drain_seconds == NULL)
        CUSUM_LOOP(1, 0)
    else
        CUSUM_LOOP(1, 1)
    return 0;
}

/* One step of n learned levels (rainierd/core/detect/_baseline.py Baseline.update, which documents the rule),
 * in float32 as numpy computed it, operation for operation, so levels and histories are numpy's bit for bit.
 * A sample counts where accept holds, its interval is over 0 and it is finite (judged in its own type, T, as
 * numpy did before casting it to float32): the first sets the level; later ones pull it by the winsorised
 * step (learn_shrink of clip times the level while learning) times interval / window.  One interval a
 * level.  Branch-free, so the compiler makes it SIMD (a finite test is x - x == 0). */
static inline float nan_min(float a, float b) { return a > b ? b : a; } /* a NaN a stays NaN, as np.minimum */
static inline float nan_max(float a, float b) { return a < b ? b : a; } /* a NaN a stays NaN, as np.maximum */

#define BASELINE_STEP(NAME, T)                                                                                  \
    int64_t NAME(int64_t n, float *restrict level, float *restrict history, const T *restrict x,               \
                 const uint8_t *restrict accept, const T *restrict seconds, float window_cap, float learn_s,    \
                 float clip, float learn_shrink)                                                                \
    {                                                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                                       \
            T xi = x[i], sec = seconds[i];                                                                      \
            int ok = (accept[i] != 0) & (sec > 0) & (xi - xi == 0); /* accepted, an interval, finite */         \
            float x32 = (float)xi, given = (float)sec, lvl = level[i], hist = history[i];                       \
            float dt = ok ? given : 0.0f; /* each side computed, then chosen: a select, not a branch */         \
            float window = nan_min(hist + dt, window_cap);                                                      \
            float step = x32 - lvl;                                                                             \
            float bound = __builtin_fabsf(lvl) * clip;                                                          \
            float shrunk = bound * learn_shrink;                                                                \
            bound = hist < learn_s ? shrunk : bound;                                                            \
            step = nan_min(step, bound);                                                                        \
            step = nan_max(step, -bound);                                                                       \
            step *= dt;                                                                                         \
            step /= window;                                                                                     \
            float added = lvl + step;                                                                           \
            float updated = lvl != lvl ? x32 : added; /* the first sample sets the level */                     \
            level[i] = ok ? updated : lvl;                                                                      \
            history[i] = hist + dt;                                                                             \
        }                                                                                                       \
        return 0;                                                                                               \
    }

BASELINE_STEP(rd_baseline_step_f32, float)
BASELINE_STEP(rd_baseline_step_f64, double)

/* The EFA slow-loss test (rainierd/core/detect/slow_loss.py SlowLossTest.update, which documents the rule), in
 * float32 as numpy computed it, operation for operation.  Its logarithms stay numpy's (``_stats.log1p``, over
 * numpy's vectorised log, which no C library reproduces bit for bit), so a tick takes three calls: the sample's
 * clipped counts for the sites' backgrounds (rd_slow_loss_sample), each test's rise over its in-control rate
 * for the logarithm (rd_slow_loss_ratios), and the tests' steps into their CUSUMs (rd_slow_loss_step).  Each
 * recomputes a port's figures from its inputs rather than keep a dozen fleet-sized temporaries between them.
 * numpy's maximum and minimum keep a NaN from either side; its fmax takes the other. */
static inline float np_maximum(float a, float b)
{
    float larger = a >= b ? a : b; /* b where either is NaN */
    return a != a ? a : larger;
}
static inline float np_minimum(float a, float b)
{
    float smaller = a <= b ? a : b;
    return a != a ? a : smaller;
}

/* a where c, else b, as a blend of their bits: a select the compiler keeps a select, where `c ? a : *p`
 * stored back to *p becomes a conditional store, which no loop over links can vectorise. */
static inline float blend_f32(int c, float a, float b)
{
    uint32_t ua, ub, mask = 0u - (uint32_t)(c != 0);
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    uint32_t blended = (ua & mask) | (ub & ~mask);
    float out;
    memcpy(&out, &blended, sizeof out);
    return out;
}

enum { SL_MARGIN_SE, SL_RATIO_MARGIN_SE, SL_SETTLED_COUNT, SL_UNCERTAIN_SE, SL_MIN_PER_S, SL_DETECT, SL_FINDABLE,
       SL_JUDGE_S, SL_EXPONENT, SL_H_MIN, SL_CEILING, SL_CLEAR, SL_TIMES /* then 1 + each ratio: the tripled
       test's, then the others' */ };
#define SL_MAX_TESTS 8

struct sl_inputs {
    const float *restrict counts, *restrict dt, *restrict own, *restrict sent, *restrict exposure,
        *restrict prior, *restrict count, *restrict history;
    const uint8_t *restrict fresh;
    const float *figures;
    int64_t started, n_tests;
    float params[SL_TIMES + SL_MAX_TESTS - 1]; /* the figures, copied: the loops hold them in registers */
};

static inline int sl_copy_figures(struct sl_inputs *in)
{
    if (in->n_tests < 2 || in->n_tests > SL_MAX_TESTS)
        return -1;
    memcpy(in->params, in->figures, sizeof(float) * (size_t)(SL_TIMES + in->n_tests - 1));
    return 0;
}

struct sl_port {
    int ok;
    float interval, counted, own, in_control, base;
    float rise[SL_MAX_TESTS], counted_by[SL_MAX_TESTS]; /* per test: the fraction test, the tripled, the others */
};

#define SL_INLINE static inline __attribute__((always_inline))

SL_INLINE float sl_burst_cap(float alternative, float interval)
{
    float expected = alternative * interval; /* interval >= 0: np.fmax(interval, 0) is itself */
    float cap = sqrtf(expected);
    cap *= 3.0f;
    cap += expected;
    cap += 1.0f;
    return cap;
}

/* One port's figures, for nt tests (a constant where it is inlined, so the loops over tests unroll; every
 * choice a select, every mask from a float compare, so all are one width and the loops over ports vectorise). */
SL_INLINE void sl_port_of(const struct sl_inputs *in, int64_t i, struct sl_port *o, const int nt)
{
    const float *p = in->params;
    float c = in->counts[i], d = in->dt[i], sent = in->sent[i], own = in->own[i];
    int ok = ((float)in->fresh[i] > 0.5f) & (c - c == 0) & (d > 0) & (sent > 0); /* a float compare: one mask width */
    float interval = blend_f32(ok, d, 0.0f), counted = blend_f32(ok, c, 0.0f);
    float exposure_s = (in->exposure[i] + in->prior[i]) / sent;
    float spread = sqrtf(own / exposure_s);
    float in_control = spread * p[SL_MARGIN_SE];
    in_control += own;
    int settled = in->count[i] >= p[SL_SETTLED_COUNT];
    float margin = p[SL_MARGIN_SE], ratio_margin = p[SL_RATIO_MARGIN_SE]; /* both read: a select, not a branch */
    float base = spread * (settled ? ratio_margin : margin);
    base += own;
    spread *= p[SL_UNCERTAIN_SE];
    spread = np_maximum(spread, p[SL_MIN_PER_S]);
    float fraction = sent > 0.0f ? sent : 0.0f; /* np.fmax(sent, 0): a NaN is 0 */
    fraction *= p[SL_DETECT];
    fraction = np_maximum(fraction, spread);
    float findable = in_control * p[SL_FINDABLE];
    findable = sqrtf(findable);
    fraction = np_maximum(fraction, findable);
    o->ok = ok;
    o->interval = interval;
    o->counted = counted;
    o->own = own;
    o->in_control = in_control;
    o->base = base;
    o->rise[0] = fraction;
#pragma GCC unroll 8
    for (int t = 1; t < nt; t++) {
        float rise = own * p[SL_TIMES + t - 1];
        rise -= base;
        o->rise[t] = np_maximum(rise, spread);
    }
    /* Once there is a background, a burst counts as the fraction test's alternative, and as the port's own
     * rate in the ratio tests; before, nothing is a burst. */
    int started = in->started != 0;
    float alternative = own + fraction;
    o->counted_by[0] = started & (counted > sl_burst_cap(alternative, interval)) ? alternative * interval : counted;
#pragma GCC unroll 8
    for (int t = 1; t < nt; t++)
        o->counted_by[t] = started & (counted > sl_burst_cap(base + o->rise[t], interval)) ? own * interval
                                                                                          : counted;
}

#define SL_ARGS                                                                                                 \
    const float *restrict counts, const float *restrict dt, const uint8_t *restrict fresh,                     \
        const float *restrict own, const float *restrict sent, const float *restrict exposure,                 \
        const float *restrict prior, const float *restrict count, const float *restrict history,               \
        const float *params, int64_t started, int64_t n_tests
#define SL_INPUTS {counts, dt, own, sent, exposure, prior, count, history, fresh, params, started, n_tests}
/* Run body(NT) with NT the number of tests as a constant (2 to SL_MAX_TESTS), or refuse another count. */
#define SL_DISPATCH(body)                                                                                       \
    switch (n_tests) {                                                                                          \
    case 2: body(2); break;                                                                                     \
    case 3: body(3); break;                                                                                     \
    case 4: body(4); break;                                                                                     \
    case 5: body(5); break;                                                                                     \
    case 6: body(6); break;                                                                                     \
    case 7: body(7); break;                                                                                     \
    case 8: body(8); break;                                                                                     \
    default: return -1;                                                                                         \
    }

/* For the m ports index[k] (each within n): the fraction test's count (bursts clipped), the interval it
 * covers, the packets sent in it, and whether it counts (1 or 0), into out[0..4][k]. */
int64_t rd_slow_loss_sample(int64_t n, SL_ARGS, const int64_t *index, int64_t m, float *out)
{
    struct sl_inputs in = SL_INPUTS;
    struct sl_port o;
    if (sl_copy_figures(&in))
        return -1;
    for (int64_t k = 0; k < m; k++)
        if (index[k] < 0 || index[k] >= n)
            return -1;
    for (int64_t k = 0; k < m; k++) {
        int64_t i = index[k];
        sl_port_of(&in, i, &o, 2); /* the fraction test's figures need no other test's */
        out[k] = o.counted_by[0];
        out[m + k] = o.interval;
        out[2 * m + k] = sent[i] * o.interval;
        out[3 * m + k] = (float)o.ok;
    }
    return 0;
}

/* Each test's rise over its in-control rate (the fraction test's over in_control, the ratio tests' over
 * base), for the logarithm that tunes it: out[t][i], n_tests rows of n. */
SL_INLINE void sl_ratios(const struct sl_inputs *in, int64_t n, float *restrict out, const int nt)
{
    struct sl_port o;
    for (int64_t i = 0; i < n; i++) {
        sl_port_of(in, i, &o, nt);
        out[i] = o.rise[0] / o.in_control;
#pragma GCC unroll 8
    for (int t = 1; t < nt; t++)
            out[t * n + i] = o.rise[t] / o.base;
    }
}

int64_t rd_slow_loss_ratios(int64_t n, SL_ARGS, float *out)
{
    struct sl_inputs in = SL_INPUTS;
    if (sl_copy_figures(&in))
        return -1;
#define SL_RATIOS(NT) sl_ratios(&in, n, out, NT)
    SL_DISPATCH(SL_RATIOS)
    return 0;
}

/* Each test's step (log_ratio[t][i]: ln(1 + its ratio)) into its CUSUM sums[t][i] where the port is judged,
 * every sum clipped to [0, ceiling]; lossy[i] raised where any sum reaches 1, kept while any is over clear. */
SL_INLINE void sl_step(const struct sl_inputs *in, int64_t n, const float *restrict log_ratio, float *restrict sums,
                       uint8_t *restrict lossy, const int nt)
{
    const float *p = in->params;
    const float judge_s = p[SL_JUDGE_S], exponent = p[SL_EXPONENT], h_min = p[SL_H_MIN];
    const float ceiling = p[SL_CEILING], clear = p[SL_CLEAR];
    struct sl_port o;
    for (int64_t i = 0; i < n; i++) {
        sl_port_of(in, i, &o, nt);
        float own = o.own;
        int judged = o.ok & (in->history[i] >= judge_s) & (own - own == 0);
        float over = 0.0f, holding = 0.0f; /* counts, as floats: every mask one width */
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            float lr = log_ratio[t * n + i];
            float k = o.rise[t] / lr;
            float h = exponent / lr;
            h = np_maximum(h, h_min);
            float step = o.counted_by[t] - k * o.interval;
            step /= h;
            step = np_minimum(step, 0.25f);
            float s = sums[t * n + i];
            s = judged ? s + step : s;
            s = s != s ? s : (s > 0.0f ? s : 0.0f); /* np.clip: a NaN stays */
            s = s != s ? s : (s < ceiling ? s : ceiling);
            sums[t * n + i] = s;
            over += s >= 1.0f ? 1.0f : 0.0f;
            holding += s > clear ? 1.0f : 0.0f;
        }
        lossy[i] = (uint8_t)((((float)lossy[i] > 0.5f) | (over > 0.0f)) & (holding > 0.0f));
    }
}

int64_t rd_slow_loss_step(int64_t n, SL_ARGS, const float *log_ratio, float *sums, uint8_t *lossy)
{
    struct sl_inputs in = SL_INPUTS;
    if (sl_copy_figures(&in))
        return -1;
#define SL_STEP(NT) sl_step(&in, n, log_ratio, sums, lossy, NT)
    SL_DISPATCH(SL_STEP)
    return 0;
}

/* NeuronLink evidence (rainierd/core/detect/neuronlink.py LinkDetector.update, which documents the rule): for
 * every link, its bandwidth as a share of its node's pace of its kind and of its own level, its drop, its
 * deviations, the wide band, the four CUSUMs (band, bandwidth, latency, errors) and its reasons, in one pass,
 * in float32 as numpy computed them, operation for operation.  What needs the fleet (the paces, a median a node
 * and kind; the kinds' latency centres; the robust scales, on the peer sample) numpy computes first; the
 * decaying drop counts (an exp, numpy's own) and the tracker after.  Link i is column i % per_node of node
 * i / per_node, of kind kind_order[i % per_node]. */
enum { NL_LEARN_S, NL_DOWN_BELOW, NL_DROP_BELOW, NL_DROP_MIN_S, NL_RETRAIN_REPLAYS, NL_ALL_LANES, NL_LATENCY_BAND,
       NL_BANDWIDTH_BAND, NL_IDLE_BELOW, NL_BW_SCALE, NL_LAT_SCALE, NL_CUSUMS /* then k, h, cap, per_sample, ceiling
       of the band's, bandwidth's, latency's and errors' CUSUMs */, NL_FIGURES = NL_CUSUMS + 20 };
enum { NL_BAND, NL_BW, NL_LAT, NL_ERR };
enum { NL_LANES_BIT, NL_BANDWIDTH_BIT, NL_LATENCY_BIT, NL_ERRORS_BIT, NL_DOWN_BIT };

struct nl_inputs {
    int64_t n, per_node, n_kinds;
    const int8_t *kind_order;
    const float *bw, *latency, *lanes, *dt, *held, *crc, *replay;
    const uint8_t *fresh;
    const float *pace, *share_ref, *nominal, *lat_center; /* nodes x kinds; then one a kind */
    const float *bw_level, *bw_history, *lat_level, *lat_history;
    const float *figures;
};

/* One link's figures, from its node's figures of its kind per column (the column's nominal, kind centre of
 * latency, pace and whether its kind carries traffic), read from small arrays rather than gathered. */
struct nl_link {
    int fresh, up, comm, lat_ok, bw_learned, lat_learned;
    float share_of_node, ratio, lat_ratio, kind_latency;
};

static inline __attribute__((always_inline)) void nl_link_at(const struct nl_inputs *in, int64_t i, float nominal,
                                                             float pace, int comm, float kind_latency,
                                                             struct nl_link *o)
{
    const float *f = in->figures;
    float lanes = in->lanes[i], latency = in->latency[i];
    float share = in->bw[i] / nominal;
    o->fresh = in->fresh[i] != 0;
    o->up = lanes > 0.0f;
    o->comm = comm;
    o->share_of_node = share / pace;
    o->bw_learned = in->bw_history[i] >= f[NL_LEARN_S];
    float level = in->bw_level[i];
    float ratio = o->share_of_node / (o->bw_learned ? level : 1.0f);
    o->ratio = comm ? ratio : 1.0f;
    o->lat_ok = o->fresh & o->up & (latency > 0.0f);
    o->lat_learned = in->lat_history[i] >= f[NL_LEARN_S];
    o->kind_latency = kind_latency;
    float lat_level = in->lat_level[i];
    o->lat_ratio = latency / (o->lat_learned ? lat_level : kind_latency);
}

/* Link i alone (the peer sample's): its node's pace of its kind, and whether its kind carries traffic (the
 * pace over idle_below of the kind's centre of shares). */
static inline void nl_link_of(const struct nl_inputs *in, int64_t i, struct nl_link *o)
{
    int64_t node = i / in->per_node;
    int kind = in->kind_order[i - node * in->per_node];
    float pace = in->pace[node * in->n_kinds + kind];
    nl_link_at(in, i, in->nominal[kind], pace, pace / in->share_ref[kind] > in->figures[NL_IDLE_BELOW],
               in->lat_center[kind], o);
}

static int nl_check(const struct nl_inputs *in)
{
    if (in->per_node < 1 || in->n_kinds < 1 || in->n % in->per_node != 0)
        return -1;
    for (int64_t c = 0; c < in->per_node; c++)
        if (in->kind_order[c] < 0 || in->kind_order[c] >= in->n_kinds)
            return -1;
    return 0;
}

#define NL_ARGS                                                                                                 \
    int64_t n, int64_t per_node, int64_t n_kinds, const int8_t *kind_order, const float *bw,                   \
        const float *latency, const float *lanes, const float *dt, const float *held, const float *crc,        \
        const float *replay, const uint8_t *fresh, const float *pace, const float *share_ref,                  \
        const float *nominal, const float *lat_center, const float *bw_level, const float *bw_history,         \
        const float *lat_level, const float *lat_history, const float *figures
#define NL_INPUTS                                                                                               \
    {n, per_node, n_kinds, kind_order, bw, latency, lanes, dt, held, crc, replay, fresh, pace, share_ref,       \
     nominal, lat_center, bw_level, bw_history, lat_level, lat_history, figures}

/* For the m links index[k] (each within n): the bandwidth ratio, whether it is judged (fresh, lanes up, its
 * node's links of its kind carrying traffic), the latency over its reference, and whether that is judged:
 * out[0..2][k] and judged[0..2][k], for the robust scales numpy takes on the peer sample. */
int64_t rd_nl_sample(NL_ARGS, const int64_t *index, int64_t m, float *out, uint8_t *judged)
{
    struct nl_inputs in = NL_INPUTS;
    struct nl_link o;
    if (nl_check(&in))
        return -1;
    for (int64_t k = 0; k < m; k++)
        if (index[k] < 0 || index[k] >= n)
            return -1;
    for (int64_t k = 0; k < m; k++) {
        nl_link_of(&in, index[k], &o);
        out[k] = o.ratio;
        judged[k] = (uint8_t)(o.fresh & o.up & o.comm);
        out[m + k] = o.lat_ratio;
        judged[m + k] = (uint8_t)o.lat_ok;
    }
    return 0;
}

/* Every link's evidence (see above): its share of its node's pace (share_of_node, which its level learns), its
 * state candidate (0 healthy, 1 degraded, 2 down) and reasons (every one but flapping), whether it dropped this
 * sample, whether its bandwidth and latency may be learned from, and, in place, its latest ratio (fresh links),
 * whether its last sample was near zero, and the four CUSUMs (sums: four rows of n). */
int64_t rd_nl_evidence(NL_ARGS, const int32_t *bits, float *restrict now_ratio, uint8_t *restrict was_low,
                       float *restrict sums, float *restrict share_of_node, int8_t *restrict candidate,
                       int32_t *restrict reasons, uint8_t *restrict dropped, uint8_t *restrict bw_learn,
                       uint8_t *restrict lat_ok)
{
    struct nl_inputs in = NL_INPUTS;
    const float *f = figures;
    float c[20]; /* k, h, cap, per_sample, ceiling: five a CUSUM, copied so the loop holds them in registers */
    memcpy(c, figures + NL_CUSUMS, sizeof c);
    enum { MAX_PER_NODE = 4096 };
    float nominal_of[MAX_PER_NODE], center_of[MAX_PER_NODE], pace_of[MAX_PER_NODE];
    uint8_t comm_of[MAX_PER_NODE];
    if (nl_check(&in) || per_node > MAX_PER_NODE)
        return -1;
    const float down_below = f[NL_DOWN_BELOW], drop_below = f[NL_DROP_BELOW], drop_min_s = f[NL_DROP_MIN_S];
    const float retrain = f[NL_RETRAIN_REPLAYS], all_lanes = f[NL_ALL_LANES], latency_band = f[NL_LATENCY_BAND];
    const float bandwidth_band = f[NL_BANDWIDTH_BAND], bw_scale = f[NL_BW_SCALE], lat_scale = f[NL_LAT_SCALE];
    const int32_t lanes_bit = bits[NL_LANES_BIT], bandwidth_bit = bits[NL_BANDWIDTH_BIT];
    const int32_t latency_bit = bits[NL_LATENCY_BIT], errors_bit = bits[NL_ERRORS_BIT], down_bit = bits[NL_DOWN_BIT];
    for (int64_t col = 0; col < per_node; col++) {
        nominal_of[col] = nominal[kind_order[col]];
        center_of[col] = lat_center[kind_order[col]];
    }
    for (int64_t node = 0; node < n / per_node; node++) {
        for (int64_t col = 0; col < per_node; col++) {
            int kind = kind_order[col];
            float node_pace = pace[node * n_kinds + kind];
            pace_of[col] = node_pace;
            comm_of[col] = node_pace / share_ref[kind] > f[NL_IDLE_BELOW];
        }
        for (int64_t col = 0; col < per_node; col++) {
            int64_t i = node * per_node + col;
            struct nl_link o;
            nl_link_at(&in, i, nominal_of[col], pace_of[col], comm_of[col], center_of[col], &o);
            float lanes = in.lanes[i], latency = in.latency[i], seconds = held[i], interval = dt[i];
            share_of_node[i] = o.share_of_node;
            now_ratio[i] = blend_f32(o.fresh, o.ratio, now_ratio[i]);
            /* A drop: no lane up, or near-zero bandwidth with lanes up two samples running, or a dip under half
             * its level (at a long tick, under 1 - drop_min_s / interval) with every lane up and a retraining's
             * replays. */
            int low = o.fresh & (o.ratio < down_below) & o.up;
            int down = (!o.up) | (low & (was_low[i] != 0));
            uint8_t fresh_mask = (uint8_t)(0u - (unsigned)o.fresh);
            was_low[i] = (uint8_t)(((uint8_t)low & fresh_mask) | (was_low[i] & (uint8_t)~fresh_mask));
            int retrained = replay[i] * interval >= retrain;
            float below = np_maximum(drop_below, 1.0f - drop_min_s / seconds);
            int full = o.comm & (lanes == all_lanes);
            int drop = o.fresh & (down | (full & (o.ratio < below) & retrained));
            float bw_dev = 1.0f - o.ratio;
            bw_dev /= bw_scale;
            float lat_dev = o.lat_ratio - 1.0f; /* numpy's 0 where not lat_ok: its CUSUM does not read it there */
            lat_dev /= lat_scale;
            int far_latency = o.lat_ok & (latency > o.kind_latency * latency_band);
            int far_level = o.bw_learned & (bw_level[i] < bandwidth_band);
            float errors = (crc[i] + replay[i]) * interval;
            errors /= interval;
            float band = cusum_next(sums[i], (float)(far_latency | far_level), o.fresh, 1, seconds, 0, 0.0f,
                                    c[0], c[1], c[2], c[3], c[4]);
            float bandwidth = cusum_next(sums[n + i], bw_dev, o.fresh & o.up & o.comm & !down & o.bw_learned, 1,
                                         seconds, 0, 0.0f, c[5], c[6], c[7], c[8], c[9]);
            float lat = cusum_next(sums[2 * n + i], lat_dev, o.lat_ok & !down & o.lat_learned, 1, seconds, 0, 0.0f,
                                   c[10], c[11], c[12], c[13], c[14]);
            float err = cusum_next(sums[3 * n + i], errors, o.fresh, 1, seconds, 0, 0.0f, c[15], c[16], c[17],
                                   c[18], c[19]);
            sums[i] = band;
            sums[n + i] = bandwidth;
            sums[2 * n + i] = lat;
            sums[3 * n + i] = err;
            int outside = band >= c[1];
            int32_t why = (o.up & (lanes < all_lanes)) ? lanes_bit : 0;
            why |= ((bandwidth >= c[6]) | (outside & far_level)) ? bandwidth_bit : 0;
            why |= ((lat >= c[11]) | (outside & far_latency)) ? latency_bit : 0;
            why |= err >= c[16] ? errors_bit : 0;
            why |= drop ? down_bit : 0;
            reasons[i] = why;
            candidate[i] = (int8_t)(drop ? 2 : why != 0);
            dropped[i] = (uint8_t)drop;
            bw_learn[i] = (uint8_t)(o.fresh & o.up & !drop & o.comm);
            lat_ok[i] = (uint8_t)o.lat_ok;
        }
    }
    return 0;
}

/* EFA port evidence (rainierd/core/detect/efa.py EfaDetector.update, which documents the rule): for every
 * port, its traffic as a share of its node's other ports' (ref: their median, numpy's) and of its own usual
 * share, the EWMAs of that ratio and of its latency over its level, its drop, its deviations, the wide band,
 * three CUSUMs (throughput, band, latency) and its reasons, in one pass, in float32 as numpy computed them,
 * operation for operation.  What needs the fleet (the node references, the latency centre, the robust scales
 * on the peer sample) and the retransmit tests (slow loss) numpy computes first; the tracker after. */
enum { EFA_LEARN_S, EFA_DOWN_BELOW, EFA_ALPHA, EFA_LAT_CENTER, EFA_FAR_LATENCY, EFA_BW_SCALE, EFA_LAT_SCALE,
       EFA_CUSUMS /* then k, h, cap, per_sample, ceiling of the throughput's, band's and latency's CUSUMs */,
       EFA_FIGURES = EFA_CUSUMS + 15 };
enum { EFA_BANDWIDTH_BIT, EFA_LATENCY_BIT, EFA_RETRANSMITS_BIT, EFA_LOSS_RATE_BIT, EFA_DOWN_BIT,
       EFA_UNRESPONSIVE_BIT };

struct efa_port {
    int fresh, active, lat_ok, share_learned, lat_learned;
    float share, ratio, lat_ratio;
};

static inline __attribute__((always_inline)) void efa_port_of(
    int64_t i, const float *restrict rate, const float *restrict ref, const float *restrict latency,
    const uint8_t *restrict fresh, const float *restrict share_level, const float *restrict share_history,
    const float *restrict lat_level, const float *restrict lat_history, const float *f, struct efa_port *o)
{
    float reference = ref[i], lat = latency[i];
    o->fresh = fresh[i] != 0;
    o->active = o->fresh & (reference > 0.0f);
    float share = rate[i] / reference;
    o->share = o->active ? share : 1.0f;
    float level = share_level[i], lat_level_i = lat_level[i]; /* both read: selects, not branches */
    o->share_learned = share_history[i] >= f[EFA_LEARN_S];
    o->ratio = o->share / (o->share_learned ? level : 1.0f);
    o->lat_ok = o->fresh & (lat > 0.0f);
    o->lat_learned = lat_history[i] >= f[EFA_LEARN_S];
    o->lat_ratio = lat / (o->lat_learned ? lat_level_i : f[EFA_LAT_CENTER]);
}

#define EFA_ARGS                                                                                                \
    int64_t n, const float *restrict rate, const float *restrict ref, const float *restrict latency,           \
        const uint8_t *restrict fresh, const float *restrict share_level, const float *restrict share_history, \
        const float *restrict lat_level, const float *restrict lat_history, const float *figures
#define EFA_PORT(i, o)                                                                                          \
    efa_port_of(i, rate, ref, latency, fresh, share_level, share_history, lat_level, lat_history, f, o)

/* For the m ports index[k] (each within n): the throughput ratio and whether it is judged (active), the latency
 * over its reference and whether that is judged: out[0..2][k] and judged[0..2][k], for the robust scales. */
int64_t rd_efa_sample(EFA_ARGS, const int64_t *index, int64_t m, float *out, uint8_t *judged)
{
    float f[EFA_FIGURES];
    struct efa_port o;
    memcpy(f, figures, sizeof f);
    for (int64_t k = 0; k < m; k++)
        if (index[k] < 0 || index[k] >= n)
            return -1;
    for (int64_t k = 0; k < m; k++) {
        EFA_PORT(index[k], &o);
        out[k] = o.ratio;
        judged[k] = (uint8_t)o.active;
        out[m + k] = o.lat_ratio;
        judged[m + k] = (uint8_t)o.lat_ok;
    }
    return 0;
}

/* Every port's evidence (see above): its share of its node's traffic (which its level learns), its reasons
 * (bursts and slow loss from numpy's retransmit tests, bursting and lossy), whether it is down, active and its
 * latency judged; in place, the two EWMAs, whether its last sample was near zero, and the three CUSUMs (sums:
 * three rows of n).  unresponsive_rate is the remote-unresponsive events a second (any over an interval is
 * unresponsive). */
int64_t rd_efa_evidence(EFA_ARGS, const float *restrict dt, const float *restrict held,
                        const float *restrict unresponsive_rate, const uint8_t *restrict bursting,
                        const uint8_t *restrict lossy, const int32_t *bits, uint8_t *restrict was_low,
                        float *restrict share_ewma, float *restrict lat_ewma, float *restrict sums,
                        float *restrict share_out, int32_t *restrict reasons, uint8_t *restrict down_out,
                        uint8_t *restrict active_out, uint8_t *restrict lat_ok_out)
{
    float f[EFA_FIGURES];
    int32_t b[6];
    memcpy(f, figures, sizeof f);
    memcpy(b, bits, sizeof b);
    const float down_below = f[EFA_DOWN_BELOW], alpha = f[EFA_ALPHA], far_at = f[EFA_FAR_LATENCY];
    const float bw_scale = f[EFA_BW_SCALE], lat_scale = f[EFA_LAT_SCALE];
    const float *c = f + EFA_CUSUMS;
    for (int64_t i = 0; i < n; i++) {
        struct efa_port o;
        EFA_PORT(i, &o);
        float interval = dt[i], seconds = held[i], lat = latency[i];
        /* The EWMAs: seeded where NaN, moved by alpha where judged. */
        float before = share_ewma[i];
        float blended = (o.ratio - before) * alpha + before;
        blended = before != before ? o.ratio : blended;
        share_ewma[i] = blend_f32(o.active, blended, before);
        before = lat_ewma[i];
        blended = (o.lat_ratio - before) * alpha + before;
        blended = before != before ? o.lat_ratio : blended;
        lat_ewma[i] = blend_f32(o.lat_ok, blended, before);
        /* Down: near-zero traffic two samples running, or the remote unresponsive. */
        int unresponsive = unresponsive_rate[i] * interval > 0.0f;
        int low = o.active & (o.ratio < down_below);
        int down = (low & (was_low[i] != 0)) | (o.active & unresponsive);
        uint8_t fresh_mask = (uint8_t)(0u - (unsigned)o.fresh);
        was_low[i] = (uint8_t)(((uint8_t)low & fresh_mask) | (was_low[i] & (uint8_t)~fresh_mask));
        float shortfall = 1.0f - o.ratio;
        shortfall /= bw_scale;
        float lat_dev = o.lat_ratio - 1.0f; /* numpy's 0 where not lat_ok: its CUSUM does not read it there */
        lat_dev /= lat_scale;
        int far_latency = o.lat_ok & (lat > far_at);
        float throughput = cusum_next(sums[i], shortfall, o.active & !down & o.share_learned, 1, seconds, 1,
                                      interval, c[0], c[1], c[2], c[3], c[4]);
        float band = cusum_next(sums[n + i], (float)far_latency, o.fresh, 1, seconds, 0, 0.0f, c[5], c[6], c[7],
                                c[8], c[9]);
        float latency_sum = cusum_next(sums[2 * n + i], lat_dev, o.lat_ok & !down & o.lat_learned, 1, seconds, 1,
                                       interval, c[10], c[11], c[12], c[13], c[14]);
        sums[i] = throughput;
        sums[n + i] = band;
        sums[2 * n + i] = latency_sum;
        int32_t why = throughput >= c[1] ? b[EFA_BANDWIDTH_BIT] : 0;
        why |= ((latency_sum >= c[11]) | ((band >= c[6]) & far_latency)) ? b[EFA_LATENCY_BIT] : 0;
        why |= bursting[i] ? b[EFA_RETRANSMITS_BIT] : 0;
        why |= lossy[i] ? b[EFA_LOSS_RATE_BIT] : 0;
        why |= down ? b[EFA_DOWN_BIT] : 0;
        why |= (o.fresh & unresponsive) ? b[EFA_UNRESPONSIVE_BIT] : 0;
        reasons[i] = why;
        share_out[i] = o.share;
        down_out[i] = (uint8_t)down;
        active_out[i] = (uint8_t)o.active;
        lat_ok_out[i] = (uint8_t)o.lat_ok;
    }
    return 0;
}
