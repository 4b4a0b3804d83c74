"""Plain data across the process boundary: no pickle in either direction.

A value is split into a JSON *structure* and a blob of concatenated ``.npy`` files:

    value  = (np.ndarray, 3.0, [True, None])
    struct = {"t": "tuple", "items": [{"t": "array", "i": 0, "n": 128},
              {"t": "scalar", "v": 3.0}, {"t": "list", "items": [...]}]}
    blob   = the array's .npy bytes (np.save(..., allow_pickle=False))

:func:`pack` accepts exactly: ``np.ndarray`` and ``torch.Tensor`` (not subclasses; numeric or bool
dtype), NumPy scalars, ``int``/``float``/``bool``/``complex``/``str``/``None``, and ``tuple``/
``list``/``dict`` (str keys) of those -- anything else raises :class:`RejectedOutput` with a
message for the learner. Tensors arrive as arrays. :func:`unpack` reads arrays back with
``np.load(..., allow_pickle=False)``, so a hostile blob can at worst fail to load.

Frames on a socket (:func:`send` / :func:`recv`): 8-byte length + JSON message, 8-byte length +
blob. ``recv`` refuses frames above a size limit.
"""

from __future__ import annotations

import io
import json
import socket
import struct
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

MAX_BLOB_BYTES = 256 * 2**20
MAX_JSON_BYTES = 16 * 2**20
_LEN = struct.Struct(">Q")


class RejectedOutput(TypeError):
    """An output the grader will not take back (a subclass, an object array, a custom type...)."""


def _is_exact_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and type(value) is torch.Tensor


def _describe(value: Any) -> str:
    cls = type(value)
    bases = [b.__module__ + "." + b.__qualname__ for b in cls.__mro__[1:3]]
    return f"{cls.__module__}.{cls.__qualname__} (a subclass of {', '.join(bases)})"


def pack(value: Any, max_bytes: int = MAX_BLOB_BYTES) -> tuple[dict, bytes]:
    """``value`` -> (JSON-able structure, blob); raises RejectedOutput for types outside the list above."""
    packer = _Packer(max_bytes)
    structure = packer.node(value, 0)
    return structure, b"".join(packer.pieces)


class _Packer:
    """:func:`pack`'s state: the ``.npy`` pieces so far and their total size."""

    def __init__(self, max_bytes: int) -> None:
        self.pieces: list[bytes] = []
        self.total = 0
        self.max_bytes = max_bytes

    def array(self, arr: np.ndarray) -> dict:
        if arr.dtype.kind not in "biufc":
            raise RejectedOutput(f"an array of dtype {arr.dtype} cannot be graded; return numbers or booleans")
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)  # keeps 0-d arrays 0-d
        data = buf.getvalue()
        self.total += len(data)
        if self.total > self.max_bytes:
            raise RejectedOutput(f"the output is larger than {self.max_bytes // 2**20} MiB")
        self.pieces.append(data)
        return {"t": "array", "i": len(self.pieces) - 1, "n": len(data)}

    def node(self, x: Any, depth: int) -> dict:
        if depth > 8:
            raise RejectedOutput("the output is nested more than 8 levels deep")
        leaf = self._leaf(x)
        if leaf is not None:
            return leaf
        cls = type(x)
        if cls in (tuple, list):
            if len(x) > 10_000:
                raise RejectedOutput("a sequence of more than 10000 items cannot be graded")
            return {"t": cls.__name__, "items": [self.node(item, depth + 1) for item in x]}
        if cls is dict:
            if not all(type(k) is str for k in x):
                raise RejectedOutput("a dict with non-string keys cannot be graded")
            return {"t": "dict", "items": {k: self.node(v, depth + 1) for k, v in x.items()}}
        raise _rejected(x)

    def _leaf(self, x: Any) -> dict | None:
        """An array, tensor or scalar of an exact accepted type as its node; None for anything else."""
        cls = type(x)
        if cls is np.ndarray:
            return self.array(x)
        if _is_exact_tensor(x):
            return self.array(x.detach().cpu().resolve_conj().resolve_neg().numpy())
        if (isinstance(x, np.generic) and cls.__module__ == "numpy") or cls is complex:
            return self.array(np.asarray(x))
        if x is None or cls in (bool, int, float, str):
            if cls is int and abs(x) > 2**63:
                raise RejectedOutput("an integer too large to grade")
            return {"t": "scalar", "v": x}
        return None


def _rejected(x: Any) -> RejectedOutput:
    """The learner's message for a value :func:`pack` does not take: a subclass, or another type."""
    cls = type(x)
    if (
        isinstance(x, (np.ndarray, tuple, list, dict, int, float, str))
        or "torch" in cls.__module__
        or any("Tensor" in b.__name__ for b in cls.__mro__)
    ):
        return RejectedOutput(
            f"got {_describe(x)}; return a plain NumPy array / torch tensor / number, "
            "not a subclass: the grader compares plain values only"
        )
    return RejectedOutput(
        f"got an object of type {cls.__module__}.{cls.__qualname__}; return arrays, tensors, numbers, or tuples of them"
    )


def unpack(structure: Any, blob: bytes) -> Any:
    """Rebuild a value from :func:`pack`'s output; arrays come back as plain ``np.ndarray``.

    Raises ValueError for a malformed structure or blob.
    """
    offsets = [0]
    _array_sizes(structure, offsets)
    if offsets[-1] != len(blob):
        raise ValueError("the output's arrays do not match its description")
    return _build(structure, blob, offsets)


def _array_sizes(n: Any, offsets: list[int]) -> None:
    """Append each array's end offset in the blob to ``offsets``, in the order :func:`pack` wrote them."""
    if isinstance(n, dict) and n.get("t") == "array":
        offsets.append(offsets[-1] + int(n["n"]))
    elif isinstance(n, dict) and n.get("t") in ("tuple", "list"):
        for item in n["items"]:
            _array_sizes(item, offsets)
    elif isinstance(n, dict) and n.get("t") == "dict":
        for item in n["items"].values():
            _array_sizes(item, offsets)


def _build(n: Any, blob: bytes, offsets: list[int]) -> Any:
    if not isinstance(n, dict):
        raise ValueError("malformed output description")
    kind = n.get("t")
    if kind == "array":
        i = int(n["i"])
        arr = np.load(io.BytesIO(blob[offsets[i] : offsets[i + 1]]), allow_pickle=False)
        if type(arr) is not np.ndarray:
            raise ValueError("malformed array")
        return arr
    if kind == "scalar":
        v = n.get("v")
        if v is not None and type(v) not in (bool, int, float, str):
            raise ValueError("malformed scalar")
        return v
    if kind == "tuple":
        return tuple(_build(i, blob, offsets) for i in n["items"])
    if kind == "list":
        return [_build(i, blob, offsets) for i in n["items"]]
    if kind == "dict":
        return {str(k): _build(v, blob, offsets) for k, v in n["items"].items()}
    raise ValueError(f"unknown node type {kind!r}")


def roundtrip(value: Any) -> Any:
    """``unpack(*pack(value))``: what the grader's process would receive for ``value``."""
    structure, blob = pack(value)
    return unpack(json.loads(json.dumps(structure)), blob)


# --- frames on a socket ----------------------------------------------------------------------------


def send(sock: socket.socket, message: Mapping[str, Any], blob: bytes = b"") -> None:
    """Send one frame: a JSON message and an optional blob."""
    data = json.dumps(message).encode()
    sock.sendall(_LEN.pack(len(data)) + data + _LEN.pack(len(blob)) + blob)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket, max_blob: int = MAX_BLOB_BYTES) -> tuple[dict, bytes]:
    """Receive one frame; raises EOFError when closed, ValueError when oversized or malformed."""
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if n > MAX_JSON_BYTES:
        raise ValueError(f"message of {n} bytes is too large")
    message = json.loads(_recv_exact(sock, n).decode())
    if not isinstance(message, dict):
        raise ValueError("malformed message")
    (m,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if m > max_blob:
        raise ValueError(f"output of {m} bytes is too large")
    return message, _recv_exact(sock, m)
