"""State and rules of the registry emulator, without HTTP.

Every mutating call rewrites the JSON data file atomically (temp file +
``os.replace``), so schema ids and versions survive a restart. Methods return
the JSON bodies the Confluent REST API returns and raise ``RegistryApiError``
with Confluent's error codes.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import uuid
from dataclasses import dataclass, field

from router.devstack.exceptions import RegistryApiError, RegistryStoreError
from router.devstack.registry_compat import LEVELS, ParsedSchema, SchemaInvalid, compatibility_problems, parse_schema
from router.jsonfile import write_json_atomic

DEFAULT_LEVEL = "BACKWARD"
_GUID_NAMESPACE = uuid.UUID("5f0c64a4-3c0e-4d7b-9a57-4a1f3f0f6c11")


def _err(status: int, code: int, message: str) -> RegistryApiError:
    return RegistryApiError(status, code, message)


def subject_not_found(subject: str) -> RegistryApiError:
    return _err(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: object) -> RegistryApiError:
    return _err(404, 40402, f"Version {version} not found for subject '{subject}'.")


def schema_not_found(detail: str = "Schema not found") -> RegistryApiError:
    return _err(404, 40403, detail)


@dataclass
class _Version:
    version: int
    id: int
    deleted: bool = False


@dataclass
class RegistryState:
    schemas: dict[int, dict] = field(default_factory=dict)
    subjects: dict[str, list[_Version]] = field(default_factory=dict)
    global_level: str = DEFAULT_LEVEL
    subject_levels: dict[str, str] = field(default_factory=dict)
    next_id: int = 1

    def to_json(self) -> dict:
        return {
            "format": 1,
            "next_id": self.next_id,
            "schemas": {str(k): v for k, v in self.schemas.items()},
            "subjects": {s: [vars(v) for v in vs] for s, vs in self.subjects.items()},
            "config": {"global": self.global_level, "subjects": self.subject_levels},
        }

    @classmethod
    def from_json(cls, data: dict) -> RegistryState:
        return cls(
            schemas={int(k): v for k, v in data.get("schemas", {}).items()},
            subjects={s: [_Version(**v) for v in vs] for s, vs in data.get("subjects", {}).items()},
            global_level=data.get("config", {}).get("global", DEFAULT_LEVEL),
            subject_levels=dict(data.get("config", {}).get("subjects", {})),
            next_id=int(data.get("next_id", 1)),
        )


class RegistryStore:
    """Thread-safe subjects / versions / ids / config, persisted to ``data_file``."""

    def __init__(self, data_file: str | None = None) -> None:
        self.data_file = data_file
        self._lock = threading.RLock()
        self.state = RegistryState()
        if data_file and os.path.exists(data_file):
            with open(data_file, encoding="utf-8") as fh:
                self.state = RegistryState.from_json(json.load(fh))
        self._parsed_cache: dict[int, ParsedSchema] = {}
        self._by_identity = {self._identity(sid): sid for sid in self.state.schemas}

    # -- persistence -------------------------------------------------------
    def _identity(self, schema_id: int) -> str:
        refs = self.state.schemas[schema_id].get("references", [])
        return self._parsed(schema_id).identity + "|" + json.dumps(refs, sort_keys=True)

    def _save(self) -> None:
        if not self.data_file:
            return
        try:
            # atomic against a crashed or killed process; no fsync: a dev store
            # need not survive power loss, and fsync cut registrations to ~100/s
            write_json_atomic(self.data_file, self.state.to_json(), private=True, indent=1, sort_keys=True)
        except OSError as exc:
            raise RegistryStoreError(500, 50001, f"Error in the backend data store: {exc}") from exc

    # -- helpers -----------------------------------------------------------
    def _parse(self, body: dict) -> tuple[ParsedSchema, list]:
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise _err(422, 42201, "Invalid schema: request body needs a 'schema' string")
        refs = list(body.get("references") or [])
        kind = body.get("schemaType") or "AVRO"
        with self._lock:
            texts = self._reference_texts(refs) if kind == "PROTOBUF" else ()
        try:
            parsed = parse_schema(body["schema"], kind, texts)
        except SchemaInvalid as exc:
            raise _err(422, 42201, f"Invalid schema {exc}") from exc
        return parsed, refs

    def _reference_texts(self, refs: list, depth: int = 0) -> list[tuple[str, str]]:
        """(import name, schema text) of the references and theirs, dependencies first."""
        if depth > 32:
            raise _err(422, 42201, "Invalid schema: references nested too deeply")
        out: list[tuple[str, str]] = []
        for ref in refs:
            try:
                v = self._version(ref["subject"], ref.get("version", "latest"))
            except (KeyError, TypeError):
                raise _err(422, 42201, f"Invalid schema: bad reference {ref!r}") from None
            except RegistryApiError:
                raise _err(422, 42201, f"Invalid schema: reference {ref.get('name')!r} names "
                           f"{ref.get('subject')!r} version {ref.get('version')}, which does not exist") from None
            rec = self.state.schemas[v.id]
            out += self._reference_texts(rec.get("references") or [], depth + 1)
            out.append((ref.get("name") or ref["subject"], rec["schema"]))
        return out

    def _versions(self, subject: str, deleted: bool = False) -> list[_Version]:
        versions = [v for v in self.state.subjects.get(subject, []) if deleted or not v.deleted]
        if not versions:
            raise subject_not_found(subject)
        return versions

    def _version(self, subject: str, version: str | int, deleted: bool = False) -> _Version:
        versions = self._versions(subject, deleted)
        if version in ("latest", "-1", -1):
            return versions[-1]
        try:
            number = int(version)
        except (TypeError, ValueError):
            number = 0
        if number < 1:
            raise _err(422, 42202, "The specified version '%s' is not a valid version id. Allowed values are "
                       "between [1, 2^31-1] and the string \"latest\"" % version)
        for v in versions:
            if v.version == number:
                return v
        raise version_not_found(subject, version)

    def _schema_body(self, schema_id: int) -> dict:
        rec = self.state.schemas[schema_id]
        body = {"schema": rec["schema"]}
        if rec.get("schemaType", "AVRO") != "AVRO":
            body["schemaType"] = rec["schemaType"]
        if rec.get("references"):
            body["references"] = rec["references"]
        return body

    def _parsed(self, schema_id: int) -> ParsedSchema:
        parsed = self._parsed_cache.get(schema_id)
        if parsed is None:
            rec = self.state.schemas[schema_id]
            kind = rec.get("schemaType", "AVRO")
            texts = self._reference_texts(rec.get("references") or []) if kind == "PROTOBUF" else ()
            parsed = self._parsed_cache[schema_id] = parse_schema(rec["schema"], kind, texts)
        return parsed

    def _version_body(self, subject: str, v: _Version) -> dict:
        return {"subject": subject, "version": v.version, "id": v.id,
                "guid": self.guid(v.id), **self._schema_body(v.id)}

    def guid(self, schema_id: int) -> str:
        return str(uuid.uuid5(_GUID_NAMESPACE, str(schema_id)))

    def level(self, subject: str | None = None) -> str:
        return self.state.subject_levels.get(subject, self.state.global_level) if subject else self.state.global_level

    # -- subjects and versions ----------------------------------------------
    def register(self, subject: str, body: dict) -> dict:
        parsed, refs = self._parse(body)
        key = parsed.identity + "|" + json.dumps(refs, sort_keys=True)
        with self._lock:
            schema_id = self._by_identity.get(key)
            live = [v for v in self.state.subjects.get(subject, []) if not v.deleted]
            for v in live:
                if v.id == schema_id:
                    return {"id": schema_id, "guid": self.guid(schema_id)}
            level = self.level(subject)
            problems = compatibility_problems(level, parsed, [self._parsed(v.id) for v in live]) if live else []
            if problems:
                raise _err(409, 409, f"Schema being registered is incompatible with an earlier schema for "
                           f"subject \"{subject}\", details: {problems}")
            if schema_id is None:
                schema_id = self.state.next_id
                self.state.next_id += 1
                self.state.schemas[schema_id] = {"schema": parsed.canonical, "schemaType": parsed.schema_type,
                                                 "references": refs}
                self._by_identity[key] = schema_id
            versions = self.state.subjects.setdefault(subject, [])
            versions.append(_Version(max((v.version for v in versions), default=0) + 1, schema_id))
            self._save()
            return {"id": schema_id, "guid": self.guid(schema_id)}

    def lookup(self, subject: str, body: dict, deleted: bool = False) -> dict:
        parsed, refs = self._parse(body)
        key = parsed.identity + "|" + json.dumps(refs, sort_keys=True)
        with self._lock:
            versions = self._versions(subject, deleted)
            schema_id = self._by_identity.get(key)
            for v in versions:
                if v.id == schema_id:
                    return self._version_body(subject, v)
            raise schema_not_found()

    def subjects(self, deleted: bool = False) -> list[str]:
        with self._lock:
            return sorted(s for s, vs in self.state.subjects.items() if any(deleted or not v.deleted for v in vs))

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        with self._lock:
            return [v.version for v in self._versions(subject, deleted)]

    def get_version(self, subject: str, version: str, deleted: bool = False) -> dict:
        with self._lock:
            return self._version_body(subject, self._version(subject, version, deleted))

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        with self._lock:
            versions = self.state.subjects.get(subject)
            if not versions:
                raise subject_not_found(subject)
            if permanent:
                if any(not v.deleted for v in versions):
                    raise _err(404, 40405, f"Subject '{subject}' was not deleted first before being "
                               "permanently deleted")
                del self.state.subjects[subject]
                self.state.subject_levels.pop(subject, None)
                self._save()
                return [v.version for v in versions]
            live = [v for v in versions if not v.deleted]
            if not live:
                raise subject_not_found(subject)
            for v in live:
                v.deleted = True
            self._save()
            return [v.version for v in live]

    def delete_version(self, subject: str, version: str, permanent: bool = False) -> int:
        with self._lock:
            v = self._version(subject, version, deleted=permanent)
            if permanent:
                if not v.deleted:
                    raise _err(404, 40407, f"Subject '{subject}' Version {v.version} was not deleted first "
                               "before being permanently deleted")
                self.state.subjects[subject].remove(v)
                if not self.state.subjects[subject]:
                    del self.state.subjects[subject]
            else:
                v.deleted = True
            self._save()
            return v.version

    # -- schemas by id -----------------------------------------------------
    def schema_by_id(self, schema_id: str, fmt: str | None = None) -> dict:
        """``fmt="serialized"``: a Protobuf schema as its base64 FileDescriptorProto (as Confluent's)."""
        with self._lock:
            sid = self._schema_id(schema_id)
            body = {**self._schema_body(sid), "guid": self.guid(sid)}
            if fmt == "serialized" and body.get("schemaType") == "PROTOBUF":
                body["schema"] = base64.b64encode(self._parsed(sid).parsed.file.serialized_pb).decode()
            return body

    def schema_by_guid(self, guid: str) -> dict:
        with self._lock:
            for sid in self.state.schemas:
                if self.guid(sid) == guid:
                    return {**self._schema_body(sid), "id": sid, "guid": guid}
            raise schema_not_found(f"Schema {guid} not found")

    def _schema_id(self, schema_id: str) -> int:
        try:
            sid = int(schema_id)
        except ValueError:
            sid = -1
        if sid not in self.state.schemas:
            raise schema_not_found(f"Schema {schema_id} not found")
        return sid

    def id_versions(self, schema_id: str, deleted: bool = False) -> list[dict]:
        with self._lock:
            sid = self._schema_id(schema_id)
            return [{"subject": s, "version": v.version} for s, vs in sorted(self.state.subjects.items())
                    for v in vs if v.id == sid and (deleted or not v.deleted)]

    def id_subjects(self, schema_id: str, deleted: bool = False) -> list[str]:
        return sorted({row["subject"] for row in self.id_versions(schema_id, deleted)})

    # -- compatibility and config -----------------------------------------
    def test_compatibility(self, subject: str, version: str | None, body: dict, verbose: bool) -> dict:
        parsed, _ = self._parse(body)
        with self._lock:
            level = self.level(subject)
            if version is None:
                live = self.state.subjects.get(subject, [])
                previous = [self._parsed(v.id) for v in live if not v.deleted]
            else:
                if subject not in self.state.subjects:
                    raise subject_not_found(subject)
                # one version only, whatever the level (as Confluent's server does): a client
                # checking a *_TRANSITIVE level asks once per version
                target = self._version(subject, version)
                previous = [self._parsed(target.id)]
            # the per-version endpoint answers for that version alone: like Confluent's server, its
            # messages do not name it (the client asking knows which version it asked about)
            labels = None if version is None else [""]
            problems = compatibility_problems(level, parsed, previous, labels) if previous else []
        result: dict = {"is_compatible": not problems}
        if verbose:
            result["messages"] = problems
        return result

    def get_config(self, subject: str | None, default_to_global: bool = False) -> dict:
        with self._lock:
            if subject is None:
                return {"compatibilityLevel": self.state.global_level}
            if subject in self.state.subject_levels:
                return {"compatibilityLevel": self.state.subject_levels[subject]}
            if default_to_global:
                return {"compatibilityLevel": self.state.global_level}
            raise _err(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")

    def set_config(self, subject: str | None, body: dict) -> dict:
        level = body.get("compatibility") or body.get("compatibilityLevel") if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise _err(422, 42203, "Invalid compatibility level. Valid values are none, backward, forward, full, "
                       "backward_transitive, forward_transitive, and full_transitive")
        level = level.upper()
        with self._lock:
            if subject is None:
                self.state.global_level = level
            else:
                self.state.subject_levels[subject] = level
            self._save()
        return {"compatibility": level}

    def delete_config(self, subject: str | None) -> dict:
        with self._lock:
            if subject is None:
                previous, self.state.global_level = self.state.global_level, DEFAULT_LEVEL
            else:
                if subject not in self.state.subject_levels and subject not in self.state.subjects:
                    raise subject_not_found(subject)
                previous = self.state.subject_levels.pop(subject, self.state.global_level)
            self._save()
        return {"compatibilityLevel": previous}
