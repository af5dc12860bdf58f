# The loader thread's start routine, copied into the target by memlens (src/inject.rs holds the
# assembled bytes; `cargo test -p memlens-attach` checks they match this file). Position
# independent; rdi = the data page (layout in src/inject.rs). It blocks every signal (the program's
# signals stay with its own threads), detaches itself, creates a memfd and publishes its number
# (status 5), waits (1 ms naps) until memlens has written the runtime into it and set `go` (1 load;
# 2 give up; 20 s without it: given up), dlopen()s /proc/thread-self/fd/N, calls memlens_attach_entry(args, msg, 512), and
# reports through the status word: 1 ok, 2 dlopen failed, 3 dlsym failed, 4 entry failed (reason in
# msg), 6 given up. On any failure it closes the memfd first. Then it waits for memlens's
# acknowledgement (go = 3, or go = 2 at once; 5 s at most without memlens), and unmaps the page
# (munmap returns into pthread_exit): whatever happens, nothing of the attach stays in the process
# but the runtime itself. All the waiting happens here, not in the thread memlens stopped.
        .intel_syntax noprefix
        .text
start:
        push rbx
        mov rbx, rdi
        mov eax, 14                     # rt_sigprocmask(SIG_BLOCK, all, NULL, 8)
        xor edi, edi
        lea rsi, [rbx + 0x420]
        xor edx, edx
        mov r10d, 8
        syscall
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
        inc dword ptr [rbx + 0x78]
        cmp dword ptr [rbx + 0x78], 20000 # 20 s without memlens (killed): give up
        jae give_up
        lea rdi, [rbx + 0x60]
        xor esi, esi
        call [rbx + 0x70]               # nanosleep(1 ms)
        jmp wait_go
give_up:
        mov dword ptr [rbx + 0x3c], 6
        jmp fail
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
        call rax                        # memlens_attach_entry (closes the memfd)
        test eax, eax
        jnz entry_failed
        mov dword ptr [rbx + 0x38], 1
        mov dword ptr [rbx + 0x78], 0
wait_ack:                               # memlens acknowledges (go = 3; 2 = gave up) before the page
        cmp dword ptr [rbx + 0x5c], 1   # goes away, so it never reads an address the program has
        ja unmap                        # reused
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
        jz fail
        lea rdi, [rbx + 0x200]
        mov ecx, 511
copy:
        mov dl, [rax]
        mov [rdi], dl
        test dl, dl
        jz fail
        inc rax
        inc rdi
        dec ecx
        jnz copy
        mov byte ptr [rdi], 0
        jmp fail
entry_failed:
        mov dword ptr [rbx + 0x3c], 4
fail:
        mov edi, [rbx + 0x58]           # close(memfd), if there is one
        test edi, edi
        js published
        mov eax, 3
        syscall
published:
        mov eax, [rbx + 0x3c]
        mov [rbx + 0x38], eax
        mov dword ptr [rbx + 0x78], 0
        jmp wait_ack
