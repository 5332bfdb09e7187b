"""The multiplications' precision: "float32" (the default) or "bf16", as ``torch.autocast`` does it
on a CPU: float32 master weights, gradients, optimizer state, BatchNorm statistics, loss and
softmax; bfloat16 operands (rounded to nearest, ties to even) with float32 sums in the layers
whose plans have bf16 kernels (kernels/cpu/bf16.py): today the 3x3 convolutions that run Winograd's
F(4x4, 3x3), whose 36 GEMMs take the transformed tiles and filters in bf16 (channels in multiples
of 16). Every other layer multiplies in float32. Where the CPU has AMX (and Linux grants the
process its tile state) the GEMMs whose channels are multiples of 16 run on its tiles (tdpbf16ps),
the rest on AVX512_BF16 (vdpbf16ps); where the kernels run without AVX512_BF16 the same products run
as float32 FMAs on the rounded operands (the same sums, slower than float32)."""
from __future__ import annotations

PRECISIONS = ("float32", "bf16")


def check_precision(precision: object) -> str:
    """``precision`` if it is one of PRECISIONS, else a ValueError naming them."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def check_precision_device(precision: object, device: str) -> str:
    """check_precision, and bf16 only on the CPU (the CUDA kernels have no bf16 products)."""
    check_precision(precision)
    if precision == "bf16" and device != "cpu":
        raise ValueError(f"precision bf16 runs on the CPU only, not on device {device!r}")
    return str(precision)


def bf16_unit() -> bool:
    """Whether this process's kernels run bf16 products on AVX512_BF16 (vdpbf16ps): the kernel
    tier's level has it where the tier serves the process, else the host has it."""
    from .runtime import prebuilt

    return "avx512bf16" in prebuilt.kernel_features()


def amx_unit() -> bool:
    """Whether the bf16 GEMMs also run on AMX's tiles (tdpbf16ps): the kernels' features have
    AMX's bf16 tiles and Linux granted this process the tile state (runtime.prebuilt.amx_permitted)."""
    from .runtime import prebuilt

    features = prebuilt.kernel_features()
    return bf16_unit() and "amx-tile" in features and "amx-bf16" in features and prebuilt.amx_permitted()


def describe_unit(precision: str) -> str:
    """The precision and the unit that runs it, for a run's first line."""
    if precision == "float32":
        return "precision float32"
    if amx_unit():
        return "precision bf16 on AMX (tdpbf16ps) and AVX512_BF16 (vdpbf16ps)"
    if bf16_unit():
        return "precision bf16 on AVX512_BF16 (vdpbf16ps)"
    return ("precision bf16 emulated (no AVX512_BF16 in this CPU or the kernel tier in use: bf16 products "
            "as float32 FMAs, slower than float32)")


def describe(precision: str, layers: list[str]) -> str:
    """Which layers of a network multiply in bf16, for the line after a run's first."""
    if not layers:
        return ("precision bf16: no layer of this network has bf16 kernels (3x3 convolutions by Winograd "
                "F(4x4) with channels in multiples of 16 have): every layer multiplies in float32")
    return (f"precision bf16: the GEMMs of {', '.join(layers)} in bf16 where they run Winograd F(4x4); "
            f"every other multiplication in float32")
