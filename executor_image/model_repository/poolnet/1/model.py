"""Triton Python-backend model for PoolNet: one torch forward pass per dynamic batch.

Runs unchanged in real Triton (``triton_python_backend_utils`` comes from the stub) and in
PoolPilot's CPU executor (which installs ``poolpilot.executor.pb_utils`` under that name).
Triton's Python backend hands ``execute`` a *list* of requests and does not batch them for us
(triton.md §5, #3286/#5926): we concatenate every request's INPUT0 along dim 0, run the network
once, and split the output back by each request's batch size, answering in request order.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils


def _load_poolnet() -> Any:
    """Import the sibling ``poolnet.py`` by path: the stub does not guarantee this dir is on sys.path."""
    path = Path(__file__).with_name("poolnet.py")
    name = "poolnet_model_module"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


poolnet = _load_poolnet()


class TritonPythonModel:
    """Triton's fixed class name for Python-backend models."""

    def initialize(self, args: dict[str, str]) -> None:
        import torch

        self.model_config: dict[str, Any] = json.loads(args["model_config"])
        kind = args.get("model_instance_kind", "CPU")
        device_id = args.get("model_instance_device_id", "0")
        if kind == "GPU" and torch.cuda.is_available():
            self.device = torch.device(f"cuda:{device_id}")
        else:
            self.device = torch.device("cpu")
        params = self.model_config.get("parameters", {})
        seed_param = params.get("poolnet_seed", {}).get("string_value", "")
        seed = int(seed_param) if seed_param else poolnet.DEFAULT_SEED
        self.model = poolnet.build(seed, device=self.device)
        in_cfg = pb_utils.get_input_config_by_name(self.model_config, "INPUT0")
        out_cfg = pb_utils.get_output_config_by_name(self.model_config, "OUTPUT0")
        if in_cfg is None or out_cfg is None:
            raise pb_utils.TritonModelException("poolnet config must declare INPUT0 and OUTPUT0")
        self.output_dtype = pb_utils.triton_string_to_numpy(out_cfg["data_type"])

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        arrays: list[np.ndarray] = []
        owners: list[int] = []
        for i, request in enumerate(requests):
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if tensor is None:
                responses[i] = pb_utils.InferenceResponse(
                    output_tensors=[],
                    error=pb_utils.TritonError("missing input INPUT0", pb_utils.TritonError.INVALID_ARG),
                )
                continue
            arr = tensor.as_numpy()
            if arr.ndim != 2 or arr.shape[1] != poolnet.FEATURES:
                responses[i] = pb_utils.InferenceResponse(
                    output_tensors=[],
                    error=pb_utils.TritonError(
                        f"INPUT0 must have shape [batch, {poolnet.FEATURES}], got {list(arr.shape)}",
                        pb_utils.TritonError.INVALID_ARG,
                    ),
                )
                continue
            # Copy now: input buffers are freed once execute returns (triton.md §5).
            arrays.append(np.array(arr, dtype=np.float32, copy=True))
            owners.append(i)

        if arrays:
            try:
                out = poolnet.forward_batch(self.model, np.concatenate(arrays, axis=0))
            except Exception as exc:  # one failed pass fails every request in it, not the process
                for i in owners:
                    responses[i] = pb_utils.InferenceResponse(
                        output_tensors=[], error=pb_utils.TritonError(f"poolnet forward failed: {exc}")
                    )
            else:
                start = 0
                for i, arr in zip(owners, arrays, strict=True):
                    rows = out[start : start + arr.shape[0]].astype(self.output_dtype, copy=False)
                    start += arr.shape[0]
                    responses[i] = pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("OUTPUT0", np.ascontiguousarray(rows))]
                    )
        return responses

    def finalize(self) -> None:
        self.model = None
