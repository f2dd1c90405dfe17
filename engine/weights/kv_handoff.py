"""Keys and values in and out of a llama.cpp sequence, in llama.cpp's own sequence-state format.

This is what lets a prompt be prefilled by one engine and decoded by another (engine/weights/torch_prefill.py):
llama.cpp's `llama_state_seq_get_data` / `llama_state_seq_set_data` write and read a sequence's cells as

    u32 magic, i32 seq_id, u32 n_stream, then per stream: u32 cell_count, and when cell_count > 0:
      cell_count x (i32 pos, u32 n_seq_id, i32 seq_id)                       (no cell extension for plain RoPE)
      u32 v_trans, u32 n_layer,
      n_layer x (i32 k_type, u64 k_row_bytes, cell_count rows of keys)
      n_layer x (i32 v_type, u64 v_row_bytes, cell_count rows of values)     (v_trans = 0)
      n_layer x (i32 v_type, u32 v_elem_bytes, u32 v_row, v_row x cell_count values)   (v_trans = 1)

(vendored llama.cpp 0c1e57098, src/llama-kv-cache.cpp `state_write`). Keys are stored after RoPE, one row per cell:
the heads' vectors one after another. Only F16 and F32 cells are handled; anything else (a quantized KV cache, an
unknown layout) raises HandoffUnsupported and the caller prefills in llama.cpp as before.
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass

import numpy as np

STATE_MAGIC = 0xAF143CD8
GGML_TYPES = {0: np.float32, 1: np.float16}  # ggml_type ids of the cell types handled here


class HandoffUnsupported(RuntimeError):
    """The sequence state is not in a layout this module can read or write."""


@dataclass
class Layout:
    n_stream: int
    stream: int  # the stream the sequence lives in
    v_trans: bool
    n_layer: int
    k_type: int
    v_type: int
    k_row: int  # values per cell row
    v_row: int


@dataclass
class SequenceKV:
    layout: Layout
    positions: np.ndarray  # [cells] int32
    keys: list[np.ndarray]  # per layer [cells, k_row]
    values: list[np.ndarray]  # per layer [cells, v_row]


def read_state(model, seq: int) -> np.ndarray:
    """Sequence seq's state as llama.cpp writes it (uint8, no copy beyond llama.cpp's own)."""
    lib = model.lib
    size = lib.llama_state_seq_get_size(model.ctx, seq)
    buf = np.empty(size, dtype=np.uint8)
    written = lib.llama_state_seq_get_data(model.ctx, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, seq)
    if written != size:
        raise HandoffUnsupported(f"llama.cpp wrote {written} of {size} bytes of sequence {seq}")
    return buf


def parse_state(blob) -> SequenceKV | None:
    """The one non-empty stream of a sequence state (bytes or uint8 array; the arrays returned are views of it);
    None when the sequence holds no cells."""
    view = memoryview(blob).cast("B")
    magic, _seq, n_stream = struct.unpack_from("<IiI", view, 0)
    if magic != STATE_MAGIC:
        raise HandoffUnsupported(f"not a llama.cpp sequence state (magic {magic:#x})")
    offset, found = 12, None
    for stream in range(n_stream):
        (cells,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if cells == 0:
            continue
        if found is not None:
            raise HandoffUnsupported("a sequence spread over two streams")
        meta = np.frombuffer(view, dtype=[("pos", "<i4"), ("n", "<u4"), ("seq", "<i4")], count=cells, offset=offset)
        if not (meta["n"] == 1).all():
            raise HandoffUnsupported("cells shared between sequences (or a cell extension)")
        offset += meta.nbytes
        v_trans, n_layer = struct.unpack_from("<II", view, offset)
        offset += 8
        keys, values = [], []
        for _ in range(n_layer):
            k_type, k_row, block, offset = _rows(view, offset, cells)
            keys.append(block)
        for _ in range(n_layer):
            if v_trans:  # one row per value channel, a column per cell
                v_type, elem, v_row = struct.unpack_from("<iII", view, offset)
                flat = np.frombuffer(view, dtype=_dtype(v_type), count=cells * v_row, offset=offset + 12)
                values.append(flat.reshape(v_row, cells).T)
                offset += 12 + cells * v_row * elem
            else:
                v_type, v_row, block, offset = _rows(view, offset, cells)
                values.append(block)
        layout = Layout(n_stream, stream, bool(v_trans), n_layer, k_type, v_type, k_row, v_row)
        positions = meta["pos"].copy()
        if np.any(np.diff(positions) < 0):  # cells sit in slot order, which a cut and a re-extend can shuffle
            order = np.argsort(positions, kind="stable")
            positions, keys, values = positions[order], [k[order] for k in keys], [v[order] for v in values]
        found = SequenceKV(layout, positions, keys, values)
    if offset != len(blob):
        raise HandoffUnsupported(f"{len(blob) - offset} bytes left after parsing a sequence state")
    return found


def _rows(view, offset: int, cells: int):
    """One layer's block of cell rows: (ggml type, values per row, [cells, row] view, offset after it)."""
    ggml_type, row_bytes = struct.unpack_from("<iQ", view, offset)
    dtype = np.dtype(_dtype(ggml_type))
    row = row_bytes // dtype.itemsize
    block = np.frombuffer(view, dtype=dtype, count=cells * row, offset=offset + 12).reshape(cells, row)
    return ggml_type, row, block, offset + 12 + cells * row_bytes


def encode_state(layout: Layout, seq: int, keys: list, values: list) -> np.ndarray:
    """A sequence state holding positions 0..n-1 with these keys and values ([cells, row] arrays or tensors, any
    float dtype: cast to the layout's cell types while copied into place, one pass)."""
    cells = keys[0].shape[0]
    k_dtype, v_dtype = np.dtype(_dtype(layout.k_type)), np.dtype(_dtype(layout.v_type))
    k_bytes, v_bytes = cells * layout.k_row * k_dtype.itemsize, cells * layout.v_row * v_dtype.itemsize
    meta_dtype = np.dtype([("pos", "<i4"), ("n", "<u4"), ("seq", "<i4")])
    stream_bytes = 4 + cells * meta_dtype.itemsize + 8 + layout.n_layer * (12 + k_bytes + 12 + v_bytes)
    out = np.empty(12 + 4 * (layout.n_stream - 1) + stream_bytes, dtype=np.uint8)
    struct.pack_into("<IiI", out, 0, STATE_MAGIC, seq, layout.n_stream)
    offset = 12
    for stream in range(layout.n_stream):
        if stream != layout.stream:
            struct.pack_into("<I", out, offset, 0)
            offset += 4
            continue
        struct.pack_into("<I", out, offset, cells)
        meta = out[offset + 4:offset + 4 + cells * meta_dtype.itemsize].view(meta_dtype)
        meta["pos"], meta["n"], meta["seq"] = np.arange(cells), 1, seq
        offset += 4 + meta.nbytes
        struct.pack_into("<II", out, offset, int(layout.v_trans), layout.n_layer)
        offset += 8
        for k in keys:
            struct.pack_into("<iQ", out, offset, layout.k_type, layout.k_row * k_dtype.itemsize)
            _copy(out[offset + 12:offset + 12 + k_bytes].view(k_dtype).reshape(cells, layout.k_row), k)
            offset += 12 + k_bytes
        for v in values:
            if layout.v_trans:
                struct.pack_into("<iII", out, offset, layout.v_type, v_dtype.itemsize, layout.v_row)
                _copy(out[offset + 12:offset + 12 + v_bytes].view(v_dtype).reshape(layout.v_row, cells), v, True)
            else:
                struct.pack_into("<iQ", out, offset, layout.v_type, layout.v_row * v_dtype.itemsize)
                _copy(out[offset + 12:offset + 12 + v_bytes].view(v_dtype).reshape(cells, layout.v_row), v)
            offset += 12 + v_bytes
    assert offset == out.size
    return out


def _copy(dest: np.ndarray, source, transpose: bool = False) -> None:
    """Cast-copy through torch: its float32 -> float16 conversion is vectorised, numpy's is not (several times
    slower)."""
    import torch

    source = source if isinstance(source, torch.Tensor) else torch.from_numpy(np.asarray(source))
    torch.from_numpy(dest).copy_(source.T if transpose else source)


def write_state(model, seq: int, blob: np.ndarray) -> None:
    """Replace sequence seq's cells with the state in blob (llama.cpp empties the sequence first)."""
    blob = np.ascontiguousarray(blob, dtype=np.uint8)
    read = model.lib.llama_state_seq_set_data(model.ctx, blob.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                              blob.size, seq)
    if read != blob.size:
        raise HandoffUnsupported(f"llama.cpp refused the sequence state ({read} of {blob.size} bytes read)")


def _dtype(ggml_type: int):
    try:
        return GGML_TYPES[ggml_type]
    except KeyError:
        raise HandoffUnsupported(f"KV cells of ggml type {ggml_type} (only F16 and F32 are handled)") from None
