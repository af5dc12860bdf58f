//! The call chain of a stopped thread, walked with the DWARF call frame information (`.eh_frame`)
//! of the modules it runs in (gimli reads it): which functions the thread is *inside*, rather than
//! which words its stack happens to hold. A stack word is no proof: the main thread of every glibc
//! program keeps `_dl_fini` (ld.so's code) as an argument in `__libc_start_main`'s frame for its
//! whole life, which made every idle postgres process look as if it were in the loader.
//!
//! Where the walk cannot go on (code without CFI, a CFA computed by an expression as in signal
//! frames), the rest of the stack is still scanned, but only for *return addresses* — words just
//! after a call instruction in executable memory — so data that happens to point into code is not
//! taken for a frame.
use crate::tracee::Tracee;
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use object::{Object, ObjectSection, ObjectSegment};

/// The CFI of one module, in its file's virtual addresses.
struct Module {
    /// Executable spans in the process.
    spans: Vec<(u64, u64)>,
    /// Process address − file virtual address.
    bias: u64,
    eh_frame: Vec<u8>,
    eh_frame_addr: u64,
    hdr: Option<(Vec<u8>, u64)>,
    text_addr: u64,
}

/// The CFI of every module mapped in a process, read before any thread is stopped.
pub struct Unwinder {
    modules: Vec<Module>,
}

/// A walked chain.
#[derive(Debug, Default)]
pub struct Chain {
    /// Return addresses of the frames, innermost first (the interrupted pc not included).
    pub pcs: Vec<u64>,
    /// The walk reached the outermost frame (`_start`, a thread's start).
    pub complete: bool,
    /// The stack pointer where the walk stopped.
    pub sp: u64,
}

fn module_from(data: &[u8], spans: Vec<(u64, u64)>, base: u64) -> Option<Module> {
    let file = object::File::parse(data).ok()?;
    let eh = file.section_by_name(".eh_frame")?;
    let first = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    let hdr = file
        .section_by_name(".eh_frame_hdr")
        .and_then(|h| Some((h.data().ok()?.to_vec(), h.address())));
    Some(Module {
        spans,
        bias: base.wrapping_sub(first),
        eh_frame: eh.data().ok()?.to_vec(),
        eh_frame_addr: eh.address(),
        hdr,
        text_addr: file
            .section_by_name(".text")
            .map(|t| t.address())
            .unwrap_or(0),
    })
}

impl Unwinder {
    /// Read the CFI of the process's modules (and of its vDSO, from its memory). A module whose
    /// file cannot be read has none: a walk reaching it falls back to the return-address scan.
    pub fn new(p: &Tracee, read_mem: &dyn Fn(u64, &mut [u8]) -> usize) -> Unwinder {
        let mut modules = Vec::new();
        for path in p.modules() {
            let spans = p.code_of(|q| q == path);
            let (Some(base), false) = (p.base_of(&path), spans.is_empty()) else {
                continue;
            };
            if let Some(m) = p
                .read_file(&path)
                .ok()
                .and_then(|d| module_from(&d, spans, base))
            {
                modules.push(m);
            }
        }
        if let Some(v) = p.maps.iter().find(|m| m.path == "[vdso]") {
            let mut image = vec![0u8; (v.hi - v.lo) as usize];
            if read_mem(v.lo, &mut image) == image.len() {
                if let Some(m) = module_from(&image, vec![(v.lo, v.hi)], v.lo) {
                    modules.push(m);
                }
            }
        }
        Unwinder { modules }
    }

    fn module(&self, pc: u64) -> Option<&Module> {
        self.modules
            .iter()
            .find(|m| m.spans.iter().any(|&(lo, hi)| pc >= lo && pc < hi))
    }

    /// Walk from the registers of a stopped thread; `read` reads one stack word.
    pub fn chain(&self, rip: u64, rsp: u64, rbp: u64, read: &dyn Fn(u64) -> Option<u64>) -> Chain {
        let (mut pc, mut sp, mut bp) = (rip, rsp, rbp);
        let mut ctx = Box::new(UnwindContext::new());
        let mut out = Chain::default();
        for depth in 0..256 {
            out.sp = sp;
            // A return address points after its call: look up the call itself (not the first frame,
            // interrupted at any instruction).
            let lookup = if depth == 0 { pc } else { pc - 1 };
            let Some(m) = self.module(lookup) else {
                return out;
            };
            let vaddr = lookup.wrapping_sub(m.bias);
            let eh = EhFrame::new(&m.eh_frame, LittleEndian);
            let mut bases = BaseAddresses::default()
                .set_eh_frame(m.eh_frame_addr)
                .set_text(m.text_addr);
            let row = match &m.hdr {
                Some((hdr, addr)) => {
                    bases = bases.set_eh_frame_hdr(*addr);
                    EhFrameHdr::new(hdr, LittleEndian)
                        .parse(&bases, 8)
                        .ok()
                        .and_then(|h| {
                            h.table()?
                                .unwind_info_for_address(
                                    &eh,
                                    &bases,
                                    &mut ctx,
                                    vaddr,
                                    EhFrame::cie_from_offset,
                                )
                                .ok()
                                .cloned()
                        })
                }
                None => eh
                    .unwind_info_for_address(&bases, &mut ctx, vaddr, EhFrame::cie_from_offset)
                    .ok()
                    .cloned(),
            };
            let Some(row) = row else {
                return out;
            };
            let cfa = match row.cfa() {
                CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RSP => {
                    sp.wrapping_add(*offset as u64)
                }
                CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RBP => {
                    bp.wrapping_add(*offset as u64)
                }
                _ => return out,
            };
            let ra = match row.register(X86_64::RA) {
                Some(RegisterRule::Undefined) => {
                    out.complete = true;
                    return out;
                }
                Some(RegisterRule::Offset(o)) => match read(cfa.wrapping_add(o as u64)) {
                    Some(v) => v,
                    None => return out,
                },
                _ => return out,
            };
            if let Some(RegisterRule::Offset(o)) = row.register(X86_64::RBP) {
                match read(cfa.wrapping_add(o as u64)) {
                    Some(v) => bp = v,
                    None => return out,
                }
            }
            if ra == 0 {
                out.complete = true;
                return out;
            }
            out.pcs.push(ra);
            pc = ra;
            sp = cfa;
        }
        out
    }
}

/// Do the bytes before `ra` (`code`, which ends at `ra`) end with a call instruction? A direct call
/// (`e8 rel32`) or an indirect one (`ff /2` with any addressing form, optionally after a REX prefix).
pub fn after_call(code: &[u8]) -> bool {
    let n = code.len();
    if n >= 5 && code[n - 5] == 0xe8 {
        return true;
    }
    // ff /2: the ModRM byte's reg field is 2; the length follows from mod and rm
    for len in 2..=7usize {
        if n < len || code[n - len] != 0xff {
            continue;
        }
        let modrm = code[n - len + 1];
        if (modrm >> 3) & 7 != 2 {
            continue;
        }
        let (md, rm) = (modrm >> 6, modrm & 7);
        let sib = rm == 4 && md != 3;
        let base5 = sib && n - len + 2 < n && code[n - len + 2] & 7 == 5;
        let expect = 2
            + sib as usize
            + match md {
                0 if rm == 5 || base5 => 4,
                1 => 1,
                2 => 4,
                _ => 0,
            };
        if expect == len {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_instructions_before_a_return_address() {
        assert!(after_call(&[0x90, 0xe8, 1, 2, 3, 4])); // call rel32
        assert!(after_call(&[0x90, 0xff, 0xd0])); // call *%rax
        assert!(after_call(&[0x41, 0xff, 0xd0])); // call *%r8
        assert!(after_call(&[0xff, 0x15, 1, 2, 3, 4])); // call *disp32(%rip)
        assert!(after_call(&[0xff, 0x50, 0x08])); // call *8(%rax)
        assert!(after_call(&[0xff, 0x14, 0x24])); // call *(%rsp)
        assert!(!after_call(&[0x55, 0x48, 0x89, 0xe5])); // push %rbp; mov %rsp,%rbp
        assert!(!after_call(&[0xff, 0xe0])); // jmp *%rax
    }

    /// Our own main thread, walked from here: the chain reaches the outermost frame and passes
    /// through this test's function.
    #[test]
    fn walks_our_own_stack() {
        let p = crate::tracee::check(std::process::id() as i32).unwrap();
        let read_mem = |addr: u64, buf: &mut [u8]| -> usize {
            // SAFETY: reading our own mapped memory through the kernel, which checks it.
            let local = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            let remote = libc::iovec {
                iov_base: addr as *mut libc::c_void,
                iov_len: buf.len(),
            };
            let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
            n.max(0) as usize
        };
        let u = Unwinder::new(&p, &read_mem);
        let (rip, rsp, rbp): (u64, u64, u64);
        // SAFETY: reads three registers.
        unsafe {
            std::arch::asm!("lea {0}, [rip]", "mov {1}, rsp", "mov {2}, rbp", out(reg) rip, out(reg) rsp, out(reg) rbp)
        };
        let read = |a: u64| {
            let mut b = [0u8; 8];
            (read_mem(a, &mut b) == 8).then(|| u64::from_le_bytes(b))
        };
        let c = u.chain(rip, rsp, rbp, &read);
        assert!(c.pcs.len() >= 3, "{c:?}");
        assert!(c.complete, "{c:?}");
    }
}
