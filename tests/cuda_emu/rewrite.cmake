# cuda_emu: rewrites one CUDA source for the host C++ compiler (run by
# tests/cuda_emu/CMakeLists.txt as `cmake -DIN=... -DOUT=... -P`).
#
# Only the two CUDA constructs that are not C++ syntax are touched, on the
# lines where they are, so line numbers stay those of the original (a #line
# directive names the original file for diagnostics and __FILE__):
#   kernel<<<grid, block, smem, stream>>>(args)
#     -> tg_emu::launch(kernel, "kernel", __FILE__, __LINE__, grid, block,
#                       smem, stream)(args)
#   extern __shared__ T name[];  ->  T *name = (T *)tg_emu::dynamic_smem();
# Everything else (__global__, __shared__, __syncthreads, shuffles, ...) is
# handled by the stand-in headers in include/.
file(READ "${IN}" src)
string(REGEX REPLACE
  "([A-Za-z_][A-Za-z0-9_]*(<[A-Za-z0-9_, ]*>)?)<<<"
  "tg_emu::launch(\\1, \"\\1\", __FILE__, __LINE__, " src "${src}")
string(REPLACE ">>>(" ")(" src "${src}")
string(REGEX REPLACE
  "extern[ \t]+__shared__[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\\[[ \t]*\\][ \t]*;"
  "\\1 *\\2 = (\\1 *)tg_emu::dynamic_smem();" src "${src}")
if(src MATCHES "<<<|>>>|extern[ \t]+__shared__")
  message(FATAL_ERROR "cuda_emu: ${IN}: a launch or extern __shared__ that "
                      "rewrite.cmake does not understand is left")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${src}")
file(RENAME "${OUT}.tmp" "${OUT}")
