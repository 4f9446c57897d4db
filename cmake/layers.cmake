# The layers of libtaskgrad as object libraries, and the link-time check
# that each layer calls only the layers below it.
#
# Design note
# -----------
# - One OBJECT library per layer, lowest first (TG_LAYERS): tg_base (src/),
#   tg_kernels (kernels/cpu, and kernels/cuda in a CUDA build), tg_codelets
#   (codelets/), tg_parallel (parallel/), tg_graphs (graphs/), tg_plugins
#   (plugins/).  The installed libtaskgrad.so is made of all their objects
#   (TG_LAYER_OBJECTS); nothing else is installed.
# - The check: for each layer L, a SHARED library tg_layer_check_<L> built
#   (in ALL) from the objects of L and of every layer below it, linked with
#   -Wl,--no-undefined against the external libraries only.  A call from L
#   to a layer above it is then an undefined symbol, and the build stops
#   with the linker's "undefined reference to `tg_...'" naming the object
#   that calls it.  The kernels get one more check, their objects alone
#   against the math and CUDA libraries (tg_layer_check_kernels_pure):
#   kernels call no other layer and no StarPU.  The checks are never
#   installed nor used by any program.
# - tg_deps (INTERFACE, not installed) carries what every layer compiles and
#   links with: the public headers (include/), definitions, external
#   libraries.
# - Includes obey the same rule as links: each layer's include path is its
#   own folder and those of the layers below it (TG_LAYER_INCLUDES_<L>),
#   never a folder above, so a private header of an upper layer is "No such
#   file" below it.  The kernels see only their own folders and include/,
#   not the base's src/ (they are pure, see below).  The codelets see the
#   kernel folders too (kernels/cuda/gemm_lowp_pad.h, plain C, in every
#   build).  TG_LAYER_INCLUDE_DIRS_<L> holds the resulting path for targets
#   outside the library that need a layer's private headers (the tests).
# - Under TG_SANITIZE with clang, shared libraries do not link the
#   sanitizer runtime, so every object has undefined __asan_* symbols: the
#   checks are left out there (a plain build runs them).
# - Last, a configure-time check that the umbrella header taskgrad.h
#   includes every public header.
set(TG_LAYERS base kernels codelets parallel graphs plugins)
set(TG_LAYER_SOURCES_base src/*.c)
set(TG_LAYER_SOURCES_kernels kernels/cpu/*.c)
if(TG_HAVE_CUDA)
  list(APPEND TG_LAYER_SOURCES_kernels kernels/cuda/*.cu kernels/cuda/*.c)
  if(TG_HAVE_CUDNN) # the cuDNN attention, C++ (CMakeLists.txt, TG_CUDNN)
    list(APPEND TG_LAYER_SOURCES_kernels kernels/cuda/*.cpp)
  endif()
endif()
set(TG_LAYER_SOURCES_codelets codelets/*.c)
set(TG_LAYER_SOURCES_parallel parallel/*.c)
set(TG_LAYER_SOURCES_graphs graphs/*.c)
set(TG_LAYER_SOURCES_plugins plugins/*.c)
# each layer's own folders of private headers
set(TG_LAYER_INCLUDES_base src)
set(TG_LAYER_INCLUDES_kernels kernels/cpu kernels/cuda)
set(TG_LAYER_INCLUDES_codelets codelets)
set(TG_LAYER_INCLUDES_parallel parallel)
set(TG_LAYER_INCLUDES_graphs graphs)
set(TG_LAYER_INCLUDES_plugins plugins)

add_library(tg_deps INTERFACE)
target_include_directories(tg_deps INTERFACE ${CMAKE_SOURCE_DIR}/include
  ${CBLAS_INCLUDE_DIR} ${DNNL_INCLUDE_DIR} ${XSMM_INCLUDE_DIR})
target_link_libraries(tg_deps INTERFACE PkgConfig::STARPU ${TG_GEMM_LIBS} ${OPENBLAS_LIB}
  ZLIB::ZLIB
  Threads::Threads PkgConfig::JANSSON m)
if(TG_STARPU_HAS_OPENCL)
  target_link_libraries(tg_deps INTERFACE ${TG_OPENCL_LIB})
endif()
if(TG_HAVE_MPI)
  target_compile_definitions(tg_deps INTERFACE TG_HAVE_MPI=1)
  target_link_libraries(tg_deps INTERFACE PkgConfig::STARPUMPI MPI::MPI_C)
endif()
# what libtaskgrad's users compile and link with too (CMakeLists.txt puts
# them on the taskgrad target's public interface)
set(TG_PUBLIC_DEFINITIONS "")
set(TG_PUBLIC_LIBS PkgConfig::STARPU)
if(TG_SIMGRID)
  list(APPEND TG_PUBLIC_DEFINITIONS TG_SIMGRID=1)
endif()
if(TG_HAVE_CUDA)
  list(APPEND TG_PUBLIC_DEFINITIONS TG_HAVE_CUDA=1)
  list(APPEND TG_PUBLIC_LIBS CUDA::cudart CUDA::cublas CUDA::cublasLt)
endif()
if(TG_HAVE_CUDNN) # attention_cudnn.cpp: the C++ runtime (libcudnn is dlopen'ed)
  target_link_libraries(tg_deps INTERFACE stdc++)
endif()
target_compile_definitions(tg_deps INTERFACE ${TG_PUBLIC_DEFINITIONS})
target_link_libraries(tg_deps INTERFACE ${TG_PUBLIC_LIBS})

set(TG_LAYER_CHECKS ON)
if(TG_SANITIZE AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(TG_LAYER_CHECKS OFF)
  message(STATUS "taskgrad: layer checks off (TG_SANITIZE with clang)")
endif()

set(TG_LAYER_OBJECTS "")
set(_tg_below "") # include folders of the layers below the current one
foreach(layer IN LISTS TG_LAYERS)
  file(GLOB srcs CONFIGURE_DEPENDS ${TG_LAYER_SOURCES_${layer}})
  add_library(tg_${layer} OBJECT ${srcs})
  set_target_properties(tg_${layer} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(tg_${layer} PRIVATE tg_deps)
  set(_own "")
  foreach(dir IN LISTS TG_LAYER_INCLUDES_${layer})
    list(APPEND _own ${CMAKE_SOURCE_DIR}/${dir})
  endforeach()
  if(layer STREQUAL "kernels")
    set(TG_LAYER_INCLUDE_DIRS_${layer} ${_own}) # pure: not the base's src/
  else()
    set(TG_LAYER_INCLUDE_DIRS_${layer} ${_own} ${_tg_below})
  endif()
  target_include_directories(tg_${layer} PRIVATE ${TG_LAYER_INCLUDE_DIRS_${layer}})
  list(APPEND _tg_below ${_own})
  if(layer STREQUAL "kernels" AND TG_HAVE_CUDNN)
    # attention_cudnn.cpp sees the frontend; attention_cudnn_stub.c steps aside
    target_compile_definitions(tg_kernels PRIVATE TG_HAVE_CUDNN=1)
    set_source_files_properties(${CMAKE_SOURCE_DIR}/kernels/cuda/attention_cudnn.cpp
      PROPERTIES COMPILE_OPTIONS "-isystem;${TG_CUDNN_FRONTEND_INCLUDE};-isystem;${TG_CUDNN_INCLUDE}")
  endif()
  list(APPEND TG_LAYER_OBJECTS $<TARGET_OBJECTS:tg_${layer}>)
  if(TG_LAYER_CHECKS)
    # this layer and all below it, nothing above: an upward call fails here
    add_library(tg_layer_check_${layer} SHARED ${TG_LAYER_OBJECTS})
    target_link_libraries(tg_layer_check_${layer} PRIVATE tg_deps)
    target_link_options(tg_layer_check_${layer} PRIVATE -Wl,--no-undefined)
    set_target_properties(tg_layer_check_${layer} PROPERTIES
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/layer-checks)
  endif()
endforeach()

# Kernels are pure functions: beyond the order above (which would let them
# call the base), their objects alone must link against the math libraries
# (and CUDA's) only: no StarPU, no other layer.  The math libraries are the
# GEMM's back ends (TG_GEMM_LIBS: oneDNN, libxsmm, OpenMP's runtime) and
# OpenBLAS.
if(TG_LAYER_CHECKS)
  add_library(tg_layer_check_kernels_pure SHARED $<TARGET_OBJECTS:tg_kernels>)
  target_link_libraries(tg_layer_check_kernels_pure PRIVATE ${TG_GEMM_LIBS} ${OPENBLAS_LIB} m)
  if(TG_HAVE_CUDA)
    target_link_libraries(tg_layer_check_kernels_pure PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt)
  endif()
  if(TG_HAVE_CUDNN) # the frontend: C++ runtime and dlopen, no libcudnn
    target_link_libraries(tg_layer_check_kernels_pure PRIVATE stdc++ ${CMAKE_DL_LIBS})
  endif()
  target_link_options(tg_layer_check_kernels_pure PRIVATE -Wl,--no-undefined)
  set_target_properties(tg_layer_check_kernels_pure PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/layer-checks)
endif()

# The umbrella header names every public header: a header added to
# include/taskgrad but not to taskgrad.h stops the configuration here.
file(GLOB _tg_public_headers RELATIVE ${CMAKE_SOURCE_DIR}/include/taskgrad
     CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/include/taskgrad/*.h)
file(READ ${CMAKE_SOURCE_DIR}/include/taskgrad/taskgrad.h _tg_umbrella)
foreach(_h IN LISTS _tg_public_headers)
  if(NOT _h STREQUAL "taskgrad.h")
    string(FIND "${_tg_umbrella}" "#include \"taskgrad/${_h}\"" _at)
    if(_at EQUAL -1)
      message(FATAL_ERROR "include/taskgrad/${_h} is not included by the umbrella "
              "header include/taskgrad/taskgrad.h: add it there, in its layer's group")
    endif()
  endif()
endforeach()
