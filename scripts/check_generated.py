"""Fail when committed generated files are stale: the gRPC code in laminar/v1/ and
the record-batch conformance vectors in docs/conformance/.

Regenerates every ``proto/laminar/v1/*.proto`` into a temporary directory with
grpc_tools.protoc and compares the result byte for byte with ``laminar/v1/``; builds
the conformance vectors with ``scripts/conformance_vectors.py`` and compares them
byte for byte with ``docs/conformance/batches-v1.json``.
Run ``python scripts/check_generated.py --write`` to refresh all of them.
"""

from __future__ import annotations

import filecmp
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO_DIR = PROTO_ROOT / "laminar" / "v1"
GENERATED_DIR = ROOT / "laminar" / "v1"
VECTORS_SCRIPT = ROOT / "scripts" / "conformance_vectors.py"


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


def conformance_vectors() -> ModuleType:
    """``scripts/conformance_vectors.py``, imported from its path."""
    spec = importlib.util.spec_from_file_location("conformance_vectors", VECTORS_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def check_protos(write: bool) -> int:
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


def check_vectors(write: bool) -> int:
    vectors = conformance_vectors()
    name = vectors.OUTPUT_NAME
    if write:
        vectors.write()
        print(f"generated-check: wrote {name}")
        return 0
    if not vectors.is_fresh():
        print(f"generated-check: stale generated file: {name}")
        print(f"run: {vectors.COMMAND}")
        return 1
    print(f"generated-check: {name} is fresh")
    return 0


def main() -> int:
    write = "--write" in sys.argv[1:]
    return max(check_protos(write), check_vectors(write))


if __name__ == "__main__":
    raise SystemExit(main())
