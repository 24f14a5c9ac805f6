# SPDX-License-Identifier: Apache-2.0
"""Per-sample sizes in the forms a PyTorch dataset has them, as `dflop.Samples`.

A list of dicts and a JSONL trace are converted by the C++ code; a NumPy
structured array is split into columns here (checked with the trace's rules:
integral sizes only, nothing rounded) and handed over as int64 buffers.
"""

import os
from typing import Any

from ._dflop import InputError, Samples, read_trace

_SIZE_FIELDS = ("encoder_items", "encoder_tokens", "llm_tokens")
_INT64_MAX = 2**63 - 1


def _input_error(source, line, reason):
    """An InputError as the C++ code raises it: 'SOURCE:LINE: REASON' with the parts as attributes."""
    error = InputError(f"{source}:{line}: {reason}" if line else f"{source}: {reason}")
    error.source, error.line, error.reason = source, line, reason
    return error


def _int64_column(numpy, array, name, source):
    """Field `name` of a structured array as a contiguous int64 array; an exact conversion or an InputError."""
    column = array[name]
    kind = column.dtype.kind
    if kind == "i":
        return numpy.ascontiguousarray(column, dtype=numpy.int64)
    if kind == "u":
        too_big = numpy.nonzero(column > _INT64_MAX)[0]
        if too_big.size:
            row = int(too_big[0])
            raise _input_error(source, row + 1, f"field '{name}' is out of range: {column[row]}")
        return numpy.ascontiguousarray(column, dtype=numpy.int64)
    if kind == "f":
        bad = numpy.nonzero(~numpy.isfinite(column) | (numpy.trunc(column) != column) | (numpy.abs(column) >= 2.0**63))[0]
        if bad.size:
            row = int(bad[0])
            raise _input_error(source, row + 1, f"field '{name}' must be an integer, found float {column[row]!r}")
        return numpy.ascontiguousarray(column, dtype=numpy.int64)
    raise _input_error(source, 0, f"field '{name}' must hold integers, its dtype is {column.dtype}")


def _text_column(values):
    return [value.decode() if isinstance(value, bytes) else str(value) for value in values.tolist()]


def _from_structured_array(array, source):
    import numpy

    if array.ndim != 1:
        raise _input_error(source, 0, f"a structured array of samples must be 1-D, got {array.ndim} dimensions")
    names = array.dtype.names
    for name in ("modality",) + _SIZE_FIELDS:
        if name not in names:
            raise _input_error(source, 0, f"missing field '{name}' (the array has {', '.join(names)})")
    if array.dtype["modality"].kind not in "USO":
        raise _input_error(source, 0, f"field 'modality' must hold strings, its dtype is {array.dtype['modality']}")
    columns = [_int64_column(numpy, array, name, source) for name in _SIZE_FIELDS]
    ids = _text_column(array["id"]) if "id" in names else None
    return Samples.from_columns(_text_column(array["modality"]), *columns, ids=ids, source=source)


def samples_from(sizes: Any, source: str = "sizes") -> Samples:
    """Per-sample sizes as dflop.Samples.

    `sizes`: a dflop.Samples (returned as is); a path (str or os.PathLike) to a
    JSONL trace; a NumPy structured array with fields modality (strings),
    encoder_items, encoder_tokens, llm_tokens (integers) and optionally id; or
    a list of dicts with those keys ('id' optional, default the position;
    extra keys ignored). Sample i of the result is sizes[i]. Bad input raises
    InputError naming `source` (the file for a trace) and the 1-based line or
    position, e.g. "sizes:12: missing field 'llm_tokens'".
    """
    if isinstance(sizes, Samples):
        return sizes
    if isinstance(sizes, (str, os.PathLike)):
        return read_trace(sizes)
    if getattr(getattr(sizes, "dtype", None), "names", None):
        return _from_structured_array(sizes, source)
    return Samples.from_records(sizes, source)
