/* The three linkage macros the kernel's aes-gcm-avx10-x86_64.S uses, for
 * assembling it in userspace (no CFI, no retpoline thunks, no alignment
 * padding beyond what the file asks for). */
#define SYM_FUNC_START(name) .globl name; .type name, @function; .p2align 4; name:
#define SYM_FUNC_END(name) .size name, . - name
#define RET ret
