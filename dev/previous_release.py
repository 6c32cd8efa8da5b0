"""The previous release's code, checked out beside this one, and its services started from it.

The previous release is the newest release tag below HEAD when tags exist; until then, the
newest first-parent commit whose schema is older than today's (the commit before the last one
that added a migration). It is checked out with `git worktree` into a temporary folder (the
tests) or a kept one (the release drill: `kept_checkout`), its gRPC contracts are generated
there from its own protos by this venv's grpc_tools (the Makefile's contracts step), and its
processes run on this venv's packages with its own source roots first on the path.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIGRATIONS = "libs/omnium_db/migrations"
SOURCE_ROOTS = (
    "libs",
    "libs/omnium_contract",
    "services/admin",
    "services/command",
    "services/delivery",
    "services/imports",
    "services/public-api",
    "services/scoring",
    "services/scout-sim",
)
# Releases from before the migration step migrated in the command service's start-up, and
# refused a schema newer than their code: exactly what cannot be rolled back. Their command
# service is started as its own __main__ does, only without that step (which is now the
# release's own), through the `migrate=False` its CommandApp.start took for the tests.
COMMAND_WITHOUT_MIGRATING = """
from omnium_command import CommandApp
from omnium_process import run_process, settle_after_start, wait_for_signal

async def main(settings):
    app = CommandApp(settings)
    try:
        await app.start(migrate=False)
        settle_after_start()
        await wait_for_signal()
    finally:
        await app.stop()

run_process("command", main, metrics_port=lambda s: s.command.metrics_port)
"""


class PreviousReleaseError(RuntimeError):
    """No previous release can be checked out here."""


def _git(*args: str, cwd: Path = REPO) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise PreviousReleaseError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _migration_count(ref: str) -> int:
    names = _git("ls-tree", "--name-only", f"{ref}:{MIGRATIONS}").split()
    return len([name for name in names if name.endswith(".sql")])


def previous_release() -> tuple[str, str]:
    """(commit, how it was chosen) of the release before HEAD."""
    if _git("rev-parse", "--is-shallow-repository") == "true":
        raise PreviousReleaseError(
            "this clone is shallow, so the previous release is not in it: run "
            "`git fetch --unshallow` (in CI: check out with the full history, fetch-depth 0)"
        )
    head = _git("rev-parse", "HEAD")
    for tag in _git("tag", "--merged", "HEAD", "--sort=-creatordate").split():
        commit = _git("rev-parse", f"{tag}^{{commit}}")
        if commit != head:
            return commit, f"the previous release tag {tag}"
    today = _migration_count("HEAD")
    for commit in _git("rev-list", "--first-parent", "HEAD", "--", MIGRATIONS).split():
        parent = _git("rev-parse", f"{commit}^1")
        if _migration_count(parent) < today:
            n = _git("rev-list", "--count", "--first-parent", f"{parent}..HEAD")
            return parent, (
                f"HEAD~{n} (no release tags yet): the newest commit whose schema "
                f"({_migration_count(parent)} migrations) is older than today's ({today})"
            )
    raise PreviousReleaseError(f"no commit below HEAD has fewer than {today} migrations")


@dataclass(frozen=True, slots=True)
class Checkout:
    root: Path
    commit: str
    chosen: str
    settings: frozenset[str]

    @property
    def pythonpath(self) -> str:
        return ":".join(str(self.root / part) for part in SOURCE_ROOTS)

    @property
    def migrates_apart(self) -> bool:
        """Whether this release has the migration step (and services that never migrate)."""
        return (self.root / "libs" / "omnium_db" / "__main__.py").is_file()

    def environ(self, base: Mapping[str, str], settings: Mapping[str, str]) -> dict[str, str]:
        """`base` with `settings`, less the ones this release does not have (it would stop at
        an unknown OMNIUM_ name)."""
        env = {k: v for k, v in base.items() if not k.startswith(("OMNIUM_", "PYTHONPATH"))}
        env |= {k: v for k, v in settings.items() if k in self.settings}
        env["PYTHONPATH"] = self.pythonpath
        return env

    def command_line(self, module: str) -> list[str]:
        if module == "omnium_command" and not self.migrates_apart:
            return [sys.executable, "-c", COMMAND_WITHOUT_MIGRATING]
        return [sys.executable, "-m", module]


def _contracts(root: Path) -> None:
    """The Makefile's contracts step, in the checkout, from its own protos."""
    out = root / "libs" / "omnium_contract"
    out.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(p.relative_to(root / "protos")) for p in (root / "protos").rglob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-Iprotos", f"--python_out={out}",
         f"--grpc_python_out={out}", *(f"protos/{p}" for p in protos)],
        cwd=root, check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    for folder in (out / "omnium").rglob("*"):
        if folder.is_dir():
            (folder / "__init__.py").touch()
    (out / "omnium" / "__init__.py").touch()


def _settings_of(root: Path) -> frozenset[str]:
    page = (root / "docs" / "settings.md").read_text()
    return frozenset(re.findall(r"^\| `(OMNIUM_[A-Z0-9_]+)`", page, flags=re.M))


@contextlib.contextmanager
def checked_out() -> Iterator[Checkout]:
    """The previous release in a temporary worktree, removed afterwards."""
    commit, chosen = previous_release()
    with tempfile.TemporaryDirectory(prefix="omnium-previous-") as tmp:
        root = Path(tmp) / "release"
        _git("worktree", "add", "--detach", str(root), commit)
        try:
            _contracts(root)
            yield Checkout(root, commit, chosen, _settings_of(root))
        finally:
            with contextlib.suppress(PreviousReleaseError):
                _git("worktree", "remove", "--force", str(root))
            with contextlib.suppress(PreviousReleaseError):
                _git("worktree", "prune")


def kept_checkout(folder: Path) -> Checkout:
    """The previous release checked out under `folder/<commit>` and kept there, so a second
    run reuses it (the drills); a folder left half made is made again."""
    commit, chosen = previous_release()
    root = folder / commit
    done = root / ".omnium-checkout-done"
    if not done.exists():
        if root.exists():
            with contextlib.suppress(PreviousReleaseError):
                _git("worktree", "remove", "--force", str(root))
            shutil.rmtree(root, ignore_errors=True)
            _git("worktree", "prune")
        folder.mkdir(parents=True, exist_ok=True)
        _git("worktree", "add", "--detach", str(root), commit)
        _contracts(root)
        done.touch()
    return Checkout(root, commit, chosen, _settings_of(root))


@contextlib.asynccontextmanager
async def started(
    checkout: Checkout, module: str, env: Mapping[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """One of the previous release's processes, stopped (SIGTERM, then kill) afterwards."""
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *checkout.command_line(module),
            cwd=checkout.root,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), timeout=20)
            except TimeoutError:
                process.kill()
                await process.wait()
