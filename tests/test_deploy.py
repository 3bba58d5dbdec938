"""The deployment files (docker-compose.yml, docker/, deploy/kuberay/): the Compose file against
the Compose specification's schema, every command a service runs exists in its image with the
flags it is given, configuration comes from the environment and no secret is committed, the
KubeRay manifests, and the dashboard's read-only database role."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import tomllib
import uuid
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
KUBERAY = REPO / "deploy" / "kuberay"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
READONLY_ROLE_SCRIPT = REPO / "docker" / "postgres-init" / "10-readonly-role.sh"

# Compose interpolation: $$ (a literal $), ${VAR}, ${VAR:-default}, ${VAR-default},
# ${VAR:?error}, ${VAR?error}, ${VAR:+alt}, ${VAR+alt}, $VAR
VAR = re.compile(r"\$(?:(\$)|\{(\w+)(?:(:?[-?+])([^}]*))?\}|(\w+))")
RAY_SERVICES = {"ray-head", "ray-gpu-worker", "coordinator"}
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET", re.IGNORECASE)
URL_CREDENTIALS = re.compile(r"://[^/\s:@]+:([^@\s]+)@")


def load_compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def strings(obj):
    """Every string in a parsed YAML document, keys included."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from strings(item)


def references(obj) -> dict[str, set[str]]:
    """Variable name -> the interpolation operators it is used with ('' for none)."""
    found: dict[str, set[str]] = {}
    for text in strings(obj):
        for m in VAR.finditer(text):
            if not m.group(1):
                found.setdefault(m.group(2) or m.group(5), set()).add(m.group(3) or "")
    return found


def interpolate(obj, env: dict[str, str]):
    """What Compose makes of the file with these variables (an error for a missing required one)."""
    def one(m: re.Match) -> str:
        if m.group(1):
            return "$"
        name, op, arg = m.group(2) or m.group(5), m.group(3) or "", m.group(4) or ""
        value = env.get(name)
        if op in (":-", "-"):
            return value if value or (op == "-" and value is not None) else arg
        if op in (":?", "?"):
            if value is None or (op == ":?" and not value):
                raise KeyError(f"{name}: {arg}")
            return value
        if op in (":+", "+"):
            return arg if value else ""
        return value or ""

    if isinstance(obj, str):
        return VAR.sub(one, obj)
    if isinstance(obj, dict):
        return {interpolate(k, env): interpolate(v, env) for k, v in obj.items()}
    if isinstance(obj, list):
        return [interpolate(item, env) for item in obj]
    return obj


def required_vars(obj) -> set[str]:
    return {name for name, ops in references(obj).items() if ops & {"", ":?", "?"}}


def example_env() -> dict[str, str]:
    """.env.example as a dict (KEY=VALUE lines)."""
    env = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example: not KEY=VALUE: {line!r}"
            env[key.strip()] = value.strip()
    return env


def filled_env(compose: dict) -> dict[str, str]:
    """Every required variable set, as a user's .env would."""
    return {name: f"test-{name.lower()}" for name in required_vars(compose)}


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def shell_commands(script: str) -> list[list[str]]:
    """The simple commands of a shell line (split on &&, || and ;), leading `exec` dropped."""
    commands = []
    for part in re.split(r"&&|\|\||;", script):
        words = shlex.split(part)
        if words and words[0] == "exec":
            words = words[1:]
        if words:
            commands.append(words)
    return commands


def argv_commands(argv) -> list[list[str]]:
    """The commands a service's `command` (list or string form) runs."""
    if isinstance(argv, str):
        return shell_commands(argv)
    if len(argv) >= 3 and argv[0] in ("bash", "sh") and argv[1] == "-c":
        return shell_commands(" ".join(argv[2:]))
    return [list(argv)]


def healthcheck_commands(test) -> list[list[str]]:
    if isinstance(test, str):
        return shell_commands(test)
    kind, *rest = test
    assert kind in ("CMD", "CMD-SHELL"), f"healthcheck test {test!r}"
    return [rest] if kind == "CMD" else shell_commands(" ".join(rest))


# ---- the images -------------------------------------------------------------------------------

def dockerfile_args(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)", path.read_text(), re.MULTILINE))


def image_extras(path: Path) -> list[str]:
    text = path.read_text()
    assert re.search(r'install_deps\.py \S+ "\$FARM_EXTRAS"', text), f"{path}: dependencies"
    assert re.search(r"pip install --no-deps \.(\s|$)", text), f"{path}: the package itself"
    return [e for e in dockerfile_args(path)["FARM_EXTRAS"].split(",") if e]


def console_scripts(requirement: str) -> set[str]:
    try:
        dist = distribution(Requirement(requirement).name)
    except PackageNotFoundError:  # an extra not installed here (e.g. torch)
        return set()
    return {ep.name for ep in dist.entry_points if ep.group == "console_scripts"}


def image_commands(dockerfile: Path) -> set[str]:
    """The commands on an image's PATH that the services may call: the shell and Python of the
    base image and its virtualenv, the package's scripts, and its dependencies' scripts."""
    extras = image_extras(dockerfile)
    optional = PYPROJECT["optional-dependencies"]
    assert set(extras) <= set(optional), f"{dockerfile}: unknown extras {extras}"
    found = {"bash", "sh", "python", "python3"} | set(PYPROJECT["scripts"])
    for req in [*PYPROJECT["dependencies"], *(r for e in extras for r in optional[e])]:
        found |= console_scripts(req)
    return found


def service_dockerfile(service: dict) -> Path:
    build = service["build"]
    context = REPO / (build if isinstance(build, str) else build.get("context", "."))
    name = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    return (context / name).resolve()


# ---- the Compose file -------------------------------------------------------------------------

def test_compose_file_follows_the_compose_specification():
    import jsonschema
    schema = yaml.safe_load((REPO / "tests" / "data" / "compose-spec.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    compose = load_compose()
    jsonschema.Draft7Validator(schema).validate(compose)
    jsonschema.Draft7Validator(schema).validate(interpolate(compose, filled_env(compose)))


def test_compose_services_volumes_and_health_checks():
    compose = interpolate(load_compose(), filled_env(load_compose()))
    services = compose["services"]
    assert set(services) == {"postgres", "ray-head", "ray-gpu-worker", "coordinator", "dashboard"}
    for name, service in services.items():  # all of them are long-running
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"
    assert {"pgdata", "code-cache"} <= set(compose["volumes"])
    assert any(v.startswith("pgdata:") for v in services["postgres"]["volumes"])
    for name in ("ray-gpu-worker", "coordinator"):
        assert "code-cache:/var/cache/farm" in services[name]["volumes"]
        assert environment(services[name])["FARM_CODE_CACHE"].startswith("/var/cache/farm/")
    # the init script that makes the read-only role is mounted where postgres runs it
    init = "./docker/postgres-init:/docker-entrypoint-initdb.d:ro"
    assert init in services["postgres"]["volumes"]
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])


def test_gpu_workers_reserve_gpus_and_scale():
    worker = interpolate(load_compose(), filled_env(load_compose()))["services"]["ray-gpu-worker"]
    assert "container_name" not in worker and "ports" not in worker  # --scale needs both gone
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert str(device["count"]) == "1"  # by default one GPU per container ...
    assert "--num-gpus=1" in worker["command"]  # ... and Ray is told so
    assert "--address=ray-head:6379" in worker["command"]
    assert worker["depends_on"]["ray-head"]["condition"] == "service_healthy"


def test_coordinator_and_dashboard_wiring():
    compose = load_compose()
    env = filled_env(compose)
    services = interpolate(compose, env)["services"]
    coordinator, dashboard = services["coordinator"], services["dashboard"]
    c_env, d_env = environment(coordinator), environment(dashboard)
    assert c_env["FARM_RAY_ADDRESS"] == "ray-head:6379"
    assert "@postgres:5432/" in c_env["FARM_DB_URL"]
    for dep in ("postgres", "ray-head"):
        assert coordinator["depends_on"][dep]["condition"] == "service_healthy"
    # migrated on start, before it serves
    steps = [" ".join(c[:3]) for c in argv_commands(coordinator["command"])]
    assert steps.index("farm db upgrade") < steps.index("farm run")
    # the dashboard on every interface of its container, published, as the read-only role
    assert dashboard["command"][:2] == ["farm", "dashboard"]
    assert dashboard["command"][dashboard["command"].index("--address") + 1] == "0.0.0.0"
    assert any(str(p).endswith(":8501") for p in dashboard["ports"])
    reader, owner = (re.match(r"postgresql://([^:]+):", d_env["FARM_DB_URL"]).group(1),
                     re.match(r"postgresql://([^:]+):", c_env["FARM_DB_URL"]).group(1))
    assert reader != owner
    assert environment(services["postgres"])["FARM_READER_USER"] == reader


def test_ray_token_authentication_reaches_every_ray_process():
    compose = load_compose()
    for name in RAY_SERVICES:
        env = environment(compose["services"][name])
        assert env.get("RAY_AUTH_MODE") == "token", name
        token = env.get("RAY_AUTH_TOKEN", "")
        assert re.fullmatch(r"\$\{RAY_AUTH_TOKEN:\?[^}]*\}", token), f"{name}: {token!r}"
    # no other service runs Ray
    for name, service in compose["services"].items():
        if name not in RAY_SERVICES and "command" in service:
            assert all(c[0] != "ray" for c in argv_commands(service["command"])), name


def test_every_service_command_exists_in_its_image():
    compose = load_compose()
    services = interpolate(compose, filled_env(compose))["services"]
    for name, service in services.items():
        if "build" not in service:
            continue  # a stock image (postgres)
        dockerfile = service_dockerfile(service)
        assert dockerfile.is_file(), f"{name}: {dockerfile}"
        available = image_commands(dockerfile)
        assert {"farm", "ray"} <= available, f"{dockerfile}: {sorted(available)}"
        runs = [*argv_commands(service["command"]),
                *healthcheck_commands(service["healthcheck"]["test"])]
        for words in runs:
            assert words[0] in available, f"{name}: {words[0]} is not in {dockerfile.name}"
            if words[0] == "python" and words[1] == "-c":
                compile(words[2], f"{name} healthcheck", "exec")


def test_images_pin_one_ray_and_python():
    cpu, cuda = (REPO / "docker" / f"{n}.Dockerfile" for n in ("cpu", "cuda"))
    assert dockerfile_args(cpu)["RAY_VERSION"] == dockerfile_args(cuda)["RAY_VERSION"]
    for path in (cpu, cuda):
        text = path.read_text()
        assert '"ray[default]==$RAY_VERSION"' in text
        # the two images' Pythons are 3.12 patch releases apart: Ray must compare major.minor
        assert "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor" in text
    assert re.search(r"^FROM python:3\.12-slim$", cpu.read_text(), re.MULTILINE)
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:\S+-runtime-ubuntu24\.04$", cuda.read_text(),
                     re.MULTILINE)  # Ubuntu 24.04's python3 is 3.12
    assert {"postgres"} <= set(image_extras(cpu))
    assert {"cuda", "vendor", "postgres"} <= set(image_extras(cuda))
    cluster = yaml.safe_load((KUBERAY / "raycluster.yaml").read_text())
    assert cluster["spec"]["rayVersion"] == dockerfile_args(cpu)["RAY_VERSION"]


def test_install_deps_lists_the_dependencies_of_the_extras():
    path = REPO / "docker" / "install_deps.py"
    spec = importlib.util.spec_from_file_location("install_deps", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reqs = module.requirements(str(REPO / "pyproject.toml"), "postgres", ["ray[default]==2.60.0"])
    assert reqs == [*PYPROJECT["dependencies"], *PYPROJECT["optional-dependencies"]["postgres"],
                    "ray[default]==2.60.0"]
    assert module.requirements(str(REPO / "pyproject.toml"), "") == PYPROJECT["dependencies"]
    with pytest.raises(SystemExit):
        module.requirements(str(REPO / "pyproject.toml"), "postgres,nonsense")


def _cli_help(app, args: list[str]) -> str:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, [*args, "--help"], terminal_width=200)
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result.output


def _flags(words: list[str]) -> set[str]:
    return {w.split("=")[0] for w in words if w.startswith("--")}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # importing ray's CLI imports Serve
def test_farm_and_ray_subcommands_and_flags_exist():
    """`farm db upgrade`, `farm run`, `farm dashboard`, `ray start`, `ray health-check` with
    the flags the Compose file and the manifests give them."""
    from click.testing import CliRunner
    from ray.scripts.scripts import cli as ray_cli

    from farm.cli import app

    compose = load_compose()
    services = interpolate(compose, filled_env(compose))["services"]
    runs = [c for s in services.values() if "command" in s for c in argv_commands(s["command"])]
    runs += [c for s in services.values() for c in healthcheck_commands(s["healthcheck"]["test"])]
    (cluster,) = kuberay_docs("raycluster.yaml")  # KubeRay passes rayStartParams to `ray start`
    for group in [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]:
        runs.append(["ray", "start", *(f"--{k}={v}" for k, v in group["rayStartParams"].items())])
    for doc in kuberay_docs("coordinator.yaml"):
        for container in pod_containers(doc):
            argv = [*container.get("command", []), *container.get("args", [])]
            runs += argv_commands(argv) if argv else []
    seen = set()
    for words in runs:
        if words[0] == "farm":
            sub = [w for w in words[1:3] if not w.startswith("-")]
            if sub[:1] != ["db"]:
                sub = sub[:1]
            out = _cli_help(app, sub)
        elif words[0] == "ray":
            sub = words[1:2]
            result = CliRunner().invoke(ray_cli, [*sub, "--help"], terminal_width=200)
            assert result.exit_code == 0, f"ray {sub}: {result.output}"
            out = result.output
        else:
            continue
        seen.add(" ".join([words[0], *sub]))
        for flag in _flags(words):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", out), \
                f"{' '.join(words)}: no {flag} in `{words[0]} {' '.join(sub)}`"
    assert seen >= {"farm db upgrade", "farm run", "farm dashboard", "ray start",
                    "ray health-check"}


# ---- configuration and secrets ----------------------------------------------------------------

def test_env_example_names_every_variable():
    compose, env = load_compose(), example_env()
    missing = required_vars(compose) - set(env)
    assert not missing, f".env.example lacks the required {sorted(missing)}"
    undocumented = set(references(compose)) - set(env)
    assert not undocumented, f".env.example lacks {sorted(undocumented)}"
    for key, value in env.items():  # secrets are left for the user to fill in
        if SECRET_NAME.search(key):
            assert value == "", f".env.example has a value for {key}"
    interpolate(compose, filled_env(compose))  # and with them set, nothing is missing
    with pytest.raises(KeyError):
        interpolate(compose, {})  # without them, Compose refuses to start


def literal_secrets(obj, where: str) -> list[str]:
    """Password-like values written into a file rather than referenced."""
    found = []
    if isinstance(obj, dict):
        items = list(obj.items())
        if set(obj) >= {"name", "value"} and isinstance(obj["name"], str):  # Kubernetes env
            items.append((obj["name"], obj["value"]))
        for key, value in items:
            if isinstance(key, str) and SECRET_NAME.search(key) and isinstance(value, (str, int)):
                text = str(value)
                if text and not re.fullmatch(r"\$\{\w+(:?\?[^}]*)?\}", text):
                    found.append(f"{where}: {key}={text}")
            found += literal_secrets(value, where)
    elif isinstance(obj, list):
        for item in obj:
            if isinstance(item, str) and "=" in item:  # KEY=VALUE list form
                found += literal_secrets(dict([item.split("=", 1)]), where)
            else:
                found += literal_secrets(item, where)
    elif isinstance(obj, str):  # a URL's password must be a required variable
        masked = VAR.sub(lambda m: "\0" if m.group(3) in (None, ":?", "?") else "\1", obj)
        if any(m.group(1) != "\0" for m in URL_CREDENTIALS.finditer(masked)):
            found.append(f"{where}: credentials in {obj}")
    return found


def test_no_secret_is_committed():
    found = literal_secrets(load_compose(), "docker-compose.yml")
    for path in sorted(KUBERAY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc.get("kind") != "Secret", f"{path.name}: a Secret belongs outside the repo"
            found += literal_secrets(doc, path.name)
    assert not found, found
    # the checks themselves catch what they should
    assert literal_secrets({"environment": {"POSTGRES_PASSWORD": "hunter2"}}, "x")
    assert literal_secrets({"env": [{"name": "RAY_AUTH_TOKEN", "value": "abc"}]}, "x")
    assert literal_secrets({"url": "postgresql://farm:hunter2@db/farm"}, "x")
    assert literal_secrets({"url": "postgresql://${U:-farm}:${PW:-hunter2}@db/farm"}, "x")
    assert not literal_secrets({"url": "postgresql://${U:-farm}:${PW:?set it}@db/farm"}, "x")


# ---- Kubernetes (KubeRay) ---------------------------------------------------------------------

def kuberay_docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((KUBERAY / name).read_text()) if d]


def pod_containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("containers", [])


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def assert_token_from_secret(container: dict) -> None:
    env = env_of(container)
    assert env["RAY_AUTH_MODE"]["value"] == "token", container["name"]
    ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] and ref["key"], container["name"]


def test_kuberay_raycluster_has_a_head_and_gpu_workers():
    (cluster,) = kuberay_docs("raycluster.yaml")
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    spec = cluster["spec"]
    head = spec["headGroupSpec"]
    groups = [head, *spec["workerGroupSpecs"]]
    for group in groups:  # KubeRay wants rayStartParams as a map of strings
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())
        (container,) = group["template"]["spec"]["containers"]
        assert container["image"]
        assert_token_from_secret(container)
    assert head["rayStartParams"]["num-cpus"] == "0"
    (gpu,) = spec["workerGroupSpecs"]
    assert gpu["groupName"] and isinstance(gpu["replicas"], int)
    assert gpu["minReplicas"] <= gpu["replicas"] <= gpu["maxReplicas"]
    (worker,) = gpu["template"]["spec"]["containers"]
    for kind in ("requests", "limits"):
        assert worker["resources"][kind]["nvidia.com/gpu"] == 1
    assert "cuda" in worker["image"] and "cpu" in head["template"]["spec"]["containers"][0]["image"]


def test_kuberay_coordinator_joins_the_head_service_and_migrates():
    (cluster,) = kuberay_docs("raycluster.yaml")
    docs = {(d["kind"], d["metadata"]["name"]): d for d in kuberay_docs("coordinator.yaml")}
    (container,) = pod_containers(docs["Deployment", "farm-coordinator"])
    env = env_of(container)
    assert env["FARM_RAY_ADDRESS"]["value"] == f"{cluster['metadata']['name']}-head-svc:6379"
    assert env["FARM_DB_URL"]["valueFrom"]["secretKeyRef"]["name"]
    assert_token_from_secret(container)
    steps = [" ".join(c[:3]) for c in argv_commands([*container["command"], *container["args"]])]
    assert steps[0].startswith("ray start")  # a driver needs a Ray node on its host
    assert steps.index("farm db upgrade") < steps.index("farm run")
    (dashboard,) = pod_containers(docs["Deployment", "farm-dashboard"])
    assert env_of(dashboard)["FARM_DB_URL"]["valueFrom"]["secretKeyRef"]["key"] == "reader-url"
    assert "RAY_AUTH_TOKEN" not in env_of(dashboard)  # the dashboard never talks to Ray


# ---- the read-only role -----------------------------------------------------------------------

@pytest.mark.postgres
def test_readonly_role_reads_tables_made_after_it_and_writes_nothing(pg_server, pg_url):
    from sqlalchemy import make_url, text
    from typer.testing import CliRunner

    from farm.cli import app
    from farm.store.db import make_engine
    from farm.store.readonly import database_state

    assert os.access(READONLY_ROLE_SCRIPT, os.X_OK)  # the postgres image runs it, not sources it
    owner = make_url(pg_url)
    reader = f"reader_{uuid.uuid4().hex[:8]}"
    env = {"PATH": f"{pg_server.bindir}:/usr/bin:/bin", "PGHOST": str(pg_server.sock),
           "PGPORT": "54329", "POSTGRES_USER": owner.username, "POSTGRES_DB": owner.database,
           "FARM_READER_USER": reader, "FARM_READER_PASSWORD": "not-checked-here"}
    done = subprocess.run(["bash", str(READONLY_ROLE_SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # the tables come afterwards, from the migrations, as the owner (the coordinator's start)
    result = CliRunner().invoke(app, ["db", "upgrade", "--db", pg_url])
    assert result.exit_code == 0, result.output
    reader_url = owner.set(username=reader).render_as_string(hide_password=False)
    assert database_state(reader_url).status == "ready"
    engine = make_engine(reader_url)
    try:
        with engine.connect() as conn:
            tables = conn.execute(text(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars().all()
            assert "measurements" in tables and "alembic_version" in tables
            for table in tables:
                conn.execute(text(f'SELECT count(*) FROM "{table}"'))
        for statement in ("INSERT INTO alembic_version VALUES ('x')",
                          "CREATE TABLE intruder (id int)"):
            with engine.connect() as conn, pytest.raises(Exception, match="read-only|denied"):
                conn.execute(text(statement))
    finally:
        engine.dispose()


# ---- with a container engine ------------------------------------------------------------------

def _engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.container
@pytest.mark.timeout(3600)
@pytest.mark.skipif(not _engine_answers(), reason="no container engine answers `docker info`")
def test_compose_config_and_cpu_image_build():
    compose = load_compose()
    env = {**{k: v for k, v in example_env().items() if v}, **filled_env(compose)}
    done = subprocess.run(["docker", "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
                          cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    tag = f"kernel-farm-cpu-test:{uuid.uuid4().hex[:8]}"
    done = subprocess.run(["docker", "build", "-f", "docker/cpu.Dockerfile", "-t", tag, "."],
                          cwd=REPO, capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stderr[-4000:]
    try:
        for argv in (["farm", "db", "upgrade", "--help"], ["ray", "--version"]):
            run = subprocess.run(["docker", "run", "--rm", tag, *argv], capture_output=True,
                                 text=True, timeout=300)
            assert run.returncode == 0, run.stderr
    finally:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, timeout=120)
