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
