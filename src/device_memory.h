/*
 * Device memory guard (src/device_memory.c): a task graph whose buffers or
 * STARPU_REDUX contributions cannot fit in the smallest device memory node
 * is refused at submission, before StarPU 1.3 could spin on it forever.
 */
#ifndef TASKGRAD_DEVICE_MEMORY_H
#define TASKGRAD_DEVICE_MEMORY_H

#include <starpu.h>

/* 0, or -ENOSPC with a message starting with op when the task of nbuf
 * buffers (handles h, modes) would not fit on a device node. */
int tg_device_memory_check(const char *op, int nbuf, const starpu_data_handle_t *h,
                           const enum starpu_data_access_mode *modes);

/* Whether a task of `bytes` would pass tg_device_memory_check now, without
 * recording it (task fusion asks before it makes one task of several). */
int tg_device_memory_room(long long bytes);

/* Forgets h (called before it is unregistered): the REDUX set holds live
 * handles only, so a program that creates and frees reduction targets
 * is not refused for contributions that no longer exist. */
void tg_device_memory_forget(starpu_data_handle_t h);

#endif
