"""A recorded sequence of kernel calls run in one OpenMP parallel region ("team"): each parallel
kernel's blocks split statically over the team's threads, a barrier wherever a call needs an
earlier one's results, serial kernels on one thread. Inference programs run this way instead of
opening a numba parallel region per kernel and crossing from Python into each kernel.

A call is packed once, when a program is made (``pack``): its arguments, as numba passes them, into
a byte buffer (arrays without reference counting: the caller keeps them alive), with the address
of a "thunk" that unpacks them and calls the kernel's compiled entry point. ``run(schedule,
threads, x, patches)`` then takes one int64 array, four entries per row:
    (thunk, entry, n, buffer), n >= 0: a parallel kernel's block function ``block(i, *args)`` for
        i < n, split as parallel.parallel_blocks splits them: [n * t / T, n * (t + 1) / T) on thread t;
    (thunk, entry, n, buffer), n < 0: a serial kernel ``kernel(*args)`` on thread (-1 - n) % T;
    (0, 0, 0, 0): a barrier (every call before it has finished on every thread before any call
        after it starts).
``run`` is one compiled function for every network (per input type); ``pack`` is compiled once per
argument types (a kernel's specialisation), and both are cached like the kernels (and compiled ahead
into the kernel tier: ``prebuilt.source_stamp`` covers this file). The calls that read the program's
input are pointed at the caller's array by ``run`` itself. A call whose kernel raises (numba's status
code, which a thunk returns) stops nothing else in the region, but ``run`` returns the first failed
row plus one (0: every call succeeded), and the caller raises (runtime/team.py: ``Failed``).

This is a runtime, not arithmetic: it lives in the backend, beside the scheduler that fills its rows.

OpenMP is called directly (GOMP_parallel, GOMP_barrier, omp_get_thread_num/num_threads of the
runtime that numba's "omp" threading layer links to, found through that layer's own library: a
process may hold another, such as PyTorch's), bound by symbol name like blas.py's sgemm.
``bind()`` returns False where it cannot bind them (another threading layer, no OpenMP library);
until it has (and where it cannot), the symbols name serial stand-ins (one thread, no barriers),
so that ``run`` compiles anywhere (the prebuilt build compiles it without running it) and, called
anyway, runs its calls in order on the calling thread.
"""
import ctypes

import llvmlite.binding as llvm
import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .config import kernel
from .parallel import borrowed

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
    ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 1),
)
# numba's thread count for the calling thread (its "omp" layer's get_num_threads): what ``run``
# asks when given no thread count (numba.get_num_threads() from Python costs 0.5 us, 2 % of a
# batch-1 prediction of mnistcnn)
_THREADS = "numba_threads"
for _name, _stand_in in zip((*_SYMBOLS, _THREADS), _STAND_INS):
    llvm.add_symbol(_PREFIX + _name, ctypes.cast(_stand_in, ctypes.c_void_p).value)


def _omp_layer_symbols() -> list[ctypes.CDLL]:
    """Handles to look the OpenMP entry points up in, in the order the dynamic linker resolves
    them for numba's "omp" threading layer (numba.np.ufunc.omppool): the process's global scope,
    then that layer's own dependencies. A process can hold two runtimes (PyTorch ships its own
    libgomp); blocks ask numba's for their thread number, so the team must be that one (checked
    at run time: runtime/team.py)."""
    handles = [ctypes.CDLL(None)]
    try:
        from numba.np.ufunc import omppool  # type: ignore[attr-defined]
        handles.append(ctypes.CDLL(omppool.__file__))
    except (ImportError, OSError, AttributeError):
        pass
    return handles


def _lookup(name: str) -> int | None:
    for lib in _omp_layer_symbols():
        if hasattr(lib, name):
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    return None


def library_of(address: int) -> str | None:
    """The file mapped at ``address`` in this process (Linux), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                lo, hi = (int(v, 16) for v in fields[0].split("-"))
                if lo <= address < hi and len(fields) > 5:
                    return fields[5]
    except OSError:
        pass
    return None


def bind() -> bool:
    """Bind the OpenMP entry points that ``run`` calls; whether it could (once decided). Call it
    before ``run`` is first compiled or loaded in a process."""
    global _bound
    if _bound is None:
        _bound = False
        if not getattr(numba.config, "DISABLE_JIT", 0):
            numba.get_num_threads()  # starts numba's threading layer (loads its OpenMP runtime)
            if numba.threading_layer() == "omp":
                from numba.np.ufunc import omppool  # type: ignore[attr-defined]

                addresses = [_lookup(name) for name in _SYMBOLS]
                threads = getattr(omppool, "get_num_threads", None)
                if all(addresses) and isinstance(threads, int):
                    for name, address in zip((*_SYMBOLS, _THREADS), (*addresses, threads)):
                        llvm.add_symbol(_PREFIX + name, address)
                    _bound = True
    return _bound


def unbind() -> None:
    """Give up team runs in this process (``bind`` returns False from then on)."""
    global _bound
    _bound = False


def bound_runtime() -> str | None:
    """The file of the OpenMP runtime the team calls (None when unbound)."""
    return library_of(_lookup("GOMP_parallel") or 0) if _bound else None


@kernel()
def thread_id_block(i, ids):
    """Block i of a check: ids[i] = the thread number that numba's kernels see."""
    ids[i] = numba.get_thread_id()


# a thunk: (block index, packed arguments, entry point) -> the kernel's numba status code
_THUNK = ir.FunctionType(ir.IntType(32), [ir.IntType(64), ir.IntType(8).as_pointer(), ir.IntType(64)])


@intrinsic
def _pack(typingctx, args, buffer, blocks):
    """(thunk address, bytes): store ``args`` (a tuple) into ``buffer`` (uint8, when it holds them)
    and make the thunk that calls an entry point with them: with a leading block index when
    ``blocks`` (a literal bool), else without."""
    if not (isinstance(args, types.BaseTuple) and isinstance(buffer, types.Array)
            and isinstance(blocks, types.BooleanLiteral)):
        raise numba.core.errors.TypingError("expected (tuple, uint8 array, literal bool)")
    atys = tuple(args.types)
    with_index = blocks.literal_value
    sig = types.UniTuple(types.int64, 2)(args, buffer, blocks)

    def codegen(context, builder, signature, llargs):
        i64 = ir.IntType(64)
        module = builder.module
        ltype = context.get_value_type(signature.args[0])
        thunk = ir.Function(module, _THUNK, name=module.get_unique_name("numbacnn_thunk"))
        thunk.linkage = "internal"
        t = ir.IRBuilder(thunk.append_basic_block("entry"))
        index, packed, entry = thunk.args
        stored = t.load(t.bitcast(packed, ltype.as_pointer()))
        values = [t.extract_value(stored, j) for j in range(len(atys))]
        if with_index:
            status = _call_entry(context, t, entry, (types.int64, *atys), [index, *values])
        else:
            status = _call_entry(context, t, entry, atys, values)
        t.ret(status)
        size = ir.Constant(i64, context.get_abi_sizeof(ltype))
        buf = context.make_array(signature.args[1])(context, builder, llargs[1])
        nbytes = builder.mul(buf.nitems, buf.itemsize)
        values = borrowed(context, builder, atys, cgutils.unpack_tuple(builder, llargs[0], len(atys)))
        value = context.make_tuple(builder, signature.args[0], values)
        with builder.if_then(builder.icmp_signed(">=", nbytes, size)):
            builder.store(value, builder.bitcast(buf.data, ltype.as_pointer()))
        return context.make_tuple(builder, signature.return_type, [builder.ptrtoint(thunk, i64), size])

    return sig, codegen


def _call_entry(context, builder, entry, argtys, args):
    """Call the numba-compiled function at address ``entry`` (int64) returning None with ``args``;
    its status code (numba's calling convention: 0 or -2 for success, else an exception)."""
    conv = context.call_conv
    fnty = conv.get_function_type(types.none, argtys)
    fn = builder.inttoptr(entry, fnty.as_pointer())
    retty = conv.get_return_type(types.none).pointee
    ret = cgutils.alloca_once(builder, retty)
    builder.store(cgutils.get_null_value(retty), ret)
    excinfo = cgutils.alloca_once(builder, fnty.args[1].pointee)
    packed = conv._get_arg_packer(argtys).as_arguments(builder, args)
    return builder.call(fn, [ret, excinfo, *packed])


@kernel()
def pack_blocks(args, buffer):
    """(thunk, bytes) of a parallel kernel's block call ``block(i, *args)``; stores args in buffer
    when it holds ``bytes``."""
    return _pack(args, buffer, True)


@kernel()
def pack_serial(args, buffer):
    """(thunk, bytes) of a serial kernel's call ``kernel(*args)``; stores args in buffer when it
    holds ``bytes``."""
    return _pack(args, buffer, False)


@intrinsic
def _team_region(typingctx, schedule, threads, failed):
    """One GOMP_parallel region of ``threads`` threads running ``schedule`` (see the module);
    ``threads`` <= 0: numba's thread count of the calling thread. A call whose kernel fails stores
    its row plus one in ``failed[0]`` (an int64 array, zeroed by the caller)."""
    sig = types.void(schedule, threads, failed)

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        i8p = ir.IntType(8).as_pointer()
        module = builder.module

        def omp(name, returns=i32):
            return cgutils.get_or_insert_function(module, ir.FunctionType(returns, []), _PREFIX + name)

        rows = context.make_array(signature.args[0])(context, builder, args[0])
        failed = context.make_array(signature.args[2])(context, builder, args[2])
        shared = ir.LiteralStructType([i64.as_pointer(), i64, i64.as_pointer()])  # rows, count, failed
        data = cgutils.alloca_once(builder, shared)
        count = builder.sdiv(rows.nitems, ir.Constant(i64, 4))
        builder.store(cgutils.pack_struct(builder, [rows.data, count, failed.data]), data)
        body = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p]),
                           name=module.get_unique_name("numbacnn_team"))
        body.linkage = "internal"
        b = ir.IRBuilder(body.append_basic_block("entry"))
        ctx = b.load(b.bitcast(body.args[0], shared.as_pointer()))
        table, count, failure = (b.extract_value(ctx, j) for j in range(3))
        tid = b.sext(b.call(omp("omp_get_thread_num"), []), i64)
        team = b.sext(b.call(omp("omp_get_num_threads"), []), i64)
        zero, one = ir.Constant(i64, 0), ir.Constant(i64, 1)
        with cgutils.for_range(b, count) as loop:
            row = b.gep(table, [b.mul(loop.index, ir.Constant(i64, 4))])
            thunk, entry, n, packed = (b.load(b.gep(row, [ir.Constant(i64, j)])) for j in range(4))
            call = b.inttoptr(thunk, _THUNK.as_pointer())
            packed = b.inttoptr(packed, i8p)
            with b.if_else(b.icmp_signed("==", thunk, zero)) as (barrier, work):
                with barrier:
                    b.call(omp("GOMP_barrier", ir.VoidType()), [])
                with work:
                    with b.if_else(b.icmp_signed(">=", n, zero)) as (blocks, serial):
                        with blocks:
                            lo = b.sdiv(b.mul(n, tid), team)
                            hi = b.sdiv(b.mul(n, b.add(tid, one)), team)
                            with cgutils.for_range_slice(b, lo, hi, one) as (i, _):
                                _note_failure(b, b.call(call, [i, packed, entry]), failure, loop.index)
                        with serial:
                            thread = b.srem(b.sub(ir.Constant(i64, -1), n), team)
                            with b.if_then(b.icmp_signed("==", tid, thread)):
                                _note_failure(b, b.call(call, [zero, packed, entry]), failure, loop.index)
        b.ret_void()
        team_size = builder.trunc(context.cast(builder, args[1], signature.args[1], types.int64), i32)
        numba_threads = builder.call(omp(_THREADS), [])
        team_size = builder.select(builder.icmp_signed("<=", team_size, ir.Constant(i32, 0)),
                                   numba_threads, team_size)
        parallel = cgutils.get_or_insert_function(
            module, ir.FunctionType(ir.VoidType(), [body.type, i8p, i32, i32]), _PREFIX + "GOMP_parallel")
        builder.call(parallel, [body, builder.bitcast(data, i8p), team_size, ir.Constant(i32, 0)])
        return context.get_dummy_value()

    return sig, codegen


def _note_failure(builder, status, failure, row):
    """Where a thunk's numba ``status`` is an error (neither 0, success, nor -2, success returning
    None), store ``row`` plus one at ``failure`` (an atomic store: any failed row will do)."""
    ok = builder.or_(builder.icmp_signed("==", status, ir.Constant(status.type, 0)),
                     builder.icmp_signed("==", status, ir.Constant(status.type, -2)))
    with builder.if_then(builder.not_(ok), likely=False):
        builder.store_atomic(builder.add(row, ir.Constant(row.type, 1)), failure, "monotonic", 8)


@intrinsic
def _poke(typingctx, address, value):
    """Store the int64 ``value`` at ``address``."""
    sig = types.void(address, value)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        address = context.cast(builder, args[0], signature.args[0], types.int64)
        where = builder.inttoptr(address, i64.as_pointer())
        builder.store(context.cast(builder, args[1], signature.args[1], types.int64), where)
        return context.get_dummy_value()

    return sig, codegen


@kernel()
def run(schedule, threads, x, patches, failed):
    """Run the packed calls of ``schedule`` (int64, rows of 4: see the module) in one parallel
    region of ``threads`` threads (<= 0: numba's thread count, asked through the bound layer's
    entry point: numba.get_num_threads() compiled in would keep this kernel out of the caches),
    after pointing the packed arguments that read the program's input at ``x``: patches (int64,
    (k, 2)) holds where each such data pointer lies and its offset from the input's first byte (a
    view's). Returns 0, or a failed call's row plus one (its kernel raised; failed: int64 (1,),
    scratch)."""
    base = x.ctypes.data
    for k in range(patches.shape[0]):
        _poke(patches[k, 0], base + patches[k, 1])
    failed[0] = 0
    _team_region(schedule, threads, failed)
    return failed[0]
