#[global_allocator]
static A: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's committed bytes (a release mimalloc keeps no count of allocated bytes).
fn committed() -> usize {
    let (mut e, mut u, mut s, mut rss, mut prss, mut commit, mut pcommit, mut pf) = (0, 0, 0, 0, 0, 0, 0, 0);
    // SAFETY: mi_process_info writes each of the out-parameters.
    unsafe {
        libmimalloc_sys::mi_process_info(
            &mut e, &mut u, &mut s, &mut rss, &mut prss, &mut commit, &mut pcommit, &mut pf,
        )
    };
    commit
}

fn main() {
    rust_allocs::main_with("mimalloc current_commit", committed);
}
