"""The dtype catalog of the loaderx 2.8 API: ``from loaderx import dtypes``.

Each name is a NumPy dtype a store holds and DLPack carries: ``bool``,
signed and unsigned integers of 8 to 64 bits, ``float16/32/64``,
``complex64/128``, and the machine-learning floats of the ``ml_dtypes``
package: ``bfloat16`` and the 8-bit floats (``float8_e4m3fn``,
``float8_e5m2``, ...). :data:`supported` lists them all.

``ml_dtypes`` is optional: importing this module does not import it; the
first use of one of its names does, and raises :class:`ImportError` saying
how to install it when it is missing. Every API generation (``Dataset``,
``Dense``/``Ragged``, ``DenseWriter``/``RaggedWriter``) stores these floats
under their ``ml_dtypes`` name (docs/FORMAT.md, the dtype table).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _native

bool = np.dtype(np.bool_)  # noqa: A001 - the catalog's name for it
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)

#: The ``ml_dtypes`` floats a store holds, by name (from the engine's
#: dtype table): bfloat16 and every 8-bit float ml_dtypes defines.
ML_FLOATS: tuple[str, ...] = tuple(_native.ML_DTYPES)

# The ml_dtypes floats, resolved on first use by `__getattr__` below
# (declared here for type checkers; no value until then).
bfloat16: np.dtype[Any]
float8_e3m4: np.dtype[Any]
float8_e4m3: np.dtype[Any]
float8_e4m3b11fnuz: np.dtype[Any]
float8_e4m3fn: np.dtype[Any]
float8_e4m3fnuz: np.dtype[Any]
float8_e5m2: np.dtype[Any]
float8_e5m2fnuz: np.dtype[Any]
float8_e5m3fnu: np.dtype[Any]
float8_e8m0fnu: np.dtype[Any]
#: Every dtype of the catalog (imports ml_dtypes on first use).
supported: tuple[np.dtype[Any], ...]

#: DLPack 1.1 type codes ``(code, bits)`` of every dtype of the catalog.
_DLPACK: dict[str, tuple[int, int]] = {
    "bool": (6, 8),
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint8": (1, 8),
    "uint16": (1, 16),
    "uint32": (1, 32),
    "uint64": (1, 64),
    "float16": (2, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "complex64": (5, 64),
    "complex128": (5, 128),
    "bfloat16": (4, 16),
    "float8_e3m4": (7, 8),
    "float8_e4m3": (8, 8),
    "float8_e4m3b11fnuz": (9, 8),
    "float8_e4m3fn": (10, 8),
    "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8),
    "float8_e8m0fnu": (14, 8),
}

_PLAIN = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)  # fmt: skip


def _ml_dtypes() -> Any:
    """The ``ml_dtypes`` module, imported on first use."""
    try:
        import ml_dtypes
    except ImportError as exc:
        raise ImportError(
            "bfloat16 and the float8 dtypes need the ml_dtypes package: pip install ml-dtypes"
        ) from exc
    return ml_dtypes


def ml_dtype(name: str) -> np.dtype:
    """The NumPy dtype of the ``ml_dtypes`` float `name` (``"bfloat16"``);
    :class:`ImportError` without ml_dtypes, :class:`ValueError` for a name
    not in :data:`ML_FLOATS`."""
    if name not in ML_FLOATS:
        raise ValueError(f"{name!r} is not an ml_dtypes float a store holds ({list(ML_FLOATS)})")
    return np.dtype(getattr(_ml_dtypes(), name))


def from_store_name(name: str) -> np.dtype:
    """The NumPy dtype a store's schema spells `name`: an ``ml_dtypes``
    float by its name (imports ml_dtypes), anything else as ``np.dtype``
    reads it."""
    if name in ML_FLOATS:
        return ml_dtype(name)
    return np.dtype(name)


def store_name(dtype: Any) -> str:
    """How a store's schema spells `dtype` (anything ``np.dtype`` takes):
    the ``ml_dtypes`` name of an ml_dtypes float, ``dtype.str`` otherwise."""
    return str(_native.dtype_name(np.dtype(dtype)))


def __getattr__(name: str) -> Any:
    # The ml_dtypes names and `supported` resolve on first use, so that
    # `import loaderx` works without ml_dtypes.
    if name in ML_FLOATS:
        found = ml_dtype(name)
        globals()[name] = found
        return found
    if name == "supported":
        every = tuple(globals()[n] for n in _PLAIN) + tuple(ml_dtype(n) for n in ML_FLOATS)
        globals()[name] = every
        return every
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(ML_FLOATS) | {"supported"})


__all__ = [
    "ML_FLOATS",
    "bfloat16",
    "bool",
    "complex128",
    "complex64",
    "float16",
    "float32",
    "float64",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e5m3fnu",
    "float8_e8m0fnu",
    "from_store_name",
    "int16",
    "int32",
    "int64",
    "int8",
    "ml_dtype",
    "store_name",
    "supported",
    "uint16",
    "uint32",
    "uint64",
    "uint8",
]
