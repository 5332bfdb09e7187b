"""Row-major float32 GEMM for njit kernels: C = alpha * op(A) @ op(B) + beta * C with explicit leading
dimensions and offsets, which ``np.dot`` inside njit does not offer (no strided operands, no beta).

It calls the Fortran ``sgemm`` of the OpenBLAS that scipy ships (``scipy.linalg.cython_blas``, the
same library numba's own ``np.dot`` uses). The kernels call it from inside parallel blocks, so that
library is pinned to one thread when this module is imported (see ``_config.single_thread_kernel_blas``).
The function is bound by symbol name (``llvmlite.binding.add_symbol``), not by address, so kernels
that call it can still be cached on disk: the name is resolved again in every process.
"""
import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import get_cython_function_address, intrinsic, register_jitable

from ...runtime.config import single_thread_kernel_blas

_SYMBOL = "numbacnn_f77_sgemm"
llvm.add_symbol(_SYMBOL, get_cython_function_address("scipy.linalg.cython_blas", "sgemm"))
single_thread_kernel_blas()

_N = 78  # ord("N")
_T = 84  # ord("T")


@intrinsic
def _f77_sgemm(typingctx, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """Call Fortran sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc): every argument
    by reference. Scalars go into stack slots; a, b, c are addresses (integers)."""
    sig = types.void(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        i8, i32, f32 = ir.IntType(8), ir.IntType(32), ir.FloatType()

        def by_ref(value, from_type, to_llvm):
            if isinstance(to_llvm, ir.FloatType):
                value = context.cast(builder, value, from_type, types.float32)
            else:
                value = builder.trunc(value, to_llvm) if value.type.width > to_llvm.width \
                    else builder.sext(value, to_llvm) if value.type.width < to_llvm.width else value
            slot = cgutils.alloca_once(builder, to_llvm)
            builder.store(value, slot)
            return builder.bitcast(slot, i8p)

        tys = signature.args
        ta, tb, mm, nn, kk, al, pa, la, pb, lb, be, pc, lc = args
        call_args = [
            by_ref(ta, tys[0], i8), by_ref(tb, tys[1], i8),
            by_ref(mm, tys[2], i32), by_ref(nn, tys[3], i32), by_ref(kk, tys[4], i32),
            by_ref(al, tys[5], f32), builder.inttoptr(pa, i8p), by_ref(la, tys[7], i32),
            builder.inttoptr(pb, i8p), by_ref(lb, tys[9], i32), by_ref(be, tys[10], f32),
            builder.inttoptr(pc, i8p), by_ref(lc, tys[12], i32),
        ]
        fnty = ir.FunctionType(ir.VoidType(), [i8p] * 13)
        fn = cgutils.get_or_insert_function(builder.module, fnty, _SYMBOL)
        builder.call(fn, call_args)
        return context.get_dummy_value()

    return sig, codegen


@register_jitable
def _fits(arr, off, rows, cols, ld):
    return off >= 0 and cols <= ld and (rows == 0 or cols == 0
                                        or off + (rows - 1) * ld + cols <= arr.shape[0])


@register_jitable
def _views_fit(trans_a, trans_b, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    return (_fits(a, a_off, k if trans_a else m, m if trans_a else k, lda)
            and _fits(b, b_off, n if trans_b else k, k if trans_b else n, ldb)
            and _fits(c, c_off, m, n, ldc))


@register_jitable
def sgemm(trans_a, trans_b, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """Row-major C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C[m, n] (float32).

    a, b, c: flat contiguous float32 arrays; X_off: element offset of the first element of each
    matrix; ldX: row pitch in elements. op(A) = A.T when trans_a (then A is stored k x m).
    beta = 0 overwrites C (NaN in C is ignored); beta = 1 accumulates into it.
    Out-of-bounds views raise IndexError instead of writing past the arrays.
    """
    if m == 0 or n == 0:
        return
    if not _views_fit(trans_a, trans_b, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
        raise IndexError("sgemm: a matrix view lies outside its array")
    # Fortran is column-major: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
    # i.e. the same call with the operands swapped.
    _f77_sgemm(_T if trans_b else _N, _T if trans_a else _N, n, m, k, alpha,
               b.ctypes.data + 4 * b_off, ldb, a.ctypes.data + 4 * a_off, lda, beta,
               c.ctypes.data + 4 * c_off, ldc)


if getattr(numba.config, "DISABLE_JIT", 0):  # NUMBA_DISABLE_JIT=1: kernels run as Python
    def _view(arr, off, rows, cols, ld):
        return np.lib.stride_tricks.as_strided(arr[off:], (rows, cols), (4 * ld, 4))

    def sgemm(trans_a, trans_b, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
        """The same contract, in NumPy (for debugging and coverage runs)."""
        if m == 0 or n == 0:
            return
        if not _views_fit(trans_a, trans_b, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
            raise IndexError("sgemm: a matrix view lies outside its array")
        av = _view(a, a_off, k, m, lda).T if trans_a else _view(a, a_off, m, k, lda)
        bv = _view(b, b_off, n, k, ldb).T if trans_b else _view(b, b_off, k, n, ldb)
        cv = _view(c, c_off, m, n, ldc)
        prod = alpha * (av.astype(np.float64) @ bv.astype(np.float64))
        cv[...] = prod if beta == 0 else prod + beta * cv
