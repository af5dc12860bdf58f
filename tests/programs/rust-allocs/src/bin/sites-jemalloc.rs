#[global_allocator]
static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    rust_allocs::main_with("jemalloc stats.allocated", rust_allocs::jemalloc_allocated);
}
