"""KServe v2 / Triton infer bodies: JSON tensors and the binary-tensor extension.

Why: `tritonclient` sends `binary_data=True` by default (inputs as raw bytes after a JSON header
whose length is in `Inference-Header-Content-Length`) and asks for binary outputs with
`parameters.binary_data_output`, so an executor that only spoke JSON would fail with the stock
client. Format: Triton `docs/protocol/extension_binary_data.md`; BYTES elements are a 4-byte
little-endian length followed by the bytes (as `tritonclient.utils.serialize_byte_tensor`).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

HEADER_LENGTH = "Inference-Header-Content-Length"

# KServe datatype -> numpy dtype; BYTES is object (python bytes).
_NUMPY: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}

_DATATYPE_BY_DTYPE: dict[np.dtype[Any], str] = {np.dtype(v): k for k, v in _NUMPY.items()}

# Model-config data_type (TYPE_*) -> KServe datatype.
CONFIG_TO_DATATYPE: dict[str, str] = {f"TYPE_{k}": k for k in _NUMPY if k != "BYTES"}
CONFIG_TO_DATATYPE["TYPE_STRING"] = "BYTES"


class TensorError(ValueError):
    """A malformed infer request; the message is returned as `{"error": ...}` with HTTP 400."""


@dataclass(frozen=True)
class RequestedOutput:
    """An entry of the request's `outputs`: which output, and whether to return it as binary."""

    name: str
    binary: bool


@dataclass
class DecodedRequest:
    """An infer request body, decoded: tensors as numpy arrays plus the scheduling parameters."""

    request_id: str
    inputs: dict[str, npt.NDArray[Any]]
    datatypes: dict[str, str]
    outputs: list[RequestedOutput] | None
    binary_output_default: bool
    parameters: dict[str, Any] = field(default_factory=dict)


def numpy_dtype(datatype: str) -> Any:
    """The numpy dtype of a KServe datatype; TensorError if unsupported."""
    try:
        return _NUMPY[datatype]
    except KeyError:
        raise TensorError(f"invalid datatype '{datatype}'") from None


def decode_request(body: bytes, header_length: int | None) -> DecodedRequest:
    """Decode an infer POST body (pure JSON, or JSON header + binary tensors)."""
    if header_length is None:
        header_bytes, rest = body, b""
    else:
        if header_length < 0 or header_length > len(body):
            raise TensorError(f"invalid {HEADER_LENGTH}: {header_length} (body has {len(body)} bytes)")
        header_bytes, rest = body[:header_length], body[header_length:]
    try:
        doc = json.loads(header_bytes)
    except ValueError as err:
        raise TensorError(f"failed to parse the request JSON buffer: {err}") from None
    if not isinstance(doc, dict):
        raise TensorError("inference request JSON must be an object")
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list):
        raise TensorError("inference request JSON must contain 'inputs' array")
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise TensorError("'parameters' must be an object")
    inputs: dict[str, npt.NDArray[Any]] = {}
    datatypes: dict[str, str] = {}
    offset = 0
    for item in raw_inputs:
        if not isinstance(item, dict):
            raise TensorError("each entry of 'inputs' must be an object")
        name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str) or not isinstance(shape, list):
            raise TensorError("input must specify 'name', 'datatype' and 'shape'")
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise TensorError(f"unable to parse 'shape' for input '{name}'")
        dtype = numpy_dtype(datatype)
        in_params = item.get("parameters") or {}
        size = in_params.get("binary_data_size")
        if size is not None:
            if offset + int(size) > len(rest):
                raise TensorError(f"unexpected end of binary data for input '{name}'")
            chunk = rest[offset : offset + int(size)]
            offset += int(size)
            array = _from_binary(chunk, datatype, dtype, shape, name)
        else:
            if "data" not in item:
                raise TensorError(f"input '{name}' must specify 'data' or binary_data_size")
            array = _from_json(item["data"], datatype, dtype, shape, name)
        inputs[name] = array
        datatypes[name] = datatype
    outputs: list[RequestedOutput] | None = None
    if doc.get("outputs") is not None:
        outputs = []
        for out in doc["outputs"]:
            if not isinstance(out, dict) or not isinstance(out.get("name"), str):
                raise TensorError("each entry of 'outputs' must be an object with 'name'")
            out_params = out.get("parameters") or {}
            outputs.append(RequestedOutput(out["name"], bool(out_params.get("binary_data", False))))
    request_id = doc.get("id", "")
    return DecodedRequest(
        request_id=str(request_id) if request_id is not None else "",
        inputs=inputs,
        datatypes=datatypes,
        outputs=outputs,
        binary_output_default=bool(params.get("binary_data_output", False)),
        parameters=params,
    )


def _element_count(shape: list[int]) -> int:
    return math.prod(shape)


def _from_binary(chunk: bytes, datatype: str, dtype: Any, shape: list[int], name: str) -> npt.NDArray[Any]:
    count = _element_count(shape)
    if datatype == "BYTES":
        items: list[bytes] = []
        pos = 0
        while pos < len(chunk):
            if pos + 4 > len(chunk):
                raise TensorError(f"malformed BYTES data for input '{name}'")
            (length,) = struct.unpack_from("<I", chunk, pos)
            items.append(bytes(chunk[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        if len(items) != count:
            raise TensorError(
                f"unexpected number of string elements {len(items)} for input '{name}', expecting {count}"
            )
        return np.array(items, dtype=np.object_).reshape(shape)
    expected = count * np.dtype(dtype).itemsize
    if len(chunk) != expected:
        raise TensorError(f"unexpected total byte size {len(chunk)} for input '{name}', expecting {expected}")
    return np.frombuffer(chunk, dtype=dtype).reshape(shape)


def _from_json(data: Any, datatype: str, dtype: Any, shape: list[int], name: str) -> npt.NDArray[Any]:
    if datatype == "BYTES":
        flat = np.array(data, dtype=np.object_).reshape(-1)
        flat = np.array([v.encode() if isinstance(v, str) else bytes(v) for v in flat], dtype=np.object_)
    else:
        try:
            flat = np.asarray(data, dtype=dtype).reshape(-1)
        except (TypeError, ValueError):
            raise TensorError(f"unable to parse 'data' for input '{name}' as {datatype}") from None
    if flat.size != _element_count(shape):
        raise TensorError(
            f"unexpected number of elements {flat.size} for input '{name}', expecting {_element_count(shape)}"
        )
    return flat.reshape(shape)


def datatype_of(array: npt.NDArray[Any]) -> str:
    """KServe datatype of a numpy array (object arrays are BYTES)."""
    name = _DATATYPE_BY_DTYPE.get(array.dtype)
    if name is None:
        raise TensorError(f"unsupported output dtype {array.dtype}")
    return name


def encode_response(
    *,
    model_name: str,
    model_version: str,
    request_id: str,
    outputs: list[tuple[str, npt.NDArray[Any], bool]],
) -> tuple[bytes, int | None]:
    """Build a response body; returns (body, header_length or None when pure JSON)."""
    out_docs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name, array, binary in outputs:
        datatype = datatype_of(array)
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            blob = _to_binary(array, datatype)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif datatype == "BYTES":
            entry["data"] = [
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)
            ]
        else:
            entry["data"] = array.reshape(-1).tolist()
        out_docs.append(entry)
    doc: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request_id:
        doc["id"] = request_id
    doc["outputs"] = out_docs
    header = json.dumps(doc, separators=(",", ":")).encode()
    if not blobs:
        return header, None
    return header + b"".join(blobs), len(header)


def _to_binary(array: npt.NDArray[Any], datatype: str) -> bytes:
    if datatype == "BYTES":
        parts = []
        for v in array.reshape(-1):
            b = v if isinstance(v, bytes) else str(v).encode()
            parts.append(struct.pack("<I", len(b)) + b)
        return b"".join(parts)
    return np.ascontiguousarray(array).tobytes()
