"""Triton model configuration: parse `config.pbtxt` and `config` overrides, normalise, validate.

Why this exists: the executor must accept, reject, print and reload configurations exactly as
Triton does (triton.md §1.4, §2.2), and the operator must be able to check a configuration it is
about to send with the same rules. Triton parses with protobuf, so we do too: the real
`model_config.proto` descriptor is vendored (`_model_config_descriptor`) and protobuf's own
text-format and JSON parsers do the parsing. Everything here is pure (no I/O, no clock).

The JSON form returned by :func:`to_json` is what `GET /v2/models/{m}/config` returns
(`ModelConfigToJson`): snake_case names, every primitive/repeated/map field printed, 64-bit ints as
JSON numbers, `priority_queue_policy` keys as strings, enums as names, unset sub-messages omitted.

Error messages follow Triton's `ValidateModelConfig` / `JsonToModelConfig` wording (reconstructed
from core `model_config_utils.cc`; only "dynamic batching preferred size must be <= max batch size"
and "Invalid config override: " are quoted in triton.md verbatim).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from google.protobuf import (
    descriptor,
    descriptor_pb2,
    descriptor_pool,
    json_format,
    message,
    message_factory,
    text_format,
)

from poolpilot.triton._model_config_descriptor import MODEL_CONFIG_FILE_DESCRIPTOR

__all__ = [
    "ModelConfigError",
    "config_from_override",
    "config_from_pbtxt",
    "normalize",
    "parse_override",
    "parse_pbtxt",
    "requires_reload",
    "to_json",
    "to_pbtxt",
    "validate",
]

_POOL: Final = descriptor_pool.DescriptorPool()
_POOL.Add(descriptor_pb2.FileDescriptorProto.FromString(MODEL_CONFIG_FILE_DESCRIPTOR))
_MODEL_CONFIG_DESC: Final = _POOL.FindMessageTypeByName("inference.ModelConfig")
_ModelConfig: Final = message_factory.GetMessageClass(_MODEL_CONFIG_DESC)

_INT64_TYPES: Final = frozenset(
    {
        descriptor.FieldDescriptor.TYPE_INT64,
        descriptor.FieldDescriptor.TYPE_UINT64,
        descriptor.FieldDescriptor.TYPE_SINT64,
        descriptor.FieldDescriptor.TYPE_FIXED64,
        descriptor.FieldDescriptor.TYPE_SFIXED64,
    }
)

# Fields whose change alone does not need a model reload (core `ConfigChangeRequiresReload`).
_IN_PLACE_FIELDS: Final = frozenset({"instance_group", "version_policy"})


class ModelConfigError(ValueError):
    """A configuration Triton would refuse; `str(err)` is Triton's message (the HTTP error body)."""


def to_pbtxt(config: Mapping[str, Any]) -> str:
    """A config in Triton's JSON form as protobuf text format (what `config.pbtxt` holds)."""
    msg = _ModelConfig()
    try:
        json_format.ParseDict(dict(config), msg)
    except json_format.ParseError as err:
        raise ModelConfigError(f"not a model configuration: {err}") from None
    return str(text_format.MessageToString(msg))


def parse_pbtxt(text: str) -> dict[str, Any]:
    """Parse protobuf text format (`config.pbtxt`) into Triton's JSON form, not yet normalised."""
    msg = _ModelConfig()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as err:
        raise ModelConfigError(f"failed to parse model configuration: {err}") from None
    return to_json(msg)


def parse_override(config_json: str) -> dict[str, Any]:
    """Parse a load `config` override the way `JsonToModelConfig` does.

    Unknown fields are rejected, lowerCamelCase names and 64-bit ints as strings are accepted,
    enum names are case-insensitive. Errors read "Invalid config override: ...".
    """
    try:
        doc = json.loads(config_json)
    except ValueError as err:
        raise ModelConfigError(f"Invalid config override: {err}") from None
    if not isinstance(doc, dict):
        raise ModelConfigError("Invalid config override: the config must be a JSON object")
    msg = _ModelConfig()
    try:
        json_format.ParseDict(_upper_enums(doc, _MODEL_CONFIG_DESC), msg, ignore_unknown_fields=False)
    except json_format.ParseError as err:
        raise ModelConfigError(f"Invalid config override: {err}") from None
    return to_json(msg)


def to_json(msg_or_doc: message.Message | Mapping[str, Any]) -> dict[str, Any]:
    """Triton's `ModelConfigToJson`: round-trip through the proto, print with Triton's conventions."""
    if isinstance(msg_or_doc, message.Message):
        msg = msg_or_doc
    else:
        msg = _ModelConfig()
        json_format.ParseDict(dict(msg_or_doc), msg, ignore_unknown_fields=False)
    raw = json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    result: dict[str, Any] = _reshape(raw, _MODEL_CONFIG_DESC)
    return result


def normalize(cfg: Mapping[str, Any], *, model_name: str, gpu_ids: Sequence[int] = (0,)) -> dict[str, Any]:
    """Triton's `NormalizeModelConfig` + `NormalizeInstanceGroup` on a JSON-form config.

    Fills the name from the directory, `version_policy` latest 1, `preferred_batch_size` =
    `[max_batch_size]` when empty (a GET therefore shows it — the trap of triton.md §1.2), pinned
    memory on, and one instance group `<model>_<n>` of count 1 on `gpu_ids` (KIND_AUTO resolves to
    GPU when `gpu_ids` is non-empty, else CPU).
    """
    out = json.loads(json.dumps(cfg))  # deep copy of plain JSON
    if not out.get("name"):
        out["name"] = model_name
    out.setdefault("version_policy", {"latest": {"num_versions": 1}})
    max_batch_size = int(out.get("max_batch_size", 0))
    dyn = out.get("dynamic_batching")
    if isinstance(dyn, dict) and not dyn.get("preferred_batch_size") and max_batch_size > 0:
        dyn["preferred_batch_size"] = [max_batch_size]
    if "ensemble_scheduling" not in out:
        opt = out.setdefault("optimization", {})
        opt.setdefault("input_pinned_memory", {"enable": True})
        opt.setdefault("output_pinned_memory", {"enable": True})
        groups = out.get("instance_group") or [{}]
        normalised_groups = []
        for index, group in enumerate(groups):
            g = dict(group)
            if not g.get("name"):
                g["name"] = f"{out['name']}_{index}"
            kind = g.get("kind", "KIND_AUTO")
            if kind == "KIND_AUTO":
                kind = "KIND_GPU" if gpu_ids else "KIND_CPU"
            g["kind"] = kind
            if int(g.get("count", 0)) < 1:
                g["count"] = 1
            if kind == "KIND_GPU" and not g.get("gpus"):
                g["gpus"] = list(gpu_ids)
            normalised_groups.append(g)
        out["instance_group"] = normalised_groups
    return to_json(out)


def validate(cfg: Mapping[str, Any], *, model_name: str) -> None:
    """Triton's `ValidateModelConfig` rules PoolPilot can hit; raises ModelConfigError."""
    name = str(cfg.get("name", ""))
    if name and name != model_name:
        raise ModelConfigError(
            f"unexpected directory name '{model_name}' for model '{name}', "
            "directory name must equal model name"
        )
    if not cfg.get("backend") and not cfg.get("platform"):
        raise ModelConfigError(f"unexpected platform type '' for {model_name}")
    max_batch_size = int(cfg.get("max_batch_size", 0))
    if max_batch_size < 0:
        raise ModelConfigError(f"'max_batch_size' must be non-negative value for {model_name}")
    for kind in ("input", "output"):
        for tensor in cfg.get(kind, []):
            if not tensor.get("name"):
                raise ModelConfigError(f"model {kind} must specify 'name' for {model_name}")
            if tensor.get("data_type", "TYPE_INVALID") == "TYPE_INVALID":
                raise ModelConfigError(f"model {kind} '{tensor['name']}' must specify 'data_type'")
            for dim in tensor.get("dims", []):
                if int(dim) < 1 and int(dim) != -1:
                    raise ModelConfigError(
                        f"model {kind} '{tensor['name']}' dimension must be integer >= 1, or -1 "
                        "to indicate a variable-size dimension"
                    )
    for group in cfg.get("instance_group", []):
        if int(group.get("count", 1)) < 1:
            raise ModelConfigError(
                f"instance group {group.get('name', '')} of model {model_name} must specify a count >= 1"
            )
    dyn = cfg.get("dynamic_batching")
    if not isinstance(dyn, Mapping):
        return
    for size in dyn.get("preferred_batch_size", []):
        if int(size) <= 0:
            raise ModelConfigError(f"dynamic batching preferred size must be positive for {model_name}")
        if int(size) > max_batch_size:
            raise ModelConfigError(
                f"dynamic batching preferred size must be <= max batch size for {model_name}"
            )
    levels = int(dyn.get("priority_levels", 0))
    policies: Mapping[str, Any] = dyn.get("priority_queue_policy", {})
    if levels != 0:
        default_level = int(dyn.get("default_priority_level", 0))
        if default_level == 0 or default_level > levels:
            raise ModelConfigError(f"default priority level must be in range [1, {levels}] for {model_name}")
        for key in policies:
            if int(key) == 0 or int(key) > levels:
                raise ModelConfigError(
                    f"priority queue policy must have priority level in range [1, {levels}] for {model_name}"
                )
    if dyn.get("preserve_ordering"):
        if levels > 1:
            raise ModelConfigError(
                f"Only one priority level is allowed when 'preserve_ordering' is true for {model_name}"
            )
        every_policy = [dyn.get("default_queue_policy", {}), *policies.values()]
        for policy in every_policy:
            if policy.get("timeout_action") == "DELAY" and int(policy.get("default_timeout_microseconds", 0)):
                raise ModelConfigError(
                    "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true "
                    f"for {model_name}"
                )


def config_from_pbtxt(text: str, *, model_name: str, gpu_ids: Sequence[int] = (0,)) -> dict[str, Any]:
    """The config Triton would serve for this `config.pbtxt` in directory `model_name`."""
    cfg = normalize(parse_pbtxt(text), model_name=model_name, gpu_ids=gpu_ids)
    validate(cfg, model_name=model_name)
    return cfg


def config_from_override(
    config_json: str, *, model_name: str, gpu_ids: Sequence[int] = (0,)
) -> dict[str, Any]:
    """The config Triton would serve after `load` with this `config` override (replaces, never merges)."""
    parsed = parse_override(config_json)
    if parsed.get("name") and parsed["name"] != model_name:
        validate(parsed, model_name=model_name)  # raises the name-mismatch error
    cfg = normalize(parsed, model_name=model_name, gpu_ids=gpu_ids)
    validate(cfg, model_name=model_name)
    return cfg


def requires_reload(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True unless the configs differ only in `instance_group` / `version_policy` (in-place update)."""
    return _without_in_place_fields(old) != _without_in_place_fields(new)


def _without_in_place_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in _IN_PLACE_FIELDS}


def _field_by_json_key(desc: descriptor.Descriptor, key: str) -> descriptor.FieldDescriptor | None:
    field = desc.fields_by_name.get(key)
    if field is not None:
        return field
    for candidate in desc.fields:
        if candidate.json_name == key:
            return candidate
    return None


def _upper_enums(value: Any, desc: descriptor.Descriptor) -> Any:
    """Upper-case enum names: Triton parses enums case-insensitively, protobuf's Python parser does not."""
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        field = _field_by_json_key(desc, key)
        if field is None:
            out[key] = item  # left for json_format to reject with its message
            continue
        out[key] = _upper_field(field, item)
    return out


def _upper_field(field: descriptor.FieldDescriptor, item: Any) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        if isinstance(item, dict):
            return {k: _upper_field_single(value_field, v) for k, v in item.items()}
        return item
    if _is_repeated(field) and isinstance(item, list):
        return [_upper_field_single(field, v) for v in item]
    return _upper_field_single(field, item)


def _upper_field_single(field: descriptor.FieldDescriptor, item: Any) -> Any:
    if field.enum_type is not None and isinstance(item, str):
        return item.upper()
    if field.message_type is not None:
        return _upper_enums(item, field.message_type)
    return item


def _is_repeated(field: descriptor.FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _reshape(raw: dict[str, Any], desc: descriptor.Descriptor) -> dict[str, Any]:
    """Order keys as declared and turn 64-bit ints back into numbers (Triton rewrites them)."""
    out: dict[str, Any] = {}
    for field in desc.fields:
        if field.name not in raw:
            continue
        item = raw[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _reshape_single(value_field, v) for k, v in item.items()}
        elif _is_repeated(field):
            out[field.name] = [_reshape_single(field, v) for v in item]
        else:
            out[field.name] = _reshape_single(field, item)
    return out


def _reshape_single(field: descriptor.FieldDescriptor, item: Any) -> Any:
    if field.message_type is not None:
        return _reshape(item, field.message_type)
    if field.type in _INT64_TYPES and isinstance(item, str):
        return int(item)
    return item
