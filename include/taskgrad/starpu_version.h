/*
 * Which StarPU series taskgrad is compiled against: 1.3 (Debian bookworm)
 * or 1.4 (trixie, sid, scripts/build-starpu --version 1.4.10); CMakeLists.txt
 * picks the pkg-config module.  Code that differs between the two tests
 * TG_STARPU_AT_LEAST(1, 4) and says why next to the test.
 */
#ifndef TASKGRAD_STARPU_VERSION_H
#define TASKGRAD_STARPU_VERSION_H

#include <starpu_config.h> /* STARPU_MAJOR_VERSION, STARPU_MINOR_VERSION */

/* 1 when the StarPU compiled against is at least major.minor */
#define TG_STARPU_AT_LEAST(major, minor)                                       \
  (STARPU_MAJOR_VERSION > (major) ||                                           \
   (STARPU_MAJOR_VERSION == (major) && STARPU_MINOR_VERSION >= (minor)))

#endif
