# The loader thread's start routine, copied into the target by memlens (src/inject.rs holds the
# assembled bytes; `cargo test -p memlens-attach` checks they match this file). Position
# independent; rdi = the data page (layout in src/inject.rs). It detaches itself, creates a memfd
# and publishes its number (status 5), waits (1 ms naps) until memlens has written the runtime into
# it and set `go` (1; 2 = give up), dlopen()s /proc/thread-self/fd/N, calls memlens_attach_entry(args,
# msg, 512), and reports through the status word: 1 ok, 2 dlopen failed, 3 dlsym failed, 4 entry
# failed (reason in msg). On success it waits for memlens's acknowledgement (go = 3), then unmaps
# the page (munmap returns into pthread_exit); on failure it leaves it for memlens to read. All the waiting happens here, not in the thread
# memlens stopped.
        .intel_syntax noprefix
        .text
start:
        push rbx
        mov rbx, rdi
        call [rbx + 0x20]               # pthread_self
        mov rdi, rax
        call [rbx + 0x18]               # pthread_detach
        lea rdi, [rbx + 0x400]
        mov esi, 1                      # MFD_CLOEXEC
        call [rbx + 0x50]               # memfd_create
        mov [rbx + 0x58], eax
        mov dword ptr [rbx + 0x38], 5   # fd published
wait_go:
        mov eax, [rbx + 0x5c]
        cmp eax, 1
        je go
        test eax, eax
        jnz give_up
        lea rdi, [rbx + 0x60]
        xor esi, esi
        call [rbx + 0x70]               # nanosleep(1 ms)
        jmp wait_go
give_up:
        pop rbx
        ret
go:
        lea rdi, [rbx + 0x80]
        mov esi, 0x1002                 # RTLD_NOW | RTLD_NODELETE
        call [rbx + 0x00]               # dlopen
        test rax, rax
        jz no_dlopen
        mov rdi, rax
        lea rsi, [rbx + 0xc0]
        call [rbx + 0x08]               # dlsym
        test rax, rax
        jz no_dlsym
        lea rdi, [rbx + 0x100]
        lea rsi, [rbx + 0x200]
        mov edx, 512
        call rax                        # memlens_attach_entry
        test eax, eax
        jnz entry_failed
        mov dword ptr [rbx + 0x38], 1
wait_ack:                               # memlens acknowledges (go = 3) before the page goes away,
        cmp dword ptr [rbx + 0x5c], 3   # so it never reads an address the program has reused
        je unmap
        inc dword ptr [rbx + 0x78]
        cmp dword ptr [rbx + 0x78], 5000 # or 5 s without memlens
        jae unmap
        lea rdi, [rbx + 0x60]
        xor esi, esi
        call [rbx + 0x70]               # nanosleep(1 ms)
        jmp wait_ack
unmap:
        mov rdi, rbx
        mov rsi, [rbx + 0x40]
        mov rax, [rbx + 0x30]
        pop rbx
        push rax                        # munmap returns into pthread_exit
        jmp [rdi + 0x28]                # munmap(page, len)
no_dlopen:
        mov dword ptr [rbx + 0x3c], 2
        jmp copy_error
no_dlsym:
        mov dword ptr [rbx + 0x3c], 3
copy_error:
        call [rbx + 0x10]               # dlerror
        test rax, rax
        jz publish
        lea rdi, [rbx + 0x200]
        mov ecx, 511
copy:
        mov dl, [rax]
        mov [rdi], dl
        test dl, dl
        jz publish
        inc rax
        inc rdi
        dec ecx
        jnz copy
        mov byte ptr [rdi], 0
publish:
        mov eax, [rbx + 0x3c]
        mov [rbx + 0x38], eax
        pop rbx
        ret
entry_failed:
        mov dword ptr [rbx + 0x38], 4
        pop rbx
        ret
