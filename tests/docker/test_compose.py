"""The structure of docker/: checked here, where no Docker engine exists.

Every command a container runs must be one the project has (parsed by the
real Celery, Flower and ``sluice`` command lines), every environment
variable one that something reads, every volume, network and dependency
declared, the ZooKeeper nodes one ensemble, the shared ``sluice.yaml``
valid, Flower never open without a password, Redis and ZooKeeper asking
for theirs (required secrets, on no command line; ZooKeeper closed by
``zk-init`` before any worker starts), and jobs run in bubblewrap with the
executors' ``security_opt``. The smoke tests in
``test_smoke.py`` bring the same file up where Docker exists.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import redis as redis_client
from celery import Celery
from celery.bin.base import CLIContext
from celery.bin.celery import celery as celery_cli
from sqlalchemy.engine import make_url

from cli.main import cli as sluice_cli
from cli.stack.process import free_port
from scheduler.config import parse_tenant_config
from scheduler.nudge import task_names
from scheduler.settings.environment import ENV_OVERRIDES
from scheduler.settings.load import CONFIG_ENV, parse_settings
from scheduler.settings.sections import Settings
from tests.docker.deployment import (
    COMPOSE_FILE,
    DOCKER_DIR,
    DOCKER_README,
    DOCKERFILE,
    ROOT,
    dockerfile_instructions,
    environment,
    image_command,
    interpolate,
    interpolations,
    is_sluice,
    load_compose,
    mounts,
    service_argv,
    services,
    worker_node_prefix,
    worker_queues,
    worker_services,
)
from tests.fixtures.waiting import wait_until

# Environment variables of the third-party images, as their documentation
# names them (the official zookeeper and postgres images on Docker Hub).
ZOOKEEPER_IMAGE_ENV = {
    "ZOO_MY_ID",
    "ZOO_SERVERS",
    "ZOO_4LW_COMMANDS_WHITELIST",
    "ZOO_STANDALONE_ENABLED",
    "ZOO_ADMINSERVER_ENABLED",
    "ZOO_AUTOPURGE_PURGEINTERVAL",
    "ZOO_AUTOPURGE_SNAPRETAINCOUNT",
    "ZOO_TICK_TIME",
    "ZOO_INIT_LIMIT",
    "ZOO_SYNC_LIMIT",
    "ZOO_MAX_CLIENT_CNXNS",
    "ZOO_CFG_EXTRA",
    "JVMFLAGS",
}
POSTGRES_IMAGE_ENV = {
    "POSTGRES_USER",
    "POSTGRES_PASSWORD",
    "POSTGRES_DB",
    "POSTGRES_INITDB_ARGS",
    "PGDATA",
}
# Read by libraries inside the Sluice image: libpq (through psycopg).
LIBRARY_ENV = {"PGPASSWORD"}

SLUICE_CONFIG_PATH = "/etc/sluice/sluice.yaml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def celery_app() -> Celery:
    from tasks.app import app

    return app


@pytest.fixture(scope="module")
def sluice_settings() -> Settings:
    path = DOCKER_DIR / "sluice.yaml"
    # Parsed as it is inside the containers: relative paths against /etc/sluice.
    return parse_settings(path.read_text(), str(path), Path(SLUICE_CONFIG_PATH).parent)


def zookeeper_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in services(compose).items()
        if str(service.get("image", "")).startswith("zookeeper:")
    }


def sluice_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: service for name, service in services(compose).items() if is_sluice(service)}


def healthcheck_command(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    if isinstance(test, str):
        return test
    assert test[0] in ("CMD", "CMD-SHELL"), f"healthcheck test {test!r}"
    return " ".join(test[1:]) if test[0] == "CMD-SHELL" else shlex.join(test[1:])


# --------------------------------------------------------------------------
# Commands: checked by the command lines that will run them


def check_celery_command(argv: list[str], app: Celery) -> click.Context:
    """Parse ``celery -A tasks <sub> ...`` with Celery's own CLI; raises on any unknown part."""
    assert argv[:3] == ["celery", "-A", "tasks"], f"expected `celery -A tasks ...`: {argv}"
    import tasks

    assert tasks.app is app
    parent = click.Context(celery_cli, info_name="celery", obj=CLIContext(app, True, None, True))
    name, rest = argv[3], argv[4:]
    command = celery_cli.get_command(parent, name)
    assert command is not None, f"`celery {name}` is no Celery command: {argv}"
    context = command.make_context(name, list(rest), parent=parent)
    if name == "flower":
        check_flower_options(context.params["tornado_argv"])
    return context


def check_flower_options(arguments: tuple[str, ...]) -> None:
    from flower.options import options  # type: ignore[import-untyped]

    for argument in arguments:
        assert argument.startswith("--"), f"flower argument {argument!r}"
        name = argument[2:].partition("=")[0]
        assert name.replace("_", "-") in options._options, f"flower has no option --{name}"
        assert name != "unauthenticated-api", "Flower must not run unauthenticated"


def check_sluice_command(argv: list[str]) -> None:
    """Parse ``sluice [--config F] <command> ...`` with the project's click CLI (groups too)."""
    assert argv[0] == "sluice", argv
    rest = argv[1:]
    if rest[:1] == ["--config"]:
        rest = rest[2:]
    group: click.Group = sluice_cli
    context = click.Context(sluice_cli, info_name="sluice")
    while True:
        assert rest, f"`{shlex.join(argv)}` names no command"
        command = group.get_command(context, rest[0])
        assert command is not None, f"`sluice`: no command {rest[0]!r} in {shlex.join(argv)}"
        if not isinstance(command, click.Group):
            command.make_context(rest[0], list(rest[1:]), parent=context)
            return
        context = click.Context(command, info_name=rest[0], parent=context)
        group, rest = command, rest[1:]


def test_the_worker_commands_parse_with_celery(compose: dict[str, Any], celery_app: Celery) -> None:
    workers = worker_services(compose)
    assert workers, "no worker services"
    for name, argv in workers.items():
        context = check_celery_command(argv, celery_app)
        assert context.params["queues"], f"{name}: a worker must name its queues (-Q)"


def test_every_sluice_service_runs_a_project_command(
    compose: dict[str, Any], celery_app: Celery
) -> None:
    for name, service in sluice_services(compose).items():
        argv = service_argv(name, service)
        assert argv, f"{name}: runs nothing"
        if argv[0] == "celery":
            check_celery_command(argv, celery_app)
        elif argv[0] == "sluice":
            check_sluice_command(argv)
        else:
            pytest.fail(f"{name}: runs {argv[0]!r}, neither celery -A tasks nor sluice")


def test_the_images_own_command_exists(celery_app: Celery) -> None:
    entrypoint, cmd = image_command()
    argv = [*entrypoint, *cmd]
    assert argv, "the Dockerfile has no CMD"
    check_celery_command(argv, celery_app)


def test_the_command_checks_refuse_what_does_not_exist(celery_app: Celery) -> None:
    bad = ["celery", "-A", "tasks", "worker", "-Q", "scheduler", "--no-such-option"]
    with pytest.raises(click.NoSuchOption):
        check_celery_command(bad, celery_app)
    with pytest.raises(AssertionError):
        check_celery_command(["celery", "-A", "tasks", "no-such-command"], celery_app)
    with pytest.raises(AssertionError):
        check_sluice_command(["sluice", "no-such-command"])
    with pytest.raises(click.NoSuchOption):
        check_sluice_command(["sluice", "status", "--no-such-option"])
    with pytest.raises(AssertionError, match="unauthenticated"):
        check_flower_options(("--unauthenticated-api",))


# --------------------------------------------------------------------------
# Queues


def test_worker_queues_are_queues_the_project_defines(
    compose: dict[str, Any], celery_app: Celery
) -> None:
    defined = {queue.name for queue in celery_app.conf.task_queues}
    for name, argv in worker_services(compose).items():
        for queue in worker_queues(argv):
            if queue in defined:
                continue
            zone = queue.removeprefix(f"{task_names.EXECUTOR_QUEUE}.")
            assert zone != queue, f"{name}: queue {queue!r} is not one celeryconfig defines"
            # The exact name the scheduler sends a zone's builds to.
            assert task_names.executor_queue_name(zone) == queue, f"{name}: queue {queue!r}"


def test_every_task_has_a_worker_and_zones_have_their_own_service(
    compose: dict[str, Any], celery_app: Celery
) -> None:
    consumed: dict[str, list[str]] = {}
    for name, argv in worker_services(compose).items():
        for queue in worker_queues(argv):
            consumed.setdefault(queue, []).append(name)
    sluice_tasks = [name for name in celery_app.tasks if name.startswith("sluice.")]
    assert sluice_tasks
    for task in sluice_tasks:
        queue = celery_app.amqp.router.route({}, task)["queue"].name
        assert queue in consumed, f"no service consumes {queue!r}, where {task} is routed"
    zoned = [q for q in consumed if q.startswith(f"{task_names.EXECUTOR_QUEUE}.")]
    assert zoned, "no executor zone service (-Q executor.<zone>)"
    for queue in zoned:
        for name in consumed[queue]:
            queues = worker_queues(worker_services(compose)[name])
            assert queues == [queue], f"{name}: a zone's service consumes its zone only"


def test_every_maintenance_replica_runs_the_timer(compose: dict[str, Any]) -> None:
    """Losing one maintenance worker never stops recovery: each replica has a timer."""
    with_beat = {name: argv for name, argv in worker_services(compose).items() if "--beat" in argv}
    assert list(with_beat) == ["maintenance"], f"the timer runs in {sorted(with_beat)}"
    argv = with_beat["maintenance"]
    assert worker_queues(argv) == ["maintenance"]
    service = services(compose)["maintenance"]
    assert service.get("deploy", {}).get("replicas", 1) >= 2
    schedule = argv[argv.index("--schedule") + 1]
    shared = {m.target for m in mounts(service) if m.is_named_volume}
    assert not any(schedule.startswith(target + "/") for target in shared), (
        f"the timer's schedule file {schedule} is on a volume its replicas share"
    )


def test_workers_have_unique_node_names_and_can_be_scaled(compose: dict[str, Any]) -> None:
    prefixes: dict[str, str] = {}
    for name, argv in worker_services(compose).items():
        node = argv[argv.index("-n") + 1] if "-n" in argv else ""
        assert node.endswith("@%h"), f"{name}: node name {node!r} must end in @%h (per replica)"
        prefix = worker_node_prefix(argv)
        assert prefix and prefix not in prefixes, f"{name}: node prefix {prefix!r} reused"
        prefixes[prefix] = name
        service = services(compose)[name]
        if name == "maintenance":
            continue
        for key in ("container_name", "hostname", "ports"):
            assert key not in service, f"{name}: {key} prevents `--scale {name}=N`"


# --------------------------------------------------------------------------
# ZooKeeper


_ZOO_SERVER = re.compile(r"server\.(\d+)=([^:;]+):(\d+):(\d+)(?::\w+)?;(?:[^:;]+:)?(\d+)")


def _zoo_servers(value: str) -> dict[int, tuple[str, int]]:
    """``server.N=host:peer:election;client`` entries -> {N: (host, client port)}."""
    servers = {}
    for entry in value.split():
        match = re.fullmatch(
            r"server\.(\d+)=([^:;]+):(\d+):(\d+)(?::\w+)?;(?:[^:;]+:)?(\d+)", entry
        )
        assert match, f"ZOO_SERVERS entry {entry!r} (expected server.N=host:2888:3888;2181)"
        servers[int(match[1])] = (match[2], int(match[5]))
    return servers


def test_three_zookeeper_nodes_form_one_ensemble(
    compose: dict[str, Any], sluice_settings: Settings
) -> None:
    nodes = zookeeper_services(compose)
    assert len(nodes) == 3, f"expected a three-node ensemble, found {sorted(nodes)}"
    ids: dict[int, str] = {}
    server_lists = set()
    for name, service in nodes.items():
        assert service["image"] == "zookeeper:3.8", f"{name}: {service['image']}"
        env = environment(service)
        my_id = int(env["ZOO_MY_ID"])
        assert my_id not in ids, f"{name} and {ids.get(my_id)} share ZOO_MY_ID {my_id}"
        ids[my_id] = name
        server_lists.add(env["ZOO_SERVERS"])
        whitelist = env["ZOO_4LW_COMMANDS_WHITELIST"].split(",")
        assert "ruok" in whitelist and "srvr" in whitelist, f"{name}: 4lw whitelist {whitelist}"
        assert env.get("ZOO_STANDALONE_ENABLED", "false") == "false"
    assert len(server_lists) == 1, "the nodes disagree on ZOO_SERVERS"
    servers = _zoo_servers(server_lists.pop())
    assert set(servers) == set(ids), (
        f"ZOO_SERVERS ids {sorted(servers)} != ZOO_MY_IDs {sorted(ids)}"
    )
    for my_id, (host, _) in servers.items():
        service = nodes[ids[my_id]]
        assert host in (ids[my_id], service.get("hostname")), (
            f"server.{my_id} is {host}, but ZOO_MY_ID {my_id} is service {ids[my_id]}"
        )
    # Sluice connects to every node of the ensemble.
    clients = {f"{host}:{port}" for host, port in servers.values()}
    assert set(sluice_settings.zookeeper.hosts.split(",")) == clients


def test_zookeeper_volumes_are_per_node(compose: dict[str, Any]) -> None:
    seen: dict[str, str] = {}
    for name, service in zookeeper_services(compose).items():
        targets = {m.target: m.source for m in mounts(service)}
        assert {"/data", "/datalog"} <= set(targets), f"{name}: /data and /datalog volumes"
        for source in targets.values():
            assert source not in seen, f"{name} and {seen[source]} share volume {source}"
            seen[source] = name


# --------------------------------------------------------------------------
# Health checks and start order


def test_health_checks(compose: dict[str, Any], celery_app: Celery) -> None:
    every = services(compose)
    for name in zookeeper_services(compose):
        assert "ruok" in healthcheck_command(every[name]), f"{name}: health is ruok"
    assert "redis-cli ping" in healthcheck_command(every["redis"]).lower()
    assert "pg_isready" in healthcheck_command(every["postgres"])
    for name, argv in worker_services(compose).items():
        command = healthcheck_command(every[name])
        # $$ is compose's escape of $: the shell in the container sees $HOSTNAME.
        expanded = interpolate(command)
        prefix = worker_node_prefix(argv)
        ping = ["celery", "-A", "tasks", "inspect", "ping", "-d", f"{prefix}@$HOSTNAME"]
        assert shlex.split(expanded)[: len(ping)] == ping, f"{name}: healthcheck {command!r}"
        check_celery_command(shlex.split(expanded.replace("$HOSTNAME", "host")), celery_app)


def test_dependencies_exist_and_wait_for_health(compose: dict[str, Any]) -> None:
    every = services(compose)
    conditions = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, service in every.items():
        depends = service.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {target: {"condition": "service_started"} for target in depends}
        for target, spec in depends.items():
            assert target in every, f"{name} depends on undeclared service {target!r}"
            condition = spec.get("condition", "service_started")
            assert condition in conditions, f"{name} -> {target}: condition {condition!r}"
            if condition == "service_healthy":
                assert "healthcheck" in every[target], f"{target} has no healthcheck to wait for"
    for name, service in sluice_services(compose).items():
        if name == "flower":
            continue
        depends = service["depends_on"]
        for target in [*zookeeper_services(compose), "redis", "postgres"]:
            assert depends[target]["condition"] == "service_healthy", f"{name} -> {target}"
    assert services(compose)["flower"]["depends_on"]["redis"]["condition"] == "service_healthy"


# --------------------------------------------------------------------------
# Volumes, networks, the shared sluice.yaml


def test_volumes_and_networks_are_declared(compose: dict[str, Any]) -> None:
    declared_volumes = set(compose.get("volumes") or {})
    declared_networks = set(compose.get("networks") or {})
    used_volumes = set()
    for name, service in services(compose).items():
        for mount in mounts(service):
            if mount.is_named_volume:
                assert mount.source in declared_volumes, f"{name}: volume {mount.source} undeclared"
                used_volumes.add(mount.source)
            else:
                source = (DOCKER_DIR / mount.source).resolve()
                assert source.exists(), f"{name}: bind mount {mount.source} does not exist"
        networks = service.get("networks") or []
        for network in networks if isinstance(networks, list) else list(networks):
            assert network in declared_networks, f"{name}: network {network} undeclared"
    assert declared_volumes == used_volumes, f"unused volumes {declared_volumes - used_volumes}"


def test_each_worker_has_its_own_state_dir(
    compose: dict[str, Any], sluice_settings: Settings
) -> None:
    state_dir = str(sluice_settings.state_dir)
    owners: dict[str, str] = {}
    for name in worker_services(compose):
        service = services(compose)[name]
        state = [m for m in mounts(service) if m.target == state_dir]
        assert len(state) == 1 and state[0].is_named_volume, f"{name}: no state volume"
        assert not state[0].read_only
        assert state[0].source not in owners, f"{name} shares {owners.get(state[0].source)}'s state"
        owners[state[0].source] = name


def test_executors_see_the_mergers_repo_cache_at_the_same_path(
    compose: dict[str, Any], sluice_settings: Settings
) -> None:
    # The scheduler names the merger's cache path (<state_dir>/git/...) as the
    # source of a build's commits; an executor that finds it there borrows its
    # objects, one elsewhere merges again (docker/README.md, "Executors and
    # mergers on different hosts").
    cache = str(sluice_settings.state_dir / "git")
    workers = worker_services(compose)
    merger_cache = {
        m.source
        for name in workers
        for m in mounts(services(compose)[name])
        if m.target == cache and "merger" in worker_queues(workers[name])
    }
    assert len(merger_cache) == 1, "the merger needs a repo cache volume"
    for name, argv in workers.items():
        if any(q.split(".")[0] == task_names.EXECUTOR_QUEUE for q in worker_queues(argv)):
            sources = {m.source for m in mounts(services(compose)[name]) if m.target == cache}
            assert sources == merger_cache, f"{name}: the merger's repo cache at {cache}"
    readme = DOCKER_README.read_text()
    assert "Executors and mergers on different hosts" in readme and "merge_here" in readme


def test_sluice_yaml_parses_and_names_the_services(
    compose: dict[str, Any], sluice_settings: Settings
) -> None:
    every = services(compose)
    broker = make_url(sluice_settings.broker_url)
    assert broker.drivername == "redis" and broker.host in every
    database = make_url(sluice_settings.database_url)
    assert database.get_backend_name() == "postgresql", "SQLite cannot be shared across hosts"
    assert database.host in every and database.password is None, "no password in sluice.yaml"
    database.get_dialect()  # the driver is importable (psycopg: installed in the image)
    postgres = environment(every[database.host])
    assert postgres["POSTGRES_USER"] == database.username
    assert postgres["POSTGRES_DB"] == database.database
    # The tenant config it names parses against its connections.
    main_yaml = DOCKER_DIR / "main.yaml"
    tenants = parse_tenant_config(main_yaml.read_text(), "main.yaml", sluice_settings.connections)
    assert tenants.errors == () and tenants.tenants


def test_every_sluice_service_mounts_the_shared_config_read_only(
    compose: dict[str, Any], sluice_settings: Settings
) -> None:
    for name, service in sluice_services(compose).items():
        env = environment(service)
        assert env.get(CONFIG_ENV, SLUICE_CONFIG_PATH) == SLUICE_CONFIG_PATH
        by_target = {m.target: m for m in mounts(service)}
        config = by_target.get(SLUICE_CONFIG_PATH)
        assert config and config.read_only, f"{name}: sluice.yaml must be mounted read-only"
        assert (DOCKER_DIR / config.source).resolve() == DOCKER_DIR / "sluice.yaml"
        if name in worker_services(compose) or name == "cli":
            tenant = by_target.get(str(sluice_settings.tenant_config))
            assert tenant and tenant.read_only, f"{name}: main.yaml must be mounted read-only"


# --------------------------------------------------------------------------
# Environment


def test_every_environment_variable_is_read_by_something(compose: dict[str, Any]) -> None:
    from flower.options import options as flower_options

    sluice_env = {CONFIG_ENV, *ENV_OVERRIDES}
    for name, service in services(compose).items():
        env = environment(service)
        if is_sluice(service):
            for variable in env:
                if variable.startswith("FLOWER_"):
                    option = variable.removeprefix("FLOWER_").lower()
                    known = {option, option.replace("_", "-")} & set(flower_options._options)
                    assert known, f"{name}: Flower has no option for {variable}"
                else:
                    assert variable in sluice_env | LIBRARY_ENV, (
                        f"{name}: nothing in Sluice reads {variable}"
                    )
        elif name in zookeeper_services(compose):
            assert set(env) <= ZOOKEEPER_IMAGE_ENV, f"{name}: {set(env) - ZOOKEEPER_IMAGE_ENV}"
        elif str(service.get("image", "")).startswith("postgres:"):
            assert set(env) <= POSTGRES_IMAGE_ENV, f"{name}: {set(env) - POSTGRES_IMAGE_ENV}"
        else:
            assert not env, f"{name}: unexpected environment {sorted(env)}"


def test_secrets_come_from_the_environment(compose: dict[str, Any]) -> None:
    every = services(compose)
    password = environment(every["postgres"])["POSTGRES_PASSWORD"]
    assert [(n, op) for n, op, _ in interpolations(password)] == [("POSTGRES_PASSWORD", ":?")]
    for name, service in sluice_services(compose).items():
        if "PGPASSWORD" in environment(service):
            assert environment(service)["PGPASSWORD"] == password, name


def test_every_compose_variable_is_documented(compose: dict[str, Any]) -> None:
    text = COMPOSE_FILE.read_text()
    names = {name for name, _, _ in interpolations(text)}
    readme = DOCKER_README.read_text()
    for name in sorted(names):
        assert f"`{name}`" in readme or f"{name}=" in readme, f"docker/README.md: explain {name}"


# --------------------------------------------------------------------------
# Flower


def test_flower_is_never_unauthenticated(compose: dict[str, Any], celery_app: Celery) -> None:
    every = services(compose)
    flowers = [
        name
        for name in sluice_services(compose)
        if service_argv(name, every[name])[3:4] == ["flower"]
    ]
    assert flowers == ["flower"]
    service = every["flower"]
    env = environment(service)
    argv = service_argv("flower", service)
    # Basic auth from a variable compose refuses to run without (no default).
    assert [(n, op) for n, op, _ in interpolations(env["FLOWER_BASIC_AUTH"])] == [
        ("FLOWER_BASIC_AUTH", ":?")
    ]
    with pytest.raises(KeyError):
        interpolate(env["FLOWER_BASIC_AUTH"], {})
    with pytest.raises(KeyError):
        interpolate(env["FLOWER_BASIC_AUTH"], {"FLOWER_BASIC_AUTH": ""})
    assert "FLOWER_UNAUTHENTICATED_API" not in env
    assert not any("unauthenticated" in part for part in argv)
    for other in every.values():
        assert "FLOWER_UNAUTHENTICATED_API" not in environment(other)


# --------------------------------------------------------------------------
# The Dockerfile


def test_the_dockerfile_installs_the_project_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    keywords = [i.keyword for i in instructions]
    assert instructions[0].keyword == "FROM" and "python:3.1" in instructions[0].arguments
    runs = " ".join(i.arguments for i in instructions if i.keyword == "RUN")
    assert re.search(r"apt-get install\b.*\bgit\b", runs), "git must be in the image"
    assert re.search(r"pip install \.(\s|$)", runs), "the project must be installed"
    assert "psycopg" in runs, "the PostgreSQL driver sluice.yaml's database_url needs"
    users = [i for i in instructions if i.keyword == "USER"]
    assert users, "the image must not run as root"
    user = users[-1].arguments.split(":")[0]
    assert user not in ("root", "0")
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")


def test_the_image_contains_every_package_a_worker_imports() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    packages = {p.rstrip("*") for p in setuptools["packages"]["find"]["include"]}
    modules = {f"{m}.py" for m in setuptools.get("py-modules", [])}
    copied: set[str] = set()
    for instruction in dockerfile_instructions():
        if instruction.keyword == "COPY":
            copied.update(instruction.arguments.split()[:-1])
    needed = packages | modules | {"pyproject.toml", project["project"]["readme"]}
    assert needed <= copied, f"the Dockerfile does not copy {sorted(needed - copied)}"
    ignore_file = DOCKERFILE.parent / "Dockerfile.dockerignore"
    lines = (line.strip() for line in ignore_file.read_text().splitlines())
    ignore = {line for line in lines if line and not line.startswith("#")}
    assert not needed & ignore, "Dockerfile.dockerignore excludes what the image needs"
    # The worker's own imports: the modules Celery loads (-A tasks, the config).
    for package in packages:
        assert (ROOT / package / "__init__.py").is_file()


# --------------------------------------------------------------------------
# Closed by default: Redis's and ZooKeeper's passwords, ZooKeeper's ACLs, the sandbox

SECRETS_DIR = Path("/run/secrets")
# what the executors need for bubblewrap in a container (docker/README.md, "Jobs in bubblewrap")
BWRAP_SECURITY_OPT = {
    "seccomp=unconfined",
    "apparmor=unconfined",
    "systempaths=unconfined",
    "no-new-privileges:true",
}


def secret_names(service: dict[str, Any]) -> list[str]:
    return [s if isinstance(s, str) else s["source"] for s in service.get("secrets") or []]


def is_executor(argv: list[str]) -> bool:
    return any(q.split(".")[0] == task_names.EXECUTOR_QUEUE for q in worker_queues(argv))


def test_the_passwords_are_required_secrets_sluice_yaml_reads(
    compose: dict[str, Any], sluice_settings: Settings
) -> None:
    declared = compose["secrets"]
    assert declared == {
        "redis_password": {"environment": "REDIS_PASSWORD"},
        "zookeeper_password": {"environment": "ZOOKEEPER_PASSWORD"},
    }
    # compose refuses to start without either (an empty one would be no password)
    required = [interpolations(str(item)) for item in compose["x-required"]]
    assert [(n, op) for found in required for n, op, _ in found] == [
        ("REDIS_PASSWORD", ":?"),
        ("ZOOKEEPER_PASSWORD", ":?"),
    ]
    for item in compose["x-required"]:
        with pytest.raises(KeyError):
            interpolate(str(item), {"REDIS_PASSWORD": "", "ZOOKEEPER_PASSWORD": ""})
    assert sluice_settings.broker.password_file == SECRETS_DIR / "redis_password"
    auth = sluice_settings.zookeeper.auth
    assert auth is not None and auth.username
    assert auth.password_file == SECRETS_DIR / "zookeeper_password"
    for name, service in sluice_services(compose).items():
        wanted = {"redis_password"} if name == "flower" else set(declared)
        assert set(secret_names(service)) == wanted, f"{name}: secrets {secret_names(service)}"
    # never in an environment nor on a command line
    for name, service in services(compose).items():
        shown = " ".join([*environment(service).values(), *service_argv(name, service)])
        for variable in ("REDIS_PASSWORD", "ZOOKEEPER_PASSWORD"):
            assert variable not in shown, f"{name}: {variable} outside its secret"


def _redis_start(port: int, secret: Path, config: Path) -> str:
    """The redis service's start script, run here: its files in tmp, no privilege drop."""
    script = interpolate(services(load_compose())["redis"]["command"][2])
    script = script.replace("/run/secrets/redis_password", str(secret))
    script = script.replace("/tmp/redis.conf", str(config))
    script = script.replace("chown redis", "true").replace("docker-entrypoint.sh ", "")
    return f"{script} --port {port} --bind 127.0.0.1 --save '' --dir {config.parent}"


def test_redis_asks_for_the_password_of_its_secret(tmp_path: Path) -> None:
    """The service's own start script and health check, against a real redis-server."""
    service = services(load_compose())["redis"]
    assert service["command"][:2] == ["sh", "-c"] and secret_names(service) == ["redis_password"]
    assert "--requirepass" not in service["command"][2]  # from a file, never argv
    secret, config = tmp_path / "redis_password", tmp_path / "redis.conf"
    port = free_port()
    secret.write_text("")
    empty = subprocess.run(["sh", "-c", _redis_start(port, secret, config)], check=False)
    assert empty.returncode != 0  # an empty secret starts no Redis
    password = 'a pass"word with $ and %s'.replace('"', "")
    secret.write_text(password + "\n")
    server = subprocess.Popen(["sh", "-c", _redis_start(port, secret, config)])
    try:
        url = f"redis://127.0.0.1:{port}/0"
        wait_until(lambda: _answers(f"redis://:{password}@127.0.0.1:{port}/0"), 20, "Redis")
        assert config.stat().st_mode & 0o777 == 0o600
        with pytest.raises(redis_client.AuthenticationError):
            redis_client.Redis.from_url(url).ping()
        assert password not in Path(f"/proc/{server.pid}/cmdline").read_text()
        health = healthcheck_command(service).replace("/run/secrets/redis_password", str(secret))
        health = interpolate(health).replace("redis-cli ping", f"redis-cli -p {port} ping")
        assert subprocess.run(["sh", "-c", health], check=False).returncode == 0
        secret.write_text("wrong\n")
        assert subprocess.run(["sh", "-c", health], check=False).returncode != 0
    finally:
        server.terminate()
        server.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        return bool(redis_client.Redis.from_url(url, socket_timeout=1).ping())
    except redis_client.RedisError:
        return False


def test_zookeeper_is_closed_before_any_worker_starts(compose: dict[str, Any]) -> None:
    every = services(compose)
    init = every["zk-init"]
    argv = service_argv("zk-init", init)
    assert argv == ["sluice", "zookeeper", "secure"]
    check_sluice_command(argv)
    assert init["restart"] == "no" and "zookeeper_password" in secret_names(init)
    for name in [*worker_services(compose), "cli"]:
        depends = every[name]["depends_on"]
        assert depends["zk-init"]["condition"] == "service_completed_successfully", name
    for name, service in zookeeper_services(compose).items():
        env = environment(service)
        words = set(env["ZOO_4LW_COMMANDS_WHITELIST"].split(","))
        assert words <= {"ruok", "srvr", "mntr"}, f"{name}: 4lw {sorted(words)} name paths"
        key, _, value = env["ZOO_CFG_EXTRA"].partition("=")
        assert key == "DigestAuthenticationProvider.superDigest"
        assert [(n, op) for n, op, _ in interpolations(value)] == [("ZOOKEEPER_SUPER_DIGEST", ":-")]


def test_jobs_run_in_bubblewrap_with_the_privileges_it_needs(
    compose: dict[str, Any], sluice_settings: Settings
) -> None:
    assert sluice_settings.executor.sandbox == "bwrap"
    executors = 0
    for name, argv in worker_services(compose).items():
        service = services(compose)[name]
        if is_executor(argv):
            executors += 1
            assert set(service.get("security_opt") or []) == BWRAP_SECURITY_OPT, name
        else:
            assert "security_opt" not in service, f"{name} runs no job: Docker's defaults"
    assert executors >= 2
    for name, service in services(compose).items():
        assert not service.get("privileged"), name
        assert "SYS_ADMIN" not in (service.get("cap_add") or []), name
    runs = " ".join(i.arguments for i in dockerfile_instructions() if i.keyword == "RUN")
    assert re.search(r"apt-get install\b.*\bbubblewrap\b", runs)
    readme = DOCKER_README.read_text()
    for option in BWRAP_SECURITY_OPT:
        assert f"`{option}`" in readme, f"docker/README.md: why {option}"
    assert "apparmor_restrict_unprivileged_userns" in readme
