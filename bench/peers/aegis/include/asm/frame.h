/* FRAME_BEGIN and FRAME_END push and pop a frame pointer only in kernels
 * built with CONFIG_FRAME_POINTER; Debian's amd64 kernels use the ORC
 * unwinder without it, where both are empty, as here. */
#define FRAME_BEGIN
#define FRAME_END
