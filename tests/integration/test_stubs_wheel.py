"""`make stubs`: the wheel another team installs holds every service's stubs, typed, at the
protos' version, and works on its own (nothing of omnium's source on the path)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from dev.stubs import CONTRACT, VERSION_FILE, build

# Run in a clean interpreter: the wheel's files first on the path, the contract omnium
# generates for itself nowhere on it; grpcio and protobuf from this environment.
CHECK = """
import importlib.metadata, json, sys
sys.path[:] = [sys.argv[1]] + [p for p in sys.path if "omnium_contract" not in p]
from google.protobuf import json_format
from omnium.delivery.v1 import delivery_pb2, delivery_pb2_grpc
from omnium.command.v1 import command_pb2_grpc
from omnium.scoring.v1 import scoring_pb2_grpc
from omnium.imports.v1 import imports_pb2_grpc
request = delivery_pb2.RotateWebhookSecretRequest(client_code="dailyhunt")
print(json.dumps({
    "file": delivery_pb2.__file__,
    "version": importlib.metadata.version("omnium-grpc-stubs"),
    "request": json_format.MessageToDict(request),
    "stubs": [m.__name__ for m in (delivery_pb2_grpc.DeliveryServiceStub,
              command_pb2_grpc.CommandServiceStub, scoring_pb2_grpc.ScoringServiceStub,
              imports_pb2_grpc.ImportsServiceStub)],
}))
"""


def test_the_wheel_holds_typed_stubs_at_the_protos_version_and_works_alone(
    tmp_path: Path,
) -> None:
    wheel = build(tmp_path / "dist")
    version = VERSION_FILE.read_text().strip()
    assert wheel.name == f"omnium_grpc_stubs-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    generated = {
        str(p.relative_to(CONTRACT))
        for p in (CONTRACT / "omnium").rglob("*")
        if p.suffix in (".py", ".pyi") and "__pycache__" not in p.parts
    }
    assert generated and generated <= names
    assert "omnium/py.typed" in names

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--target", str(site), str(wheel)],
        check=True,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(site)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["file"].startswith(str(site))
    assert seen["version"] == version
    assert seen["request"] == {"clientCode": "dailyhunt"}
    assert len(seen["stubs"]) == 4
