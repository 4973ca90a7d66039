"""Which installed files make up icerouter's environment: its requirements walked through the
installed distributions' metadata, and icerouter's own packages.

Nothing is downloaded and nothing is built: what the packing machine has installed (and imports)
is what the cluster gets, so the archive runs the same code as the driver that packed it.
Requirements are read the way pip resolved them: each distribution's `Requires-Dist` with its
environment markers evaluated for this interpreter and platform, extras followed where a
requirement asks for them (`confluent-kafka[avro,schemaregistry]`), none of icerouter's own
extras (`local`, `test`: the job never imports them).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import import_module, metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from router.exceptions import ConfigError

ROOT_DISTRIBUTION = "icerouter"
#: the product's top-level packages (pyproject.toml: packages.find include)
OWN_PACKAGES = ("router", "registry", "evolution")
#: left out by default: a cluster's Spark puts its own pyspark.zip and py4j on every Python
#: worker's PYTHONPATH, matching its JVM (a pip pyspark is ~500 MB of jars the executors never load)
SPARK_PROVIDED = ("pyspark", "py4j")


class PackError(ConfigError):
    """The environment cannot be packed: a required distribution is missing or does not match,
    or the archive cannot be written where asked."""

    def __str__(self) -> str:  # the message names what is wrong; no context tail
        return self.message


@dataclass(frozen=True)
class OwnSource:
    """icerouter's packages as imported here: from an installed distribution, or from a source tree
    (an editable install, or a checkout on sys.path) whose pyproject.toml gives the requirements."""

    packages: tuple[Path, ...]
    version: str
    requires: tuple[str, ...]
    installed: metadata.Distribution | None  # copied from its RECORD when the imports resolve to it


@dataclass
class Environment:
    """What goes into site-packages: distributions by canonical name, and icerouter itself."""

    own: OwnSource
    distributions: dict[str, metadata.Distribution] = field(default_factory=dict)
    excluded: tuple[str, ...] = ()

    def names(self) -> list[str]:
        return sorted(f"{d.metadata['Name']}=={d.version}" for d in self.distributions.values())


def own_source() -> OwnSource:
    """Where router/, registry/ and evolution/ are imported from, and icerouter's requirements."""
    packages = tuple(Path(import_module(name).__file__).resolve().parent for name in OWN_PACKAGES)
    try:
        installed = metadata.distribution(ROOT_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        installed = None
    if installed is not None and _is_wheel_install(installed) and _imports_resolve_to(installed,
                                                                                      packages[0] / "__init__.py"):
        return OwnSource(packages, installed.version, tuple(installed.requires or ()), installed)
    # editable (or a checkout first on sys.path): the source tree's own declaration is the truth
    # for the code being packed; the installed metadata may be another checkout's
    pyproject = packages[0].parent / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == ROOT_DISTRIBUTION:
            return OwnSource(packages, str(project.get("version", "0")), tuple(project.get("dependencies", ())), None)
    if installed is not None:
        return OwnSource(packages, installed.version, tuple(installed.requires or ()), None)
    raise PackError(f"{ROOT_DISTRIBUTION}'s requirements are unknown: router is imported from {packages[0]}, "
                    f"which has no pyproject.toml beside it, and no {ROOT_DISTRIBUTION} distribution is installed")


def _is_wheel_install(dist: metadata.Distribution) -> bool:
    """Installed by pip from a wheel (a dist-info with a RECORD), not a source tree's own egg-info
    (`setup.py develop` / a checkout's icerouter.egg-info found through the working directory), whose
    SOURCES.txt lists the tree's files rather than an installed package."""
    return dist.read_text("RECORD") is not None


def _imports_resolve_to(dist: metadata.Distribution, init: Path) -> bool:
    for path in dist.files or ():
        if path.parts[-2:] == ("router", "__init__.py"):
            return Path(dist.locate_file(path)).resolve() == init
    return False


def resolve(include_spark: bool = False) -> Environment:
    """icerouter's lean requirements, transitively, as installed distributions."""
    own = own_source()
    excluded = () if include_spark else SPARK_PROVIDED
    env = Environment(own, excluded=excluded)
    if own.installed is not None:
        env.distributions[canonicalize_name(ROOT_DISTRIBUTION)] = own.installed
    extras_seen: dict[str, frozenset[str]] = {}
    queue = [(_parse(text, ROOT_DISTRIBUTION), ROOT_DISTRIBUTION) for text in own.requires]
    queue = [(req, by) for req, by in queue if _applies(req, frozenset())]
    while queue:
        req, by = queue.pop(0)
        key = canonicalize_name(req.name)
        if key in excluded:
            continue
        extras = frozenset(canonicalize_name(e) for e in req.extras)
        seen = extras_seen.get(key)
        if seen is not None and extras <= seen:
            continue
        dist = env.distributions.get(key) or _installed(req, by)
        env.distributions[key] = dist
        extras_seen[key] = wanted = (seen or frozenset()) | extras
        for text in dist.requires or ():
            sub = _parse(text, dist.metadata["Name"])
            if _applies(sub, wanted):
                queue.append((sub, dist.metadata["Name"]))
    return env


def _parse(text: str, by: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise PackError(f"{by} declares a requirement that cannot be read: {text!r} ({exc})") from None


def _applies(req: Requirement, extras: frozenset[str]) -> bool:
    """The requirement's marker on this interpreter and platform, for no extra or one of `extras`."""
    if req.marker is None:
        return True
    env = default_environment()
    return any(req.marker.evaluate({**env, "extra": extra}) for extra in ("", *sorted(extras)))


def _installed(req: Requirement, by: str) -> metadata.Distribution:
    try:
        dist = metadata.distribution(req.name)
    except metadata.PackageNotFoundError:
        raise PackError(f"{req.name} is not installed here ({by} requires {req}): install icerouter's "
                        "requirements (pip install icerouter) before packing") from None
    if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
        raise PackError(f"{req.name} {dist.version} is installed, but {by} requires {req}: "
                        "the archive would not match what the job was built against")
    return dist
