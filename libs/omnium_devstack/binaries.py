"""Locate (and, as root on Debian, install) the PostgreSQL and Redis server binaries."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# initdb/pg_ctl/postgres must come from one installation: mixing major versions
# produces clusters the server refuses to open.
_PG_SERVER_TOOLS = ("initdb", "pg_ctl", "postgres")

PG_MISSING = (
    "PostgreSQL's server (initdb, pg_ctl, postgres) is not on this machine: install the Debian "
    "package 'postgresql' (sudo apt-get install postgresql), or set OMNIUM_DATABASE_URL to a "
    "server you have."
)
PSQL_MISSING = (
    "PostgreSQL's client (psql) is not on this machine: install the Debian package "
    "'postgresql-client' (sudo apt-get install postgresql-client), or set OMNIUM_DATABASE_URL "
    "to a server you have."
)
REDIS_MISSING = (
    "Redis's server (redis-server) is not on this machine: install the Debian package "
    "'redis-server' (sudo apt-get install redis-server), or set OMNIUM_REDIS_URL to a server "
    "you have."
)


class MissingBinaries(RuntimeError):
    """Raised when a server binary is absent; the message says what to install."""

    def __init__(self, message: str, packages: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.packages = packages


@dataclass(frozen=True)
class PostgresBinaries:
    bindir: Path
    initdb: Path
    pg_ctl: Path
    postgres: Path
    psql: Path


@dataclass(frozen=True)
class Binaries:
    postgres: PostgresBinaries
    redis_server: Path


def _complete_dir(bindir: Path) -> bool:
    tools = [bindir / name for name in _PG_SERVER_TOOLS]
    return all(p.is_file() and os.access(p, os.X_OK) for p in tools)


def _pg_config_bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    try:
        out = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.strip()
    return Path(text) if out.returncode == 0 and text else None


def _version_key(path: str) -> tuple[int, ...]:
    version = Path(path).parent.name
    return tuple(int(part) for part in re.findall(r"\d+", version)) or (0,)


def _debian_bindirs() -> list[Path]:
    found = glob.glob("/usr/lib/postgresql/*/bin")
    return [Path(p) for p in sorted(found, key=_version_key, reverse=True)]


def _server_dirs() -> list[Path]:
    """Directories holding all server tools: PATH, `pg_config --bindir`, newest Debian dir."""
    candidates: list[Path] = []
    on_path = {name: shutil.which(name) for name in _PG_SERVER_TOOLS}
    if all(on_path.values()):
        initdb = Path(str(on_path["initdb"]))
        # PATH entries are often symlinks (/usr/local/bin/initdb -> .../15/bin/initdb);
        # the real directory is where the matching psql lives.
        candidates.extend([initdb.resolve().parent, initdb.parent])
    pg_config_dir = _pg_config_bindir()
    if pg_config_dir is not None:
        candidates.append(pg_config_dir)
    candidates.extend(_debian_bindirs())
    return [d for d in dict.fromkeys(candidates) if _complete_dir(d)]


def find_postgres() -> PostgresBinaries | None:
    for bindir in _server_dirs():
        psql = bindir / "psql"
        if not (psql.is_file() and os.access(psql, os.X_OK)):
            which_psql = shutil.which("psql")
            if which_psql is None:
                continue
            psql = Path(which_psql)
        return PostgresBinaries(
            bindir=bindir,
            initdb=bindir / "initdb",
            pg_ctl=bindir / "pg_ctl",
            postgres=bindir / "postgres",
            psql=psql,
        )
    return None


def find_redis_server() -> Path | None:
    found = shutil.which("redis-server")
    return Path(found) if found else None


# Tools the tests and benchmarks drive as real peers: (Debian package, program, what for).
TOOLS: tuple[tuple[str, str, str], ...] = (
    ("chromium", "chromium", "the browser the console tests drive headless"),
    # Safari's engine for the scorer console's tests (D10 certifies Safari on an iPad):
    # WebKitGTK driven over WebDriver, on a virtual X display.
    ("webkit2gtk-driver", "WebKitWebDriver", "WebKitGTK's WebDriver, Safari's engine for tests"),
    ("xvfb", "Xvfb", "a virtual X display WebKitGTK draws on in the console tests"),
    ("openssh-server", "/usr/sbin/sshd", "OpenSSH's sshd, an SFTP peer for the delivery tests"),
    ("wrk", "wrk", "the HTTP load generator of 'make bench-api'"),
    (
        "prometheus",
        "promtool",
        "promtool, which checks the alert rules in deploy/monitoring and runs their unit tests",
    ),
    ("varnish", "varnishd", "Varnish, the shared cache the gateway's cache-header tests use"),
    (
        "varnish-modules",
        "/usr/lib/*/varnish/vmods/libvmod_xkey.so",
        "Varnish's xkey module, which purges by the gateway's Surrogate-Key groups",
    ),
    ("nginx", "/usr/sbin/nginx", "nginx, which runs nchan for 'make bench-push'"),
    (
        "libnginx-mod-nchan",
        "/usr/lib/nginx/modules/ngx_nchan_module.so",
        "nchan, the push engine 'make bench-push' measures the gateway's live push against",
    ),
)


# The HA profile's engines (make run-ha, the failover tests and drills): package, program, why.
HA_TOOLS: tuple[tuple[str, str, str], ...] = (
    ("patroni", "patroni", "Patroni, which runs the PostgreSQL pair and elects its leader"),
    ("etcd-server", "etcd", "etcd, where Patroni keeps the leader key"),
    ("haproxy", "haproxy", "HAProxy, in front of the two copies of each HTTP service"),
)


# What `make image` and the image tests build and run with (deploy/image/build.sh): podman on
# runc (crun fails on these machines' cgroups), a Debian base made by mmdebstrap where no
# registry can be reached, and kubectl, whose kustomize renders deploy/kubernetes' overlays.
IMAGE_TOOLS: tuple[tuple[str, str, str], ...] = (
    ("podman", "podman", "podman, which builds and runs the image"),
    ("runc", "runc", "runc, the container runtime podman runs the image with"),
    ("uidmap", "newuidmap", "newuidmap, for the image's user namespaces"),
    ("mmdebstrap", "mmdebstrap", "mmdebstrap, which makes the image's Debian base"),
    ("kubernetes-client", "kubectl", "kubectl, whose kustomize renders the manifests' overlays"),
)


def _tool_present(program: str) -> bool:
    if "*" in program or program.endswith(".so"):
        # A module another program loads, not runs (its folder may name the machine's
        # architecture, as a Varnish module's does): it need only be there.
        return bool(glob.glob(program))
    if program.startswith("/"):
        return os.access(program, os.X_OK)
    return shutil.which(program) is not None


def _problems(tools: bool, ha: bool = False, image: bool = False) -> tuple[list[str], list[str]]:
    messages: list[str] = []
    packages: list[str] = []
    wanted = (
        (TOOLS if tools else ())
        + (HA_TOOLS if ha or tools else ())
        + (IMAGE_TOOLS if image or tools else ())
    )
    for package, program, purpose in wanted:
        if not _tool_present(program):
            messages.append(
                f"{program} ({purpose}) is missing: install the Debian package '{package}' "
                f"(sudo apt-get install {package})."
            )
            packages.append(package)
    if not _server_dirs():
        messages.append(PG_MISSING)
        packages.append("postgresql")
    elif find_postgres() is None:
        messages.append(PSQL_MISSING)
        packages.append("postgresql-client")
    if find_redis_server() is None:
        messages.append(REDIS_MISSING)
        packages.append("redis-server")
    return messages, packages


def _apt_install(apt_get: str, packages: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"omnium-devstack: running: {apt_get} update", flush=True)
    subprocess.run([apt_get, "update"], env=env, check=True)
    install = [apt_get, "install", "-y", "--no-install-recommends", *packages]
    print(
        f"omnium-devstack: running: DEBIAN_FRONTEND=noninteractive {' '.join(install)}",
        flush=True,
    )
    subprocess.run(install, env=env, check=True)


def ensure_binaries(
    install: bool = False, tools: bool = False, ha: bool = False, image: bool = False
) -> Binaries:
    """Return the binaries, installing missing ones with apt-get only if asked and root.

    With `tools`, the test and benchmark peers (TOOLS, and HA_TOOLS for the failover tests)
    must be there too, and IMAGE_TOOLS for the image's; with `ha`, the HA profile's engines;
    with `image`, what `make image` builds with; running the plain stack needs only PostgreSQL
    and Redis.
    """
    messages, packages = _problems(tools, ha, image)
    apt_get = shutil.which("apt-get")
    if messages and install and os.geteuid() == 0 and apt_get:
        try:
            _apt_install(apt_get, packages)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise MissingBinaries(
                f"installing {' '.join(packages)} with apt-get failed ({exc}). "
                + " ".join(messages),
                tuple(packages),
            ) from exc
        messages, packages = _problems(tools, ha, image)
    pg = find_postgres()
    redis = find_redis_server()
    if messages or pg is None or redis is None:
        raise MissingBinaries(" ".join(messages), tuple(packages))
    return Binaries(postgres=pg, redis_server=redis)
