"""Playbook steps: a ``.yaml``/``.yml`` step is run with ``ansible-playbook``.

What a playbook sees (``docs/ansible.md``) is written once per build into
the workspace's ``ansible/`` folder by :meth:`AnsibleSetup.prepare`:

* ``inventory/hosts.yaml``: one host per node, named as in the nodeset,
  with ``ansible_host``/``ansible_port``/``ansible_user`` from the node's
  ``connection`` and a ``nodepool`` hostvar; groups when nodes name them.
  The job's vars are the ``all`` group's vars, as in Zuul: host and play
  vars may override them.
  ``localhost`` is Ansible's implicit one (the executor, inside the
  sandbox; not a member of ``all``, as in Zuul), with its variables in
  ``inventory/host_vars/localhost.yaml``.
* extra vars (above everything else), in this order (the last wins): the
  step's secrets (its ``SLUICE_SECRETS_FILE``, by the names the job binds
  them to) and ``zuul.json`` (``zuul``, :func:`zuul_vars`).
* ``ansible.cfg``: our stdout callback (``ansible_plugins/callback``) and
  ``zuul_return`` (``ansible_plugins/action``, which merges a task's data
  into the result file; ``SLUICE_RESULT_DATA_LIMIT`` tells it the limit),
  no retry files, no cows, no colours, ``ANSIBLE_HOME`` and the local tmp
  in the workspace, host key checking off (nodes are fresh), SSH
  pipelining and ControlMaster.

With a node key, an ``ssh-agent`` holding it serves the build
(:mod:`workers.executor.sshagent`); :meth:`AnsibleSetup.close` stops it,
whatever happened (a worker killed with SIGKILL takes it along).
``ansible-playbook`` exits 4 when a host was unreachable (and when a
playbook does not parse: our callback records the unreachable hosts to
tell them apart, :meth:`AnsibleSetup.host_unreachable`): the runner makes
that a ``RETRY`` (Zuul retries unreachable nodes); any other non-zero exit
is a failed step.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scheduler.model.artifacts import change_numbers
from scheduler.wire.build_spec import BuildSpec
from workers.executor.environment import DEFAULT_RESULT_DATA_LIMIT, job_vars
from workers.executor.errors import WorkspaceError
from workers.executor.sshagent import SshAgent, make_socket_folder, remove_socket_folder
from workers.executor.workspace import PLAYBOOK_SUFFIXES, BuildLayout
from workers.merger.cache import readable_by_all

PLUGINS_DIR = Path(__file__).with_name("ansible_plugins")
CALLBACK_DIR = PLUGINS_DIR / "callback"
CALLBACK_NAME = "sluice_log"
# ansible-playbook's exit code when a host could not be reached
UNREACHABLE_EXIT = 4


def is_playbook(path: str) -> bool:
    return path.endswith(PLAYBOOK_SUFFIXES)


def ansible_playbook() -> Path:
    """The ``ansible-playbook`` of the interpreter running the executor."""
    found = Path(sys.executable).with_name("ansible-playbook")
    if not found.is_file():
        raise WorkspaceError(f"{found} is missing: install ansible-core beside Sluice")
    return found


def project_vars(name: str, checkout: str | None = None) -> dict[str, Any]:
    """A project as Zuul names it (no canonical hostname here: the name is canonical)."""
    found = {
        "name": name,
        "short_name": name.rsplit("/", 1)[-1],
        "canonical_name": name,
        "src_dir": f"src/{name}",
    }
    return found if checkout is None else {**found, "checkout": checkout}


def zuul_vars(spec: BuildSpec, layout: BuildLayout, chosen: Mapping[str, str]) -> dict[str, Any]:
    """The ``zuul`` variable: Zuul's names for what the job and its build's context know."""
    job, context = spec.job, spec.context
    found: dict[str, Any] = {
        "tenant": context.tenant,
        "pipeline": job.pipeline,
        "job": job.name,
        "build": context.build_uuid,
        "branch": job.branch,
        "ref": context.ref,
        "project": project_vars(job.project),
        "projects": {name: project_vars(name, chosen.get(name)) for name in context.repo_state},
        "executor": {
            "hostname": socket.gethostname(),
            "work_root": str(layout.root),
            "src_root": str(layout.src_dir),
            "log_root": str(layout.log_dir),
            "inventory_file": str(inventory_file(layout)),
        },
    }
    found.update(change_numbers(context.ref))
    if context.artifacts:
        found["artifacts"] = [dict(a) for a in context.artifacts]
    if job.timeout is not None:
        found["timeout"] = job.timeout
    if job.post_timeout is not None:
        found["post_timeout"] = job.post_timeout
    return found


def inventory(nodes: Sequence[Mapping[str, Any]], variables: Mapping[str, Any]) -> dict[str, Any]:
    """The YAML inventory of the build's nodes (``all`` holds them, never localhost)."""
    hosts: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    for node in nodes:
        name = str(node.get("name") or node["id"])
        connection = node.get("connection") or {}
        host: dict[str, Any] = {
            "ansible_host": str(connection.get("host", "")),
            "nodepool": {
                "label": node.get("label", ""),
                "provider": node.get("provider", ""),
                "host_id": node["id"],
                "interface_ip": str(connection.get("host", "")),
            },
        }
        if connection.get("port"):
            host["ansible_port"] = int(connection["port"])
        if connection.get("username"):
            host["ansible_user"] = str(connection["username"])
        hosts[name] = host
        for group in node.get("groups") or ():
            groups.setdefault(str(group), {"hosts": {}})["hosts"][name] = None
    top: dict[str, Any] = {"hosts": hosts, "vars": dict(variables)}
    if groups:
        top["children"] = groups
    return {"all": top}


def inventory_file(layout: BuildLayout) -> Path:
    return layout.root / "ansible" / "inventory" / "hosts.yaml"


def _config(folder: Path, sockets: Path) -> str:
    ssh_args = " ".join(
        [
            "-o ControlMaster=auto",
            "-o ControlPersist=60s",
            "-o StrictHostKeyChecking=no",
            "-o UserKnownHostsFile=/dev/null",
            "-o ServerAliveInterval=30",
            "-o ConnectTimeout=10",
        ]
    )
    return (
        "[defaults]\n"
        f"home = {folder / 'home'}\n"
        f"local_tmp = {folder / 'tmp'}\n"
        f"stdout_callback = {CALLBACK_NAME}\n"
        f"callback_plugins = {CALLBACK_DIR}\n"
        f"action_plugins = {PLUGINS_DIR / 'action'}\n"
        f"library = {PLUGINS_DIR / 'library'}\n"
        "retry_files_enabled = False\n"
        "nocows = True\n"
        "nocolor = True\n"
        "host_key_checking = False\n"
        "localhost_warning = False\n"
        "interpreter_python = auto_silent\n"
        "[ssh_connection]\n"
        "pipelining = True\n"
        f"ssh_args = {ssh_args}\n"
        f"control_path_dir = {sockets / 'cp'}\n"
    )


@dataclass
class AnsibleSetup:
    """The files, sockets folder and agent of one build's playbooks."""

    folder: Path
    sockets: Path
    # ansible-playbook (checked before the first step: a missing one is RETRY)
    program: Path
    agent: SshAgent | None = None
    # the runner's limit on result data, enforced by zuul_return as it writes
    result_data_limit: int = DEFAULT_RESULT_DATA_LIMIT

    @classmethod
    def prepare(
        cls,
        spec: BuildSpec,
        layout: BuildLayout,
        chosen: Mapping[str, str],
        node_key: Path | None,
        *,
        result_data_limit: int = DEFAULT_RESULT_DATA_LIMIT,
        uid: int | None = None,
    ) -> AnsibleSetup:
        """Write the inventory, vars and config; start the agent when there is a key.

        ``uid``, the host uid of a sandboxed job, gets Ansible's home,
        temporary folder and sockets folder (the rest stays read-only to it).
        """
        program = ansible_playbook()
        folder = layout.root / "ansible"
        for sub in ("inventory/host_vars", "home", "tmp"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        setup = cls(folder, make_socket_folder(), program, result_data_limit=result_data_limit)
        try:
            setup._write(spec, layout, chosen)
            if uid is not None:
                readable_by_all(folder)  # config, vars, inventory: read, never written
                for path in (folder / "home", folder / "tmp", setup.sockets):
                    os.lchown(path, uid, uid)
            if node_key is not None and node_key.is_file():
                setup.agent = SshAgent.start(setup.sockets, node_key, uid)
        except BaseException:
            setup.close()
            raise
        return setup

    def _write(self, spec: BuildSpec, layout: BuildLayout, chosen: Mapping[str, str]) -> None:
        hosts = inventory_file(layout)
        nodes = inventory(spec.context.nodes, job_vars(spec))
        hosts.write_text(yaml.safe_dump(nodes, sort_keys=True))
        localhost = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "ansible_remote_tmp": str(self.folder / "tmp" / "remote"),
        }
        (hosts.parent / "host_vars" / "localhost.yaml").write_text(yaml.safe_dump(localhost))
        variables = {"zuul": zuul_vars(spec, layout, chosen)}
        (self.folder / "zuul.json").write_text(json.dumps(variables, indent=2, sort_keys=True))
        (self.folder / "ansible.cfg").write_text(_config(self.folder, self.sockets))

    @property
    def read_only(self) -> list[Path]:
        """What a sandboxed playbook reads and must not change: config, vars, inventory."""
        return [self.folder / "ansible.cfg", self.folder / "zuul.json", self.folder / "inventory"]

    @property
    def unreachable_file(self) -> Path:
        """Where the callback notes an unreachable host (in a folder the job may write)."""
        return self.folder / "tmp" / "unreachable"

    def step(self, playbook: Path, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of one playbook step (``env``: the job's for the step)."""
        self.unreachable_file.unlink(missing_ok=True)
        return self.command(playbook, env), self.environment(env)

    def host_unreachable(self, exit_code: int | None) -> bool:
        """Whether the step that just ended found a host unreachable (not a parse error)."""
        if exit_code != UNREACHABLE_EXIT:
            return False
        try:  # the job's file: never a link followed, a FIFO waited on or a huge read
            fd = os.open(self.unreachable_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as handle:
            return stat.S_ISREG(os.fstat(fd).st_mode) and bool(handle.read(4096).strip())

    def command(self, playbook: Path, env: Mapping[str, str]) -> list[str]:
        """The argv of one playbook step (``env`` is the step's job environment)."""
        argv = [str(self.program), "-i", str(self.folder / "inventory" / "hosts.yaml")]
        if "SLUICE_SECRETS_FILE" in env:
            argv += ["-e", f"@{env['SLUICE_SECRETS_FILE']}"]
        argv += ["-e", f"@{self.folder / 'zuul.json'}"]
        if "SLUICE_SUCCESS" in env:  # post-run: Zuul's zuul_success
            argv += ["-e", json.dumps({"zuul_success": env["SLUICE_SUCCESS"] == "true"})]
        return [*argv, str(playbook)]

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """The job environment plus what Ansible needs (config, agent, UTF-8, no buffering)."""
        found = dict(env)
        found.update(
            ANSIBLE_CONFIG=str(self.folder / "ansible.cfg"),
            ANSIBLE_HOME=str(self.folder / "home"),
            PYTHONUNBUFFERED="1",
            SLUICE_UNREACHABLE_FILE=str(self.unreachable_file),
            SLUICE_RESULT_DATA_LIMIT=str(self.result_data_limit),
        )
        locale = found.get("LC_ALL") or found.get("LANG") or ""
        if "UTF8" not in locale.upper().replace("-", ""):
            found["LC_ALL"] = "C.UTF-8"  # ansible-core refuses any other encoding
        if self.agent is not None:
            found["SSH_AUTH_SOCK"] = str(self.agent.socket)
        return found

    def close(self) -> None:
        """Stop the agent and remove the sockets folder; safe to call twice."""
        if self.agent is not None:
            self.agent.stop()
            self.agent = None
        remove_socket_folder(self.sockets)
