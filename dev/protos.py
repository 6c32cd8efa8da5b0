"""protos/ against the baseline of the last release: `buf breaking` with protos/buf.yaml's rules.

    python -m dev.protos check       # exit 1, with each break named, when a caller would break
    python -m dev.protos baseline    # after a release: record protos/ as the new baseline

The baseline is an image (every file's descriptors, as JSON, without comments), so a change to
it shows in review.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROTOS = REPO / "protos"
BASELINE = PROTOS / "breaking-baseline.json"
BUF = REPO / "tools" / "buf" / "node_modules" / ".bin" / "buf"


def _buf() -> str:
    if not BUF.is_file():
        raise SystemExit("Buf is not installed: run `make tools` (npm ci in tools/buf)")
    return str(BUF)


def breaking(protos: Path = PROTOS, baseline: Path = BASELINE) -> subprocess.CompletedProcess[str]:
    """`buf breaking` of `protos` against `baseline`: returncode 0 when nothing breaks."""
    return subprocess.run(
        [_buf(), "breaking", str(protos), "--against", str(baseline), "--error-format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )


def record_baseline(protos: Path = PROTOS, baseline: Path = BASELINE) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        image = Path(tmp) / "image.json"
        subprocess.run(
            [_buf(), "build", str(protos), "--exclude-source-info", "-o", str(image)], check=True
        )
        document = json.loads(image.read_text())
    baseline.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


def main() -> None:
    what = sys.argv[1] if len(sys.argv) == 2 else ""
    if what == "baseline":
        record_baseline()
        print(f"{BASELINE.relative_to(REPO)} now records protos/ as they are")
    elif what == "check":
        done = breaking()
        sys.stdout.write(done.stdout + done.stderr)
        sys.exit(0 if done.returncode == 0 else 1)
    else:
        raise SystemExit("usage: python -m dev.protos check|baseline")


if __name__ == "__main__":
    main()
