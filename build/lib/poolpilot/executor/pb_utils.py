"""A small, faithful stand-in for Triton's ``triton_python_backend_utils`` (``pb_utils``).

Why: the production image runs ``executor_image/model_repository/poolnet/1/model.py`` inside real
Triton's Python backend, which provides ``triton_python_backend_utils``. Our CPU executor runs the
*same* ``model.py``; it installs this module as ``sys.modules["triton_python_backend_utils"]`` so
the file needs no change. Only the surface a non-decoupled, non-BLS model uses is provided, with the
names, signatures and semantics of python_backend's ``src/resources/triton_python_backend_utils.py``
and the stub's pybind classes (see /work/shared/reference/triton.md §5).

Install it with :func:`install` (idempotent) before importing a ``model.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

MODULE_NAME = "triton_python_backend_utils"

# Same table as python_backend's TRITON_STRING_TO_NUMPY.
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """Map a config ``data_type`` such as ``"TYPE_FP32"`` to its numpy type (KeyError if unknown)."""
    try:
        return TRITON_STRING_TO_NUMPY[triton_type_string]
    except KeyError:
        raise KeyError(f"unknown Triton data_type {triton_type_string!r}") from None


class TritonModelException(Exception):
    """Raised by pb_utils calls on misuse (as the real stub does)."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


class TritonError:
    """An error a model returns inside an :class:`InferenceResponse` (not raised).

    Codes mirror the stub's ``TritonError`` class attributes; the executor maps them to HTTP
    status like Triton does (INVALID_ARG → 400, NOT_FOUND → 404, UNAVAILABLE → 503, ...).
    """

    UNKNOWN: ClassVar[int] = 0
    INTERNAL: ClassVar[int] = 1
    NOT_FOUND: ClassVar[int] = 2
    INVALID_ARG: ClassVar[int] = 3
    UNAVAILABLE: ClassVar[int] = 4
    UNSUPPORTED: ClassVar[int] = 5
    ALREADY_EXISTS: ClassVar[int] = 6
    CANCELLED: ClassVar[int] = 7

    CODE_NAMES: ClassVar[dict[int, str]] = {
        0: "UNKNOWN",
        1: "INTERNAL",
        2: "NOT_FOUND",
        3: "INVALID_ARG",
        4: "UNAVAILABLE",
        5: "UNSUPPORTED",
        6: "ALREADY_EXISTS",
        7: "CANCELLED",
    }

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        if code not in self.CODE_NAMES:
            allowed = sorted(self.CODE_NAMES)
            raise TritonModelException(f"TritonError code must be one of {allowed}, got {code}")
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {self.CODE_NAMES[self._code]})"


class Tensor:
    """A named tensor, held on CPU as a numpy array (this stand-in has no GPU memory)."""

    def __init__(self, name: str, numpy_array: npt.NDArray[Any]) -> None:
        if not isinstance(name, str) or not name:
            raise TritonModelException("Tensor name must be a non-empty string")
        if not isinstance(numpy_array, np.ndarray):
            raise TritonModelException(f"Tensor {name!r}: numpy_array must be a numpy.ndarray")
        # The real stub rejects numpy unicode/void arrays: BYTES tensors must be np.object_.
        if numpy_array.dtype.type == np.str_ or numpy_array.dtype == np.void:
            raise TritonModelException(
                "Tensor dtype used for numpy_array is not supported by Python backend. "
                "Please use np.object_ instead."
            )
        self._name = name
        self._array = numpy_array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        return self._array

    def is_cpu(self) -> bool:
        return True

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def to_dlpack(self) -> Any:
        """A DLPack capsule of the tensor (as the stub's ``to_dlpack``), e.g. for ``torch.from_dlpack``."""
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, dlpack_object: Any) -> Tensor:
        """Build a Tensor from any ``__dlpack__`` object (torch tensor) or a DLPack capsule.

        Like the stub, only C-contiguous data is accepted.
        """
        # A raw PyCapsule is wrapped so numpy.from_dlpack can consume it once.
        holder = dlpack_object if hasattr(dlpack_object, "__dlpack__") else _CapsuleHolder(dlpack_object)
        array = np.from_dlpack(holder)
        if not array.flags.c_contiguous:
            raise TritonModelException(f"Tensor {name!r}: DLPack tensor is not contiguous (C order required)")
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._array.shape)}, dtype={self._array.dtype})"


class _CapsuleHolder:
    """Adapts a bare DLPack PyCapsule to numpy's ``__dlpack__`` protocol (CPU device only)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


class InferenceRequest:
    """One request as the backend hands it to ``execute`` (the executor builds these)."""

    def __init__(
        self,
        inputs: Sequence[Tensor],
        request_id: str = "",
        correlation_id: int | str = 0,
        requested_output_names: Sequence[str] = (),
        parameters: Mapping[str, Any] | str | None = None,
        model_name: str = "",
        model_version: int = -1,
    ) -> None:
        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._requested_output_names = list(requested_output_names)
        if parameters is None:
            self._parameters = "{}"
        elif isinstance(parameters, str):
            json.loads(parameters)  # must be a JSON document, like the stub's
            self._parameters = parameters
        else:
            self._parameters = json.dumps(dict(parameters))
        self._model_name = model_name
        self._model_version = model_version

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def parameters(self) -> str:
        """Request parameters as a JSON *string* (the real API returns a string, not a dict)."""
        return self._parameters

    def model_name(self) -> str:
        return self._model_name

    def flags(self) -> int:
        return 0

    def is_cancelled(self) -> bool:
        return False


class InferenceResponse:
    """The response a model returns for one request: output tensors, or an error."""

    def __init__(
        self, output_tensors: Sequence[Tensor] | None = None, error: TritonError | None = None
    ) -> None:
        if output_tensors is None:
            output_tensors = []
        if not isinstance(output_tensors, list | tuple):
            raise TritonModelException('"output_tensors" must be a list.')
        for t in output_tensors:
            if not isinstance(t, Tensor):
                kind = type(t).__name__
                raise TritonModelException(f'"output_tensors" must hold pb_utils.Tensor, got {kind}')
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException(f'"error" must be a pb_utils.TritonError, got {type(error).__name__}')
        self._output_tensors = list(output_tensors)
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input tensor called ``name``, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output tensor called ``name``, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry of a model config (dict form) called ``name``, or None."""
    for entry in model_config.get("input", []):
        if entry.get("name") == name:
            return dict(entry)
    return None


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry of a model config (dict form) called ``name``, or None."""
    for entry in model_config.get("output", []):
        if entry.get("name") == name:
            return dict(entry)
    return None


def install() -> ModuleType:
    """Register this module as ``triton_python_backend_utils`` so ``import ... as pb_utils`` works.

    Idempotent; returns the module. A real ``triton_python_backend_utils`` already imported (i.e.
    we are inside Triton's stub) is left alone.
    """
    existing = sys.modules.get(MODULE_NAME)
    if existing is not None:
        return existing
    this = sys.modules[__name__]
    sys.modules[MODULE_NAME] = this
    return this
