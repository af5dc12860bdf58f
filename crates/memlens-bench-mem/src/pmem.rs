//! The indirection case on a real libpmemobj pool, loaded with dlopen at run time (never linked, so
//! memlens runs where Debian's libpmemobj1 is not installed and says so instead).
use anyhow::{bail, Context, Result};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

pub const PACKAGE: &str = "libpmemobj1";
const SONAME: &str = "libpmemobj.so.1";

/// `PMEMoid` from libpmemobj/base.h: the pool's uuid (low half) and an offset in the pool.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PmemOid {
    pub pool_uuid_lo: u64,
    pub off: u64,
}

type CreateFn =
    unsafe extern "C" fn(*const c_char, *const c_char, usize, libc::mode_t) -> *mut c_void;
type CloseFn = unsafe extern "C" fn(*mut c_void);
type AllocFn = unsafe extern "C" fn(
    *mut c_void,
    *mut PmemOid,
    usize,
    u64,
    *const c_void,
    *mut c_void,
) -> c_int;
type ErrmsgFn = unsafe extern "C" fn() -> *const c_char;
pub type DirectFn = unsafe extern "C" fn(PmemOid) -> *mut c_void;
type PoolByOidFn = unsafe extern "C" fn(PmemOid) -> *mut c_void;

/// libpmemobj's per-thread cache of the last pool an object id was translated in: `struct
/// _pobj_pcache` of libpmemobj/base.h, the thread-local `_pobj_cached_pool` the library exports.
#[repr(C)]
pub struct PoolCache {
    pop: *mut c_void,
    uuid_lo: u64,
    invalidate: c_int,
}

/// An open pool holding three arrays of `n` f64, deleted on drop.
pub struct Pool {
    lib: *mut c_void,
    pop: *mut c_void,
    close: CloseFn,
    pub direct: DirectFn,
    pool_by_oid: PoolByOidFn,
    /// `_pobj_cache_invalidate`: bumped by the library when a pool closes, so cached translations
    /// are re-checked.
    invalidate: *const c_int,
    pub arrays: [PmemOid; 3],
    path: PathBuf,
}

// SAFETY: libpmemobj is thread-safe for pmemobj_direct; the pool is only closed on drop.
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

fn sym<T: Copy>(lib: *mut c_void, name: &str) -> Result<T> {
    let c = CString::new(name)?;
    // SAFETY: lib is a live dlopen handle; the caller names the symbol's true C type as T.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        bail!("{SONAME} has no symbol {name}");
    }
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// Why the pmemobj case cannot run here, if it cannot (library missing).
pub fn unavailable() -> Option<String> {
    let c = CString::new(SONAME).ok()?;
    // SAFETY: plain dlopen/dlclose of a library name.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Some(format!(
            "{SONAME} not found: install the Debian package {PACKAGE}"
        ));
    }
    unsafe { libc::dlclose(h) };
    None
}

impl Pool {
    /// Create a pool file in `dir` with three arrays of `n` doubles.
    pub fn create(dir: &Path, n: usize) -> Result<Pool> {
        let c = CString::new(SONAME)?;
        // SAFETY: dlopen with a valid C string.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            bail!("{SONAME} not found: install the Debian package {PACKAGE}");
        }
        let create: CreateFn = sym(lib, "pmemobj_create")?;
        let alloc: AllocFn = sym(lib, "pmemobj_alloc")?;
        let close: CloseFn = sym(lib, "pmemobj_close")?;
        let errmsg: ErrmsgFn = sym(lib, "pmemobj_errormsg")?;
        let direct: DirectFn = sym(lib, "pmemobj_direct")?;
        let pool_by_oid: PoolByOidFn = sym(lib, "pmemobj_pool_by_oid")?;
        let invalidate: *const c_int = sym(lib, "_pobj_cache_invalidate")?;
        // The thread-local cache must exist too (looked up per thread in `thread_cache`).
        sym::<*mut PoolCache>(lib, "_pobj_cached_pool")?;
        let last_error = || unsafe { CStr::from_ptr(errmsg()).to_string_lossy().into_owned() };
        let path = dir.join(format!("memlens-bandwidth-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let bytes = n * 8;
        // Room for the three objects plus the allocator's metadata (~1/64 is generous for huge runs).
        let size = 3 * bytes + 3 * bytes / 64 + (32 << 20);
        let cpath = CString::new(path.as_os_str().as_encoded_bytes()).context("pool path")?;
        let layout = CString::new("memlens-bandwidth")?;
        // SAFETY: valid C strings; pmemobj_create returns NULL on failure.
        let pop = unsafe { create(cpath.as_ptr(), layout.as_ptr(), size, 0o600) };
        if pop.is_null() {
            let e = last_error();
            unsafe { libc::dlclose(lib) };
            bail!(
                "pmemobj_create {} ({} MiB): {e}",
                path.display(),
                size >> 20
            );
        }
        let mut pool = Pool {
            lib,
            pop,
            close,
            direct,
            pool_by_oid,
            invalidate,
            arrays: [PmemOid {
                pool_uuid_lo: 0,
                off: 0,
            }; 3],
            path,
        };
        for i in 0..3 {
            let mut oid = PmemOid {
                pool_uuid_lo: 0,
                off: 0,
            };
            // SAFETY: pop is open; no constructor.
            let rc = unsafe {
                alloc(
                    pool.pop,
                    &mut oid,
                    bytes,
                    1,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                )
            };
            if rc != 0 {
                bail!(
                    "pmemobj_alloc of {} MiB in {}: {}",
                    bytes >> 20,
                    pool.path.display(),
                    last_error()
                );
            }
            pool.arrays[i] = oid;
        }
        Ok(pool)
    }

    /// The calling thread's `_pobj_cached_pool` (dlsym of a thread-local symbol gives the calling
    /// thread's instance), for [`PmemSlice::direct_inline`].
    pub fn thread_cache(&self) -> *mut PoolCache {
        sym::<*mut PoolCache>(self.lib, "_pobj_cached_pool").unwrap_or(std::ptr::null_mut())
    }

    /// Address of array `i` (one pmemobj_direct call).
    pub fn base(&self, i: usize) -> *mut f64 {
        // SAFETY: the oid came from pmemobj_alloc in this open pool.
        unsafe { (self.direct)(self.arrays[i]) as *mut f64 }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: closing the pool we opened, then the library; the file is ours.
        unsafe {
            (self.close)(self.pop);
            libc::dlclose(self.lib);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A thread's share of the pool's arrays: element range [start, start + n), and that thread's
/// translation cache.
#[derive(Clone, Copy)]
pub struct PmemSlice<'a> {
    pub pool: &'a Pool,
    pub start: usize,
    pub n: usize,
    /// This thread's `_pobj_cached_pool` (from [`Pool::thread_cache`], called on this thread).
    pub cache: *mut PoolCache,
}

impl PmemSlice<'_> {
    /// `pmemobj_direct_inline` of libpmemobj/base.h, which `pmemobj_direct`, `D_RO` and `D_RW` expand
    /// to in C programs (unless PMEMOBJ_DIRECT_NON_INLINE): the translation a program compiled
    /// against PMDK's headers runs inline on every access — check the id, compare the thread's cached
    /// pool with the id's pool and the global invalidation counter, add the offset — and calls into
    /// the library only when the cache misses.
    ///
    /// Every access does the whole translation, as the C code GCC makes of D_RO/D_RW does (checked
    /// with gcc 12 -O2/-O3 on a triad over TOID(double)): the TOID is reloaded from memory, and the
    /// thread's cache and the invalidation counter are read again, because a store through D_RW's
    /// double * may alias them. The reads are volatile so that LLVM, which knows less about the
    /// aliasing here than GCC must assume there, does not merge the three translations into one.
    #[inline(always)]
    unsafe fn direct_inline(&self, oid: *const PmemOid) -> *mut c_void {
        use std::ptr::{addr_of, read_volatile};
        let oid = read_volatile(oid);
        if oid.off == 0 || oid.pool_uuid_lo == 0 {
            return std::ptr::null_mut();
        }
        let cache = self.cache;
        let invalidate = read_volatile(self.pool.invalidate);
        if invalidate != read_volatile(addr_of!((*cache).invalidate))
            || read_volatile(addr_of!((*cache).uuid_lo)) != oid.pool_uuid_lo
        {
            (*cache).invalidate = invalidate;
            (*cache).pop = (self.pool.pool_by_oid)(oid);
            if (*cache).pop.is_null() {
                (*cache).uuid_lo = 0;
                return std::ptr::null_mut();
            }
            (*cache).uuid_lo = oid.pool_uuid_lo;
        }
        (read_volatile(addr_of!((*cache).pop)) as usize + oid.off as usize) as *mut c_void
    }

    /// Triad as a C program written with PMDK's typed macros runs it:
    /// `D_RW(a)[i] = D_RO(b)[i] + k * D_RO(c)[i]`, three inline translations per element.
    #[inline(never)]
    pub fn triad_inline(&self) {
        self.triad_inline_range(self.start, self.n);
    }

    /// The same over the slice's first `chunk` elements, again and again until `n` elements were
    /// processed: the arrays stay in the cache, so the time is the loop's own work (instructions),
    /// not memory — how fast the per-element translation can go when memory is not the limit.
    #[inline(never)]
    pub fn triad_inline_cached(&self, chunk: usize) {
        let chunk = chunk.clamp(1, self.n.max(1));
        let mut done = 0;
        while done < self.n {
            let k = chunk.min(self.n - done);
            self.triad_inline_range(self.start, k);
            done += k;
        }
    }

    #[inline(always)]
    fn triad_inline_range(&self, start: usize, n: usize) {
        if self.cache.is_null() {
            return;
        }
        // The object ids stay in memory and are read at every access, as a C program's TOID
        // variables are: their address was taken (POBJ_ALLOC), and a store through D_RW's double *
        // may alias them (a TOID is a union), so the compiler reloads them after each store.
        let oids = self.pool.arrays.as_ptr();
        for i in start..start + n {
            // SAFETY: the oids are live objects of the pool; i is inside this thread's range; the
            // cache is this thread's own.
            unsafe {
                let b = *(self.direct_inline(oids.add(1)) as *const f64).add(i);
                let c = *(self.direct_inline(oids.add(2)) as *const f64).add(i);
                *(self.direct_inline(oids) as *mut f64).add(i) = b + crate::stream::SCALAR * c;
            }
        }
    }

    pub fn init(&self) {
        for arr in 0..3 {
            let p = self.pool.base(arr);
            for i in self.start..self.start + self.n {
                // SAFETY: i is inside the array of this slice's thread.
                unsafe { *p.add(i) = [1.0, 2.0, 0.0][arr] };
            }
        }
    }

    /// Triad with the exported `pmemobj_direct` called for every element access: a call into the
    /// library (what a program built with PMEMOBJ_DIRECT_NON_INLINE, or a language binding, pays).
    #[inline(never)]
    pub fn triad_direct(&self) {
        let direct = self.pool.direct;
        let [oa, ob, oc] = self.pool.arrays;
        for i in self.start..self.start + self.n {
            // SAFETY: the oids are live objects of n_total elements; i is in range.
            unsafe {
                let b = *(direct(ob) as *const f64).add(i);
                let c = *(direct(oc) as *const f64).add(i);
                *(direct(oa) as *mut f64).add(i) = b + crate::stream::SCALAR * c;
            }
        }
    }

    /// The PMDK recipe: translate once, then a plain loop over the pointers.
    #[inline(never)]
    pub fn triad_hoisted(&self) {
        let (pa, pb, pc) = (self.pool.base(0), self.pool.base(1), self.pool.base(2));
        // SAFETY: disjoint arrays; this thread's range only.
        let (a, b, c) = unsafe {
            (
                std::slice::from_raw_parts_mut(pa.add(self.start), self.n),
                std::slice::from_raw_parts(pb.add(self.start), self.n),
                std::slice::from_raw_parts(pc.add(self.start), self.n),
            )
        };
        crate::stream::triad(b, c, a);
    }
}
