/* The estimated live heap and the sampled live set at its high-water mark.
 *
 * Every sampled block adds its unbiased bytes to one counter while it lives, so the counter is an
 * unbiased estimate of the whole live heap. When it passes the last snapshot by a margin (1/32 of it,
 * at least 4 intervals), each stack's live counters are copied into its peak columns: the dump then
 * carries the set that was live at the (estimated) peak. The margin bounds the number of snapshots
 * to a few per doubling of the heap, and the copy walks the dense stack list, not the hash table. */
#define _GNU_SOURCE
#include "views.h"

static _Alignas(64) _Atomic int64_t heap;
static _Atomic int64_t sampled; /* real bytes of live sampled blocks (the allocator does not see them) */
static _Atomic int64_t heap_max, next_snap;
static _Atomic uint64_t heap_max_ns, snap_heap, snap_ns;
static _Atomic int snap_lock;

int64_t ml_heap_now(void) { return atomic_load_explicit(&heap, memory_order_relaxed); }
int64_t ml_sampled_live_bytes(void) { return atomic_load_explicit(&sampled, memory_order_relaxed); }

static void copy_peak(struct ml_stack *r, void *arg)
{
    (void)arg;
    atomic_store_explicit(&r->peak_fx, atomic_load_explicit(&r->inuse_fx, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&r->peak_bytes, atomic_load_explicit(&r->inuse_bytes, memory_order_relaxed),
                          memory_order_relaxed);
}

static ML_NOINLINE void snapshot(uint64_t now)
{
    if (atomic_exchange_explicit(&snap_lock, 1, memory_order_acquire))
        return; /* another thread is taking it */
    int64_t h = ml_heap_now();
    if (h > atomic_load_explicit(&next_snap, memory_order_relaxed)) {
        ml_stacks_each_listed(copy_peak, NULL);
        uint64_t R = atomic_load_explicit(&ml_cfg.interval, memory_order_relaxed);
        int64_t margin = h >> 5;
        if (margin < (int64_t)(4 * R))
            margin = (int64_t)(4 * R);
        atomic_store_explicit(&next_snap, h + margin, memory_order_relaxed);
        atomic_store_explicit(&snap_heap, (uint64_t)h, memory_order_relaxed);
        atomic_store_explicit(&snap_ns, ml_now_ns(), memory_order_relaxed);
        ml_timeline_tick(now, ML_TL_PEAK);
    }
    ml_spin_unlock(&snap_lock);
}

void ml_heap_add(int64_t delta, int64_t size, uint64_t now)
{
    atomic_fetch_add_explicit(&sampled, size, memory_order_relaxed);
    int64_t h = atomic_fetch_add_explicit(&heap, delta, memory_order_relaxed) + delta;
    if (delta > 0) {
        if (h > atomic_load_explicit(&heap_max, memory_order_relaxed)) {
            atomic_store_explicit(&heap_max, h, memory_order_relaxed); /* racy max: good enough */
            atomic_store_explicit(&heap_max_ns, ml_now_ns(), memory_order_relaxed);
            if (h > atomic_load_explicit(&next_snap, memory_order_relaxed)) {
                snapshot(now);
                return;
            }
        }
    }
    if (unlikely(now >= atomic_load_explicit(&ml_timeline_next, memory_order_relaxed)))
        ml_timeline_tick(now, ML_TL_PERIODIC);
}

/* view heap <now> / heap_max <bytes> <ns> / peak <bytes at the snapshot> <ns> */
void ml_peak_write(struct ml_out *o)
{
    ml_out_str(o, "view heap ");
    ml_out_i64(o, ml_heap_now());
    ml_out_str(o, "\nview heap_max ");
    ml_out_i64(o, atomic_load(&heap_max));
    ml_out_str(o, " ");
    ml_out_u64(o, atomic_load(&heap_max_ns));
    ml_out_str(o, "\nview peak ");
    ml_out_u64(o, atomic_load(&snap_heap));
    ml_out_str(o, " ");
    ml_out_u64(o, atomic_load(&snap_ns));
    ml_out_str(o, "\n");
}
