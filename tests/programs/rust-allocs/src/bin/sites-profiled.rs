//! tikv-jemallocator wrapped in memlens_alloc::Profiled: the allocations reach memlens through the
//! report API (the hooks on jemalloc then stop counting, so nothing is counted twice).
#[global_allocator]
static A: memlens_alloc::Profiled<tikv_jemallocator::Jemalloc> =
    memlens_alloc::Profiled::new(tikv_jemallocator::Jemalloc);

fn main() {
    rust_allocs::main_with("jemalloc stats.allocated", rust_allocs::jemalloc_allocated);
}
