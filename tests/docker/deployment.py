"""Reading docker/: the compose file, its services, commands and the Dockerfile.

Shared by the structure tests (no Docker needed) and the smoke tests (a
Docker engine). Plain data in, plain data out: nothing here talks to Docker.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
DOCKERFILE = DOCKER_DIR / "Dockerfile"
DOCKER_README = DOCKER_DIR / "README.md"

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}
_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}")


def load_compose() -> dict[str, Any]:
    """The compose file as data (YAML anchors and merge keys resolved)."""
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict), f"{COMPOSE_FILE}: not a mapping"
    return data


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result = compose.get("services")
    assert isinstance(result, dict) and result, f"{COMPOSE_FILE}: no services"
    return result


def interpolations(value: str) -> list[tuple[str, str, str]]:
    """The ``${...}`` references in ``value``: (name, operator, argument)."""
    return [(m["name"], m["op"] or "", m["arg"]) for m in _INTERPOLATION.finditer(value)]


def interpolate(value: str, environ: dict[str, str] | None = None) -> str:
    """``value`` as compose would expand it with ``environ`` (defaults where unset)."""
    environ = environ or {}

    def expand(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"]
        current = environ.get(name)
        if op in (":-", "-"):
            unset = current is None or (op == ":-" and current == "")
            return arg if unset else str(current)
        if op in (":?", "?"):
            if current is None or (op == ":?" and current == ""):
                raise KeyError(f"{name} is required: {arg}")
            return current
        return current or ""

    return _INTERPOLATION.sub(expand, value.replace("$$", "\0")).replace("\0", "$")


def is_sluice(service: dict[str, Any]) -> bool:
    """A service built from docker/Dockerfile (a Sluice process)."""
    build = service.get("build")
    if isinstance(build, dict):
        context = DOCKER_DIR / str(build.get("context", "."))
        return (context / str(build.get("dockerfile", "Dockerfile"))).resolve() == DOCKERFILE
    if isinstance(build, str):
        return (DOCKER_DIR / build / "Dockerfile").resolve() == DOCKERFILE
    return False


def environment(service: dict[str, Any]) -> dict[str, str]:
    """The service's ``environment`` as a mapping (list form accepted)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.partition("=") for item in env)
        return {name: value for name, _, value in pairs}
    return {str(name): "" if value is None else str(value) for name, value in env.items()}


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool

    @property
    def is_named_volume(self) -> bool:
        return not self.source.startswith(("/", ".", "~", "$"))


def mounts(service: dict[str, Any]) -> list[Mount]:
    result = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            result.append(
                Mount(entry["source"], entry["target"], bool(entry.get("read_only", False)))
            )
            continue
        parts = str(entry).split(":")
        assert len(parts) in (2, 3), f"volume {entry!r}: expected source:target[:mode]"
        mode = parts[2].split(",") if len(parts) == 3 else []
        result.append(Mount(parts[0], parts[1], "ro" in mode))
    return result


def _as_argv(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    assert isinstance(value, list), f"{where}: expected a list or a string"
    return [str(item) for item in value]


# --------------------------------------------------------------------------
# The Dockerfile


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


def dockerfile_instructions(text: str | None = None) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text() if text is None else text
    instructions: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, arguments = line.partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return instructions


def exec_form(instruction: Instruction) -> list[str]:
    """The JSON (exec) form of CMD / ENTRYPOINT; the shell form is refused."""
    value = json.loads(instruction.arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), (
        f"{instruction.keyword} must use the exec form (a JSON list of strings)"
    )
    return value


def image_command() -> tuple[list[str], list[str]]:
    """The image's (ENTRYPOINT, CMD) as argv lists (the last of each wins)."""
    entrypoint: list[str] = []
    cmd: list[str] = []
    for instruction in dockerfile_instructions():
        if instruction.keyword == "ENTRYPOINT":
            entrypoint = exec_form(instruction)
        elif instruction.keyword == "CMD":
            cmd = exec_form(instruction)
    return entrypoint, cmd


def service_argv(name: str, service: dict[str, Any]) -> list[str]:
    """What the container runs: entrypoint + command, the image's where unset."""
    image_entrypoint, image_cmd = image_command() if is_sluice(service) else ([], [])
    if "entrypoint" in service:
        entrypoint = _as_argv(service["entrypoint"], f"{name}.entrypoint")
        # Compose drops the image's CMD when the entrypoint is overridden.
        command = _as_argv(service.get("command"), f"{name}.command")
    else:
        entrypoint = image_entrypoint
        command = (
            _as_argv(service["command"], f"{name}.command") if "command" in service else image_cmd
        )
    return [*entrypoint, *command]


def worker_node_prefix(argv: list[str]) -> str | None:
    """The ``<prefix>`` of ``-n <prefix>@%h`` in a worker command line."""
    for flag in ("-n", "--hostname"):
        if flag in argv[:-1]:
            return argv[argv.index(flag) + 1].partition("@")[0]
    for item in argv:
        if item.startswith("--hostname="):
            return item.split("=", 1)[1].partition("@")[0]
    return None


def worker_queues(argv: list[str]) -> list[str]:
    """The queues of ``-Q a,b`` in a worker command line."""
    for flag in ("-Q", "--queues"):
        if flag in argv[:-1]:
            return argv[argv.index(flag) + 1].split(",")
    for item in argv:
        if item.startswith("--queues="):
            return item.split("=", 1)[1].split(",")
    return []


def worker_services(compose: dict[str, Any]) -> dict[str, list[str]]:
    """Every service running ``celery -A tasks worker``, with its argv."""
    result = {}
    for name, service in services(compose).items():
        if not is_sluice(service):
            continue
        argv = service_argv(name, service)
        if argv[:4] == ["celery", "-A", "tasks", "worker"]:
            result[name] = argv
    return result
