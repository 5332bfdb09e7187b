"""``parallel_blocks(n, block, args)``: the kernels' parallel loop, ``block(i, *args)`` for every i
in range(n), split over numba's threads as a ``prange`` is (blocks [n * t / T, n * (t + 1) / T) on
part t of T, T = numba.get_num_threads()) and run by numba's own threading layer
(``numba_parallel_for``, what a prange calls), from a kernel compiled without ``parallel=True``.
One block runs in the calling thread. The blocks get the arrays lent (no reference counts), as a
prange body does.

Why not ``prange``: numba compiles a parallel loop as four libraries (the loop body, its gufunc
wrapper, the function, its Python wrapper), and each links, optimises and emits the machine code of
every function the body calls again: a dense layer's forward compiled in 5.5 s as a prange over
its tile function and in 1.5 s as a plain loop (docs/performance.md, "Cold start"). Here the block
is compiled once, as its own function, and called by a symbol bound to its code; a hook that numba
runs before a cached kernel loads binds it again (numba before 0.60 has no such hooks: there the
block is linked in, as numba links its calls).

A block that raises (numba's status code) stops no other block; after the loop the first failed
block found is run again in the calling thread, which raises its exception there (a RuntimeError
naming the block if it does not fail twice).
"""
import functools
import hashlib
import importlib

import llvmlite.binding as llvm
import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _reload() -> None:
    """Start numba's threading layer before a cached kernel that calls it is loaded (its symbols
    are bound then), as numba does for a cached prange."""
    from numba.np.ufunc.parallel import _launch_threads

    _launch_threads()


_bound: dict[str, int] = {}


def _symbol(dispatcher, argtys) -> str:
    """The symbol under which the block ``dispatcher`` compiled for ``argtys`` is called: bound in
    this process to its compiled code (compiled or loaded now if it is not yet)."""
    func = dispatcher.py_func
    key = hashlib.sha256(str(argtys).encode()).hexdigest()[:16]
    name = f"numbacnn.block.{func.__module__}.{func.__qualname__}.{key}"
    if name not in _bound:
        if argtys not in dispatcher.overloads:
            dispatcher.compile(argtys)
        cres = dispatcher.overloads[argtys]
        address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
        llvm.add_symbol(name, address)
        _bound[name] = address
    return name


def _rebind(module: str, qualname: str, argtys) -> None:
    """Bind a block's symbol before a cached kernel that calls it is loaded."""
    _reload()
    _symbol(getattr(importlib.import_module(module), qualname), argtys)


def borrowed(context, builder, argtys, args):
    """The arguments with every array's meminfo set to null: the callee then does no reference
    counting on them or on its views of them (atomic increments of one counter from every thread:
    15 % of a Winograd layer's time at batch 1). The caller keeps the arrays alive."""
    out = list(args)
    for j, ty in enumerate(argtys):
        if isinstance(ty, types.Array):
            ary = context.make_array(ty)(context, builder, out[j])
            ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
            out[j] = ary._getvalue()
    return out


def _python_blocks(n, block, args):
    """The loop in plain Python (NUMBA_DISABLE_JIT=1)."""
    for i in range(n):
        block(i, *args)


@intrinsic
def _parallel_blocks(typingctx, n, block, args):
    if not (isinstance(n, types.Integer) and isinstance(block, types.Dispatcher)
            and isinstance(args, types.BaseTuple)):
        raise numba.core.errors.TypingError("parallel_blocks(n, block, args): an integer, a kernel, a tuple")
    callsig = typingctx.resolve_function_type(block, (types.int64, *args.types), {})
    if callsig is None:
        raise numba.core.errors.TypingError(f"{block.dispatcher.py_func.__name__} does not take {args}")
    sig = types.none(n, block, args)

    def codegen(context, builder, signature, llargs):
        _reload()
        disp = block.dispatcher
        cres = disp.overloads[callsig.args]
        i64 = ir.IntType(64)
        i8p = ir.IntType(8).as_pointer()
        module = builder.module
        count = context.cast(builder, llargs[0], signature.args[0], types.int64)
        threads = builder.call(cgutils.get_or_insert_function(module, ir.FunctionType(i64, []),
                                                              "get_num_threads"), [])
        failed = cgutils.alloca_once_value(builder, ir.Constant(i64, 0))
        shared = ir.LiteralStructType([context.get_value_type(args), i64, i64, i64.as_pointer()])
        data = cgutils.alloca_once(builder, shared)
        # the blocks get the arrays borrowed, as numba's prange bodies do
        lent = borrowed(context, builder, args.types, cgutils.unpack_tuple(builder, llargs[2], len(args)))
        builder.store(cgutils.pack_struct(builder, [context.make_tuple(builder, args, lent), count, threads,
                                                    failed]), data)

        # the loop over one part's blocks, called by numba_parallel_for as a gufunc kernel
        # (args, dimensions, steps, data) with args[0] = part * steps[0] = the part's number
        body = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p.as_pointer(), i64.as_pointer(),
                                                                   i64.as_pointer(), i8p]),
                           name=module.get_unique_name("numbacnn_blocks"))
        body.linkage = "internal"
        b = ir.IRBuilder(body.append_basic_block("entry"))
        part = b.ptrtoint(b.load(body.args[0]), i64)
        ctx = b.load(b.bitcast(body.args[3], shared.as_pointer()))
        tup, total, parts, failure = (b.extract_value(ctx, j) for j in range(4))
        lo = b.sdiv(b.mul(total, part), parts)
        hi = b.sdiv(b.mul(total, b.add(part, ir.Constant(i64, 1))), parts)
        values = [b.extract_value(tup, j) for j in range(len(args))]
        library = context.active_code_library
        if hasattr(library, "_reload_init"):
            # the block is called by its symbol, not linked in: its code is not optimised and emitted
            # again in every library above it; numba runs the library's hooks before a cached kernel
            # loads, and the hook binds the symbol
            fnty = context.call_conv.get_function_type(cres.signature.return_type, cres.signature.args)
            callee = cgutils.get_or_insert_function(module, fnty, _symbol(disp, callsig.args))
            library._reload_init.add(
                functools.partial(_rebind, disp.py_func.__module__, disp.py_func.__qualname__, callsig.args))
        else:  # numba before 0.60 keeps no hooks on a library: linked in, as numba links its calls
            callee = context.declare_function(module, cres.fndesc)
            context.add_linking_libs([cres.library])
        with cgutils.for_range_slice(b, lo, hi, ir.Constant(i64, 1)) as (i, _):
            status, _ = context.call_conv.call_function(b, callee, cres.signature.return_type,
                                                        cres.signature.args, [i, *values])
            with b.if_then(status.is_error, likely=False):
                b.store_atomic(b.add(i, ir.Constant(i64, 1)), failure, "monotonic", 8)
        b.ret_void()

        def call(i):  # block i in the calling thread, raising its exception there
            status, _ = context.call_conv.call_function(builder, callee, cres.signature.return_type,
                                                        cres.signature.args, [i, *lent])
            with cgutils.if_unlikely(builder, status.is_error):
                context.call_conv.return_status_propagate(builder, status)

        one = ir.Constant(i64, 1)
        with builder.if_else(builder.icmp_signed("==", count, one)) as (single, many):
            with single:  # no parallel region for one block
                call(ir.Constant(i64, 0))
            with many:
                run = cgutils.get_or_insert_function(
                    module, ir.FunctionType(ir.VoidType(), [i8p] * 5 + [i64] * 3), "numba_parallel_for")
                argv = cgutils.alloca_once_value(builder, ir.Constant(i8p, None))
                dims = cgutils.alloca_once(builder, i64, size=2)
                builder.store(threads, dims)
                builder.store(one, builder.gep(dims, [one]))
                steps = cgutils.alloca_once_value(builder, one)
                builder.call(run, [builder.bitcast(v, i8p) for v in (body, argv, dims, steps, data)]
                             + [one, one, threads])
                first = builder.load(failed)
                with builder.if_then(builder.icmp_signed("!=", first, ir.Constant(i64, 0)), likely=False):
                    call(builder.sub(first, one))
                    message = f"a block of {block.dispatcher.py_func.__name__} failed in a thread"
                    context.call_conv.return_user_exc(builder, RuntimeError, (message,))
        return context.get_dummy_value()

    return sig, codegen


parallel_blocks = _python_blocks if getattr(numba.config, "DISABLE_JIT", 0) else _parallel_blocks
