"""A corpus on disk: a manifest, the scenario it was recorded on, and content-addressed
blobs (files and world snapshots), each stored once however many entries share it.

    CORPUS/manifest.json
    CORPUS/scenario.toml          the scenario as recorded (the world snapshots fit it)
    CORPUS/blobs/<sha256>         file contents and world snapshots
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

CORPUS_FORMAT = 1
MANIFEST = "manifest.json"
SCENARIO = "scenario.toml"


class CorpusError(UsageError, ValueError):
    """A corpus that cannot be read. Names the file and the field at fault."""

    def __init__(self, path: Path | str, field_name: str, problem: str) -> None:
        self.path, self.field = str(path), field_name
        super().__init__(f"{path}: {field_name}: {problem}")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class CorpusEntry:
    id: str  # the first kill point that left this state
    kill_points: list[str]  # every kill point that left exactly this state (files + world)
    category: str
    format_version: Any  # the "version" of the checkpoint.json files, if they have one
    files: dict[str, str | None]  # path -> blob sha256, None for a directory
    world: str  # blob sha256 of the world snapshot (JSON)


@dataclass
class Corpus:
    path: Path
    scenario_id: str
    scenario_sha256: str
    agent: str  # the factory a check runs by default: the project's current agent
    recorded_by: str  # the factory that wrote the entries (an older release, or the same)
    agent_version: str
    format_versions: list[Any]
    faultsim_version: str
    entries: list[CorpusEntry] = field(default_factory=list)

    # -- writing ---------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        digest = sha256(data)
        target = self.path / "blobs" / digest
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(target)
        return digest

    def write_manifest(self) -> None:
        data = {"faultsim_corpus": CORPUS_FORMAT, "scenario": {"id": self.scenario_id,
                                                              "sha256": self.scenario_sha256},
                "agent": self.agent, "recorded_by": self.recorded_by,
                "agent_version": self.agent_version, "format_versions": self.format_versions,
                "faultsim_version": self.faultsim_version,
                "entries": [asdict(e) for e in self.entries]}
        tmp = self.path / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        tmp.replace(self.path / MANIFEST)

    # -- reading ---------------------------------------------------------------------------
    def blob(self, digest: str) -> bytes:
        path = self.path / "blobs" / digest
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CorpusError(path, "(blob)", "missing from the corpus") from None
        if sha256(data) != digest:
            raise CorpusError(path, "(blob)", "its content does not match its sha256 name")
        return data

    @property
    def scenario_path(self) -> Path:
        return self.path / SCENARIO

    @classmethod
    def open(cls, path: str | Path) -> "Corpus":
        path = Path(path)
        manifest = path / MANIFEST
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CorpusError(manifest, "(file)", "no manifest: not a faultsim corpus") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise CorpusError(manifest, "(file)", f"not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise CorpusError(manifest, "(top level)", "expected a JSON object")
        if data.get("faultsim_corpus") != CORPUS_FORMAT:
            raise CorpusError(manifest, "faultsim_corpus", f"expected {CORPUS_FORMAT}, got "
                              f"{data.get('faultsim_corpus')!r}: a corpus format this "
                              "faultsim does not read")

        def need(obj: dict, key: str, kind: type, where: str) -> Any:
            if not isinstance(obj.get(key), kind):
                raise CorpusError(manifest, f"{where}{key}", f"expected {kind.__name__}, got "
                                  f"{type(obj.get(key)).__name__}")
            return obj[key]

        scenario = need(data, "scenario", dict, "")
        entries = []
        for i, raw in enumerate(need(data, "entries", list, "")):
            at = f"entries[{i}]."
            if not isinstance(raw, dict):
                raise CorpusError(manifest, f"entries[{i}]", "expected an object")
            files = need(raw, "files", dict, at)
            for p, digest in files.items():
                if digest is not None and not isinstance(digest, str):
                    raise CorpusError(manifest, f"{at}files[{p!r}]", "expected a sha256 or null")
            entries.append(CorpusEntry(
                id=need(raw, "id", str, at), kill_points=need(raw, "kill_points", list, at),
                category=need(raw, "category", str, at),
                format_version=raw.get("format_version"), files=files,
                world=need(raw, "world", str, at)))
        corpus = cls(path, need(scenario, "id", str, "scenario."),
                     need(scenario, "sha256", str, "scenario."), need(data, "agent", str, ""),
                     need(data, "recorded_by", str, ""), str(data.get("agent_version")),
                     list(data.get("format_versions") or []),
                     str(data.get("faultsim_version")), entries)
        if not corpus.scenario_path.is_file():
            raise CorpusError(corpus.scenario_path, "(file)", "the recorded scenario is missing")
        if sha256(corpus.scenario_path.read_bytes()) != corpus.scenario_sha256:
            raise CorpusError(corpus.scenario_path, "(file)", "changed since it was recorded "
                              "(its sha256 differs from the manifest's)")
        return corpus
