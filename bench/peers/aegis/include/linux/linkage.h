/* The linkage macros the kernel's aegis128-aesni-asm.S uses, for assembling
 * it in userspace (no CFI, no retpoline thunks, no alignment padding beyond
 * what the file asks for). The two internal helpers (__load_partial,
 * __store_partial) stay local to the object, as in the kernel. */
#define SYM_FUNC_START(name) .globl name; .type name, @function; .p2align 4; name:
#define SYM_FUNC_START_LOCAL(name) .type name, @function; .p2align 4; name:
#define SYM_FUNC_END(name) .size name, . - name
#define RET ret
