"""Fixed-size arrays on the stack for numba kernels (issue 42). numba has no stack arrays: an
np.empty inside a kernel is a heap allocation that LLVM must keep in memory, so an accumulator
tile in one is loaded and stored at every step. An LLVM alloca of constant size, which LLVM can
promote to registers, is made here by an intrinsic. Imported only where numba is (through
harness/backends/cpu/compiled.py's kernel modules)."""
from __future__ import annotations

from typing import Any

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def stack_array(size: int) -> Any:
    """An intrinsic `f(like)` giving a pointer to `size` elements of `like`'s dtype on the
    stack; view it with numba.carray(f(like), (size,)). Its elements start undefined."""
    @intrinsic
    def on_stack(typingctx, like):
        dtype = like.dtype

        def codegen(context, builder, signature, args):
            return cgutils.alloca_once(builder, context.get_value_type(dtype), size=size)
        return types.CPointer(dtype)(like), codegen
    return on_stack
