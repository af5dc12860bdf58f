//! Function names short enough for a terminal table, as pprof shows them: C++ and Rust generic
//! arguments and parameter lists left out (`std::vector<int>::push_back(int const&)` reads
//! `std::vector::push_back`). Namespaces stay, so two functions that differ by more than their
//! arguments still read differently. Only for display: JSON and pprof keep the full name.

/// The short form of a demangled function name.
pub fn short_name(full: &str) -> String {
    let c: Vec<char> = full.chars().collect();
    let mut out = String::with_capacity(full.len());
    let mut i = 0;
    while i < c.len() {
        let rest: String = c[i..].iter().take(21).collect();
        if rest.starts_with("(anonymous namespace)") {
            out.push_str("(anonymous namespace)");
            i += "(anonymous namespace)".len();
        } else if ends_with_word(&out, "operator") {
            i = copy_operator(&c, i, &mut out);
        } else if c[i] == '<' && out.ends_with("::") && out.len() > 2 {
            // Rust's turbofish `f::<T>`: the arguments and their `::` go
            out.truncate(out.len() - 2);
            i = skip_group(&c, i, '<', '>');
        } else if c[i] == '<' && follows_name(&out) {
            i = skip_group(&c, i, '<', '>');
        } else if c[i] == '(' && follows_name(&out) {
            i = skip_group(&c, i, '(', ')');
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    tidy(out)
}

/// True when `out` ends with the identifier `word` (not a longer identifier ending in it).
fn ends_with_word(out: &str, word: &str) -> bool {
    out.strip_suffix(word)
        .is_some_and(|head| !head.ends_with(|ch: char| ch.is_alphanumeric() || ch == '_'))
}

/// A `<` or `(` right after a name opens its arguments; anywhere else (at the start, after `::`
/// or a space) it is part of the name itself, e.g. Rust's `<T as Trait>::f`.
fn follows_name(out: &str) -> bool {
    out.ends_with(|ch: char| ch.is_alphanumeric() || ch == '_' || ch == '>' || ch == ']')
}

/// The index just past the group opened at `c[i]`, nested groups included. `->` inside is an
/// arrow, not a closing bracket.
fn skip_group(c: &[char], mut i: usize, open: char, close: char) -> usize {
    let mut depth = 0usize;
    while i < c.len() {
        let ch = c[i];
        if ch == open {
            depth += 1;
        } else if ch == close && !(close == '>' && i > 0 && c[i - 1] == '-') {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    c.len()
}

/// Copy the symbol of `operator<<`, `operator()`, `operator->` … verbatim.
fn copy_operator(c: &[char], mut i: usize, out: &mut String) -> usize {
    let start = i;
    if c[i..].starts_with(&['(', ')']) || c[i..].starts_with(&['[', ']']) {
        out.extend(&c[i..i + 2]);
        i += 2;
    }
    while i < c.len() && i - start < 3 && "<>=!+-*/%^&|~,".contains(c[i]) {
        out.push(c[i]);
        i += 1;
    }
    if i == start {
        out.push(c[i]);
        i += 1;
    }
    // `operator< <char>`: the template arguments of an operator come after a space
    if c[i..].starts_with(&[' ', '<']) {
        i = skip_group(c, i + 1, '<', '>');
    }
    // and its parameter list follows the symbol directly
    if c.get(i) == Some(&'(') {
        i = skip_group(c, i, '(', ')');
    }
    i
}

/// Drop what is left of a signature: `[abi:cxx11]` tags, trailing qualifiers, a return type,
/// Rust's hash suffix.
fn tidy(mut s: String) -> String {
    while let Some(a) = s.find("[abi:") {
        match s[a..].find(']') {
            Some(e) => s.replace_range(a..a + e + 1, ""),
            None => break,
        }
    }
    loop {
        let before = s.len();
        for q in [" const", " volatile", " &&", " &", " noexcept"] {
            if let Some(t) = s.strip_suffix(q) {
                s.truncate(t.len());
            }
        }
        if s.len() == before {
            break;
        }
    }
    // The return type a template function's name carries (`void std::vector::_M_realloc_insert`).
    let body_end = s.find(" [clone").unwrap_or(s.len());
    if !s[..body_end].contains("operator") {
        let mut depth = 0i32;
        let mut cut = None;
        for (i, ch) in s[..body_end].char_indices() {
            match ch {
                '<' | '(' | '{' | '[' => depth += 1,
                '>' | ')' | '}' | ']' => depth -= 1,
                ' ' if depth == 0 => cut = Some(i),
                _ => {}
            }
        }
        if let Some(sp) = cut {
            s.replace_range(..sp + 1, "");
        }
    }
    if let Some(h) = s.rfind("::h") {
        let hash = &s[h + 3..];
        if hash.len() == 16 && hash.chars().all(|ch| ch.is_ascii_hexdigit()) {
            s.truncate(h);
        }
    }
    s
}

/// Whether a frame belongs to a library rather than to the program's own code: code in a file the
/// system installed its shared libraries in (`module`: `/usr/lib/…/lib*.so*`, `/lib/…`), the C++ and Rust standard
/// libraries (`std::`, `__gnu_cxx::`, `core::`, `alloc::`, also inlined into the program), the
/// allocator entry points, the C library and the dynamic loader, and names reserved for the
/// implementation (`__x`, `_X`). A shared library of the program's own, outside those directories,
/// is the program's. Reports fold runs of such frames so that the program's own function stays in
/// view; only a display rule, nothing is merged or dropped by it.
pub fn is_library(function: &str, file: &str, module: &str) -> bool {
    const SYSTEM: [&str; 4] = ["/usr/lib/", "/lib/", "/usr/lib64/", "/lib64/"];
    let shared = module.rsplit('/').next().is_some_and(|n| n.contains(".so"));
    if shared && SYSTEM.iter().any(|d| module.starts_with(d)) {
        return true; // not a program installed there (/usr/lib/postgresql/15/bin/postgres)
    }
    const PREFIXES: [&str; 10] = [
        "std::",
        "__gnu_cxx::",
        "__cxxabiv1::",
        "core::",
        "alloc::",
        "<std::",
        "<core::",
        "<alloc::",
        "operator new",
        "operator delete",
    ];
    const EXACT: [&str; 16] = [
        "malloc",
        "calloc",
        "realloc",
        "reallocarray",
        "free",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
        "valloc",
        "pvalloc",
        "strdup",
        "strndup",
        "start_thread",
        "clone",
        "clone3",
        "_start",
    ];
    const FILES: [&str; 5] = [
        "/usr/include/",
        "/usr/lib/gcc/",
        "/rustc/",
        "./nptl/",
        "../sysdeps/",
    ];
    if let Some((name, off)) = function.rsplit_once("+0x") {
        // unsymbolized, its module's path unknown: a shared library's code is a library's
        if module.is_empty() && off.chars().all(|c| c.is_ascii_hexdigit()) {
            return name.starts_with("lib") && name.contains(".so") || name.starts_with("ld-");
        }
    }
    let reserved = function.starts_with("__")
        || function.starts_with('_') && function[1..].starts_with(|c: char| c.is_ascii_uppercase());
    reserved
        || PREFIXES.iter().any(|p| function.starts_with(p))
        || EXACT.contains(&function)
        || FILES.iter().any(|p| file.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::short_name;

    #[test]
    fn cxx_arguments_and_parameters_are_left_out() {
        for (full, short) in [
            ("std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector::push_back"),
            ("v8::internal::Heap::AllocateRaw(int, v8::internal::AllocationType, v8::internal::AllocationOrigin, v8::internal::AllocationAlignment)", "v8::internal::Heap::AllocateRaw"),
            ("std::_Function_handler<void (int), main::{lambda(int)#1}>::_M_invoke(std::_Any_data const&, int&&)", "std::_Function_handler::_M_invoke"),
            ("(anonymous namespace)::Site::grow(unsigned long) const", "(anonymous namespace)::Site::grow"),
            ("std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_construct<char const*>(char const*, char const*, std::forward_iterator_tag) [clone .isra.0]", "std::__cxx11::basic_string::_M_construct [clone .isra.0]"),
            ("operator new(unsigned long)", "operator new"),
            ("void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(__gnu_cxx::__normal_iterator<int*, std::vector<int> >, int const&)", "std::vector::_M_realloc_insert"),
            ("std::_Rb_tree_node<int>* std::_Rb_tree<int>::_M_create_node<int>(int&&)", "std::_Rb_tree::_M_create_node"),
            ("std::ostream::operator<<(int)", "std::ostream::operator<<"),
            ("Foo::operator()(int) &&", "Foo::operator()"),
            ("bool std::operator< <char>(std::string const&, std::string const&)", "bool std::operator<"),
            ("std::map<int, int>::operator[](int const&)", "std::map::operator[]"),
            ("abi::name[abi:cxx11]()", "abi::name"),
            ("malloc", "malloc"),
            ("libfoo.so+0x1234", "libfoo.so+0x1234"),
        ] {
            assert_eq!(short_name(full), short, "{full}");
        }
    }

    #[test]
    fn library_frames_are_told_from_the_programs_own() {
        use super::is_library;
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        for (f, file, module) in [
            (
                "std::__new_allocator::allocate",
                "/usr/include/c++/12/bits/new_allocator.h",
                "",
            ),
            ("std::vector::_M_realloc_insert", "", ""),
            ("operator new(unsigned long)", "", ""),
            ("__libc_start_main_impl", "../csu/libc-start.c", ""),
            ("_start", "", ""),
            ("start_thread", "./nptl/pthread_create.c", ""),
            ("clone3", "../sysdeps/unix/sysv/linux/x86_64/clone3.S", ""),
            ("libstdc++.so.6+0xd44a2", "", ""),
            ("malloc", "", ""),
            ("alloc::raw_vec::RawVec::grow_one", "", ""),
            ("<alloc::vec::Vec as core::ops::drop::Drop>::drop", "", ""),
            ("_PyObject_Malloc", "Objects/obmalloc.c", ""),
            (
                "inlined_helper",
                "/usr/include/c++/12/bits/basic_string.h",
                "",
            ),
            ("outstring_func", "./stdio-common/vfprintf-internal.c", libc),
        ] {
            assert!(is_library(f, file, module), "{f} {file}");
        }
        for (f, file, module) in [
            (
                "service::load_index",
                "/src/cxx_service.cc",
                "/src/cxx_service",
            ),
            ("main", "cxx_service.cc", ""),
            ("zmalloc_usable", "zmalloc.c", "/usr/bin/redis-check-rdb"),
            ("redis-server+0x1234", "", ""),
            ("_private_helper", "x.c", ""),
            ("mallocator", "", ""),
            ("clone_request", "", ""),
            ("plugin_entry", "plugin.c", "/opt/app/lib/libplugin.so"),
            ("libplugin.so+0x40", "", "/opt/app/lib/libplugin.so"),
            (
                "PostgresMain",
                "postgres.c",
                "/usr/lib/postgresql/15/bin/postgres",
            ),
        ] {
            assert!(!is_library(f, file, module), "{f} {file}");
        }
    }

    #[test]
    fn rust_generics_go_but_qualified_paths_stay() {
        for (full, short) in [
            (
                "core::ptr::drop_in_place<alloc::vec::Vec<u8>>",
                "core::ptr::drop_in_place",
            ),
            (
                "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop",
                "<alloc::vec::Vec as core::ops::drop::Drop>::drop",
            ),
            (
                "<F as core::ops::function::FnOnce<()>>::call_once{{vtable.shim}}",
                "<F as core::ops::function::FnOnce>::call_once{{vtable.shim}}",
            ),
            (
                "std::rt::lang_start::{{closure}}::h0123456789abcdef",
                "std::rt::lang_start::{{closure}}",
            ),
            (
                "alloc::raw_vec::RawVec<T,A>::grow_one::<fn() -> u8>",
                "alloc::raw_vec::RawVec::grow_one",
            ),
        ] {
            assert_eq!(short_name(full), short, "{full}");
        }
    }
}
