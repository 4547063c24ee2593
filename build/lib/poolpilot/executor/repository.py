"""The model repository manager: load (with `config` override), reload, unload, index.

Reload semantics follow Triton's core (triton.md §2.2–2.3):
- only `instance_group` / `version_policy` changed ⇒ in-place update of the running model;
- any other change ⇒ the new model is built and its instances initialised while the old one keeps
  serving; then new requests go to the new model and the old one DRAINS: its queued and in-flight
  requests finish on it, exactly like Triton, where each request holds a `shared_ptr` to the model
  it was enqueued on. (Moving queued requests to the new batcher would be the alternative; we do
  not, because Triton does not, and because the new config may reject them, e.g. a smaller
  max_batch_size.) A failed load leaves the old model serving and returns the error;
- an override persists across a later plain `load` unless `config.pbtxt` is newer (mtime);
- statistics live in the model object, so they reset on a full reload; Prometheus counters are keyed
  by (model, version) labels in the registry and keep counting.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolpilot.executor.backends import BackendError, make_backend
from poolpilot.executor.metrics import BusyTracker, MetricsRegistry
from poolpilot.executor.model import LoadedModel, instance_count
from poolpilot.triton.config import ModelConfigError, config_from_override, config_from_pbtxt, requires_reload

log = logging.getLogger("poolpilot.executor")

CONTROL_DISABLED_MESSAGE = "explicit model load / unload is not allowed if polling is enabled"


class RepositoryError(Exception):
    """A repository or model-control failure with Triton's message and HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Entry:
    name: str
    model: LoadedModel | None = None
    state: str = ""
    reason: str = ""
    override: dict[str, Any] | None = None
    override_wall_s: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Repository:
    """All models of one `--model-repository` directory and their lifecycle."""

    def __init__(self, root: Path, *, metrics: MetricsRegistry, busy: BusyTracker, explicit: bool) -> None:
        self.root = root
        self.explicit = explicit
        self._metrics = metrics
        self._busy = busy
        self._entries: dict[str, _Entry] = {}
        self._draining: set[LoadedModel] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- queries ---------------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        """Model directories in the repository (a directory holding a config.pbtxt or a version dir)."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def live_models(self) -> list[LoadedModel]:
        """Serving and draining models (for gauges: pending count, GPU memory)."""
        serving = [e.model for e in self._entries.values() if e.model is not None]
        return serving + list(self._draining)

    def ready_models(self) -> list[LoadedModel]:
        return [e.model for e in self._entries.values() if e.model is not None and e.state == "READY"]

    def get(self, name: str, version: str = "") -> LoadedModel:
        """The READY model for a request; Triton's errors when unknown or not ready."""
        entry = self._entries.get(name)
        if entry is None or entry.model is None:
            raise RepositoryError(f"Request for unknown model: '{name}' is not found", 404)
        if version and version != entry.model.version:
            raise RepositoryError(f"Request for unknown model: '{name}' version {version} is not found", 404)
        return entry.model

    def is_failed(self) -> bool:
        """Some model failed its last load and serves nothing (for strict readiness)."""
        return any(
            e.model is None and e.state == "UNAVAILABLE" and e.reason != "unloaded"
            for e in self._entries.values()
        )

    def index(self, ready_only: bool) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for name in sorted(set(self.model_names()) | set(self._entries)):
            entry = self._entries.get(name)
            if entry is None or not entry.state:
                if not ready_only:
                    out.append({"name": name})
                continue
            if ready_only and entry.state != "READY":
                continue
            version = entry.model.version if entry.model is not None else self._latest_version_or_blank(name)
            out.append({"name": name, "version": version, "state": entry.state, "reason": entry.reason})
        return out

    # -- control ---------------------------------------------------------------------------------
    async def load(self, name: str, config_override: str | None = None, *, startup: bool = False) -> None:
        """Load or reload `name`; returns when serving (or raises RepositoryError, old model kept)."""
        if not startup and not self.explicit:
            raise RepositoryError(CONTROL_DISABLED_MESSAGE, 503)
        model_dir = self.root / name
        if not model_dir.is_dir() and name not in self._entries:
            raise RepositoryError(f"failed to load '{name}', failed to poll from model repository", 400)
        entry = self._entries.setdefault(name, _Entry(name))
        async with entry.lock:
            if not model_dir.is_dir():
                raise RepositoryError(f"failed to load '{name}', failed to poll from model repository", 400)
            try:
                config, new_override = self._resolve_config(entry, model_dir, config_override)
            except ModelConfigError as exc:
                self._mark_failed(entry, str(exc))
                raise RepositoryError(str(exc), 400) from None
            old = entry.model
            if old is not None and not requires_reload(old.config, config):
                await old.set_instances(instance_count(config))
                old.config = config
                self._remember(entry, new_override, config_override)
                log.info("model %s: instance group updated in place (%d instances)", name, old.instances)
                return
            version = self._latest_version(name)
            if old is None:
                entry.state, entry.reason = "LOADING", ""
            try:
                backend = make_backend(config, repository=self.root, model_name=name, version=version)
                model = LoadedModel(
                    name=name,
                    version=version,
                    config=config,
                    backend=backend,
                    metrics=self._metrics,
                    busy=self._busy,
                )
                await model.start()
            except BackendError as exc:
                self._mark_failed(entry, str(exc))
                raise RepositoryError(str(exc), exc.status) from None
            except ValueError as exc:  # settings the shared batcher refuses
                self._mark_failed(entry, str(exc))
                raise RepositoryError(str(exc), 400) from None
            self._metrics.ensure(model.labels)
            entry.model, entry.state, entry.reason = model, "READY", ""
            self._remember(entry, new_override, config_override)
            if old is not None:
                self._retire(old, forget_metrics=old.labels != model.labels)
            log.info("model %s version %s: %s", name, version, "reloaded" if old else "loaded")

    async def unload(self, name: str) -> None:
        if not self.explicit:
            raise RepositoryError(CONTROL_DISABLED_MESSAGE, 503)
        entry = self._entries.get(name)
        if entry is None or entry.model is None:
            return
        async with entry.lock:
            old = entry.model
            if old is None:
                return
            entry.model, entry.state, entry.reason = None, "UNAVAILABLE", "unloaded"
            self._retire(old, forget_metrics=True)

    async def close(self) -> None:
        for entry in self._entries.values():
            if entry.model is not None:
                self._retire(entry.model, forget_metrics=False)
                entry.model = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- helpers ---------------------------------------------------------------------------------
    def _resolve_config(
        self, entry: _Entry, model_dir: Path, config_override: str | None
    ) -> tuple[dict[str, Any], bool]:
        """The config to load and whether it comes from an override (new or persisted)."""
        if config_override is not None:
            return config_from_override(config_override, model_name=entry.name), True
        pbtxt = model_dir / "config.pbtxt"
        if entry.override is not None and (
            not pbtxt.exists() or pbtxt.stat().st_mtime <= entry.override_wall_s
        ):
            return entry.override, True
        try:
            text = pbtxt.read_text()
        except OSError as exc:
            raise ModelConfigError(f"failed to open text file for read {pbtxt}: {exc.strerror}") from None
        return config_from_pbtxt(text, model_name=entry.name), False

    def _remember(self, entry: _Entry, from_override: bool, config_override: str | None) -> None:
        if config_override is not None and entry.model is not None:
            entry.override = json.loads(json.dumps(entry.model.config))
            entry.override_wall_s = time.time()
        elif not from_override:
            entry.override = None

    def _mark_failed(self, entry: _Entry, reason: str) -> None:
        if entry.model is None:
            entry.state, entry.reason = "UNAVAILABLE", reason

    def _retire(self, old: LoadedModel, *, forget_metrics: bool) -> None:
        self._draining.add(old)

        async def drain() -> None:
            try:
                await old.drain_and_stop()
            finally:
                self._draining.discard(old)
                if forget_metrics and not any(m.labels == old.labels for m in self.live_models()):
                    self._metrics.forget(old.labels)

        task = asyncio.create_task(drain(), name=f"drain-{old.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _latest_version(self, name: str) -> str:
        version = self._latest_version_or_blank(name)
        if not version:
            raise RepositoryError(
                f"at least one version must be available under the version policy of model '{name}'", 400
            )
        return version

    def _latest_version_or_blank(self, name: str) -> str:
        model_dir = self.root / name
        versions = (
            [int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
            if (model_dir.is_dir())
            else []
        )
        return str(max(versions)) if versions else ""
