/* Phase markers for fsprof's C workload engines: prctl(FSPROF_PHASE_MAGIC, index) is seen by
 * fsprof's sys_enter probe and changes the current phase; the kernel answers EINVAL and nothing
 * else happens. Same constant as workloads/common.py and bpf/fsprof.h. */
#ifndef FSPROF_PHASE_H
#define FSPROF_PHASE_H
#include <sys/prctl.h>

#define FSPROF_PHASE_MAGIC 0x66737072UL /* "fspr" */

static inline void fsprof_phase(unsigned long index)
{
	prctl(FSPROF_PHASE_MAGIC, index, 0UL, 0UL, 0UL);
}
#endif
