"""Fail when the committed generated gRPC code in laminar/v1/ is stale.

Regenerates every ``proto/laminar/v1/*.proto`` into a temporary directory with
grpc_tools.protoc and compares the result byte for byte with ``laminar/v1/``.
Run ``python scripts/check_generated.py --write`` to refresh the committed code.
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO_DIR = PROTO_ROOT / "laminar" / "v1"
GENERATED_DIR = ROOT / "laminar" / "v1"


def generate(out_dir: Path) -> list[Path]:
    protos = sorted(PROTO_DIR.glob("*.proto"))
    if not protos:
        return []
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(PROTO_ROOT)) for p in protos],
    ]
    subprocess.run(command, check=True, cwd=ROOT)
    return sorted((out_dir / "laminar" / "v1").glob("*.py*"))


def main() -> int:
    write = "--write" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        if not generated:
            print("generated-check: no .proto files yet, nothing to compare")
            return 0
        if write:
            GENERATED_DIR.mkdir(parents=True, exist_ok=True)
            for path in generated:
                shutil.copy(path, GENERATED_DIR / path.name)
            print(f"generated-check: wrote {len(generated)} files to {GENERATED_DIR}")
            return 0
        stale = [
            p.name
            for p in generated
            if not (GENERATED_DIR / p.name).exists()
            or not filecmp.cmp(p, GENERATED_DIR / p.name, shallow=False)
        ]
    if stale:
        print(f"generated-check: stale generated code: {', '.join(stale)}")
        print("run: .venv/bin/python scripts/check_generated.py --write")
        return 1
    print(f"generated-check: {len(generated)} generated files are fresh")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
