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

/// An open pool holding three arrays of `n` f64, deleted on drop.
pub struct Pool {
    lib: *mut c_void,
    pop: *mut c_void,
    close: CloseFn,
    pub direct: DirectFn,
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

/// A thread's share of the pool's arrays: element range [start, start + n).
#[derive(Clone, Copy)]
pub struct PmemSlice<'a> {
    pub pool: &'a Pool,
    pub start: usize,
    pub n: usize,
}

impl PmemSlice<'_> {
    pub fn init(&self) {
        for arr in 0..3 {
            let p = self.pool.base(arr);
            for i in self.start..self.start + self.n {
                // SAFETY: i is inside the array of this slice's thread.
                unsafe { *p.add(i) = [1.0, 2.0, 0.0][arr] };
            }
        }
    }

    /// Triad with `pmemobj_direct` called for every element access, the way code that keeps only
    /// object ids (PMEMoid) and dereferences them in the loop runs.
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
