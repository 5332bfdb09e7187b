"""A recorded sequence of kernel calls run in one OpenMP parallel region ("team"): each parallel
kernel's blocks split statically over the team's threads, a barrier between calls, serial kernels on
thread 0. Inference programs run this way instead of opening a numba parallel region per kernel
(about 2-2.5 us each on 2 cores: most of the difference to ONNX Runtime at batch 1).

``run(calls, threads)``: calls is a tuple of items, in order:
    (address, n, args), n >= 0: a parallel kernel's block function ``block(i, *args)`` for i < n,
        split as numba splits a prange: blocks [n * t / T, n * (t + 1) / T) on thread t of T;
    (address, n, args), n < 0: a serial kernel ``kernel(*args)`` on thread (-1 - n) % T alone;
    (): a barrier (every call before it has finished on every thread before any call after it
        starts): the caller puts one wherever a call depends on an earlier one on another thread.
``address`` is the compiled function's entry point in numba's calling convention (found at run
time by numbacnn/backend/team.py), so this one kernel serves every network: it is compiled once per
tuple type (the call sequence's argument types), not per network, and cached like the others.
Arrays reach the blocks without reference counting (as numba's own parallel loops pass them): the
caller keeps them alive. Errors raised inside a block are not propagated (as in prange bodies).

OpenMP is called directly (GOMP_parallel, GOMP_barrier, omp_get_thread_num/num_threads of the
libgomp that numba's "omp" threading layer loaded), bound by symbol name like blas.py's sgemm:
``bind()`` returns False where it cannot be (another threading layer, no libgomp); until it binds
them (and where it cannot), the symbols name serial stand-ins (one thread, no barriers), so that
``run`` compiles anywhere (the prebuilt build compiles it without running it) and, called
anyway, runs its calls in order on the calling thread.
"""
import ctypes
import os

import llvmlite.binding as llvm
import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..._config import kernel

_SYMBOLS = ("GOMP_parallel", "GOMP_barrier", "omp_get_thread_num", "omp_get_num_threads")
_PREFIX = "numbacnn_"
_bound: bool | None = None


def _serial_parallel(fn, data, threads, flags):
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(fn)(data)


_STAND_INS = (  # kept referenced: the symbols point into these callbacks
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)(_serial_parallel),
    ctypes.CFUNCTYPE(None)(lambda: None),
    ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0),
    ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 1),
)
for _name, _stand_in in zip(_SYMBOLS, _STAND_INS):
    llvm.add_symbol(_PREFIX + _name, ctypes.cast(_stand_in, ctypes.c_void_p).value)


def _openmp_library() -> str | None:
    """The path of the OpenMP runtime loaded in this process (Linux), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith(("libgomp", "libiomp5", "libomp")):
                    return path
    except OSError:
        pass
    return None


def bind() -> bool:
    """Bind the OpenMP entry points that ``run`` calls; whether ``run`` can be used (once decided)."""
    global _bound
    if _bound is None:
        _bound = False
        if not getattr(numba.config, "DISABLE_JIT", 0):
            numba.get_num_threads()  # starts numba's threading layer (loads its OpenMP runtime)
            path = _openmp_library() if numba.threading_layer() == "omp" else None
            try:
                lib = ctypes.CDLL(path) if path else None
            except OSError:
                lib = None
            if lib is not None and all(hasattr(lib, name) for name in _SYMBOLS):
                for name in _SYMBOLS:
                    llvm.add_symbol(_PREFIX + name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
                _bound = True
    return _bound


def _borrowed(context, builder, argtys, args):
    """The arguments with every array's meminfo set to null: the callee then does no reference
    counting on them or on its views of them (atomic increments on shared counters, 15 % of a
    Winograd layer's time at batch 1)."""
    out = list(args)
    for j, ty in enumerate(argtys):
        if isinstance(ty, types.Array):
            ary = context.make_array(ty)(context, builder, out[j])
            ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
            out[j] = ary._getvalue()
    return out


def _call_address(context, builder, address, argtys, args):
    """Call the numba-compiled function at ``address`` (int64) returning None with ``args``."""
    conv = context.call_conv
    fnty = conv.get_function_type(types.none, argtys)
    fn = builder.inttoptr(address, fnty.as_pointer())
    retty = conv.get_return_type(types.none).pointee
    ret = cgutils.alloca_once(builder, retty)
    builder.store(cgutils.get_null_value(retty), ret)
    excinfo = cgutils.alloca_once(builder, fnty.args[1].pointee)
    packed = conv._get_arg_packer(argtys).as_arguments(builder, _borrowed(context, builder, argtys, args))
    builder.call(fn, [ret, excinfo, *packed])


@intrinsic
def _team_region(typingctx, calls, threads):
    """One GOMP_parallel region of ``threads`` threads running ``calls`` (see the module)."""
    for item in calls.types:
        if not (isinstance(item, types.BaseTuple) and (len(item) == 0 or len(item) == 3
                and isinstance(item.types[2], types.BaseTuple))):
            raise numba.core.errors.TypingError(f"expected (address, n, args) or () items, got {item}")
    sig = types.void(calls, threads)

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        i8p = ir.IntType(8).as_pointer()
        module = builder.module

        def omp(name, returns=i32):
            return cgutils.get_or_insert_function(module, ir.FunctionType(returns, []), _PREFIX + name)

        ctype = signature.args[0]
        ltype = context.get_value_type(ctype)
        body = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p]),
                           name=module.get_unique_name("numbacnn_team"))
        body.linkage = "internal"
        b = ir.IRBuilder(body.append_basic_block("entry"))
        items = b.load(b.bitcast(body.args[0], ltype.as_pointer()))
        tid = b.sext(b.call(omp("omp_get_thread_num"), []), i64)
        team = b.sext(b.call(omp("omp_get_num_threads"), []), i64)
        zero, one = ir.Constant(i64, 0), ir.Constant(i64, 1)
        for k, ity in enumerate(ctype.types):
            if len(ity) == 0:
                b.call(omp("GOMP_barrier", ir.VoidType()), [])
                continue
            item = b.extract_value(items, k)
            address, n = b.extract_value(item, 0), b.extract_value(item, 1)
            atys = tuple(ity.types[2].types)
            packed = b.extract_value(item, 2)
            values = [b.extract_value(packed, j) for j in range(len(atys))]
            with b.if_else(b.icmp_signed(">=", n, zero)) as (blocks, serial):
                with blocks:
                    lo = b.sdiv(b.mul(n, tid), team)
                    hi = b.sdiv(b.mul(n, b.add(tid, one)), team)
                    with cgutils.for_range_slice(b, lo, hi, one) as (i, _):
                        _call_address(context, b, address, (types.int64, *atys), [i, *values])
                with serial:
                    thread = b.srem(b.sub(ir.Constant(i64, -1), n), team)
                    with b.if_then(b.icmp_signed("==", tid, thread)):
                        _call_address(context, b, address, atys, values)
        b.ret_void()
        data = cgutils.alloca_once(builder, ltype)
        builder.store(args[0], data)
        team_size = builder.trunc(context.cast(builder, args[1], signature.args[1], types.int64), i32)
        parallel = cgutils.get_or_insert_function(
            module, ir.FunctionType(ir.VoidType(), [body.type, i8p, i32, i32]), _PREFIX + "GOMP_parallel")
        builder.call(parallel, [body, builder.bitcast(data, i8p), team_size, ir.Constant(i32, 0)])
        return context.get_dummy_value()

    return sig, codegen


@kernel(parallel=False)
def run(calls, threads):
    """Run the recorded kernel calls ``calls`` (see the module) in one parallel region of
    ``threads`` threads (numba's thread count: numba.get_num_threads() compiled in would keep this
    kernel out of the caches)."""
    _team_region(calls, threads)
