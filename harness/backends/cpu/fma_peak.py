"""The CPU's fused multiply-add peak (issue 42), measured by a numba kernel with no memory
traffic: CHAINS independent multiply-add chains held in vector registers (numba_stack.py), each
step one FMA per element. Imported only through harness/cpu_peaks.py, where numba is.

CHAINS is more chains than an FMA's latency times its issue width needs on current x86 and ARM
cores (8 vectors of fp32 at AVX-512, 16 at AVX2): on the 2-core AMD EPYC VM 128 and 256 chains
gave the same 116 GF/s a core, and OpenBLAS's SGEMM reached 103 GF/s (89% of it) on one thread.
"""
from __future__ import annotations

import numba

from harness.backends.cpu.numba_stack import stack_array

CHAINS = 128
_chains = stack_array(CHAINS)


@numba.njit(cache=True, fastmath={"contract"}, nogil=True)
def fma_loop(like, steps, scale, add):
    """2 x CHAINS x `steps` flops in `like`'s dtype; returns their sum (so none is dead code)."""
    acc = numba.carray(_chains(like), (CHAINS,))
    for j in range(CHAINS):
        acc[j] = like[0] + j
    for _ in range(steps):
        for j in range(CHAINS):
            acc[j] = acc[j] * scale + add
    total = acc[0] * 0
    for j in range(CHAINS):
        total += acc[j]
    return total
