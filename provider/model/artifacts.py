"""User code as the master stores it: a `.py` or `.zip` file, a package directory zipped, or a wheel.

The client reads an artifact with `read_artifact` and uploads the bytes (`POST /artifacts`); the
master keys the blob by the bytes' sha256, so packing must be byte for byte repeatable.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

from sparkdispatch.errors import BlobError

_FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
#: What an artifact may be: code for a slot process's `sys.path` (`.py`, `.zip`), or a wheel for a
#: job's Python environment (`.whl`).
ARTIFACT_SUFFIXES = (".py", ".zip", ".whl")


def read_artifact(path: str | os.PathLike[str]) -> tuple[str, bytes]:
    """(filename, bytes) of an artifact: a `.py`, `.zip` or `.whl` (an environment's) file, or a package directory.

    A directory is zipped with itself as the top folder (`pipelines/` → `pipelines.zip` holding
    `pipelines/...`), byte for byte the same each time, so its blob key is stable.
    """
    source = Path(path).expanduser()
    if source.is_dir():
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in sorted(p for p in source.rglob("*") if p.is_file()):
                relative = file.relative_to(source.parent)
                if "__pycache__" in relative.parts or file.suffix in (".pyc", ".pyo"):
                    continue
                info = zipfile.ZipInfo(relative.as_posix(), date_time=_FIXED_ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, file.read_bytes())
        return f"{source.name}.zip", buffer.getvalue()
    if not source.is_file():
        raise BlobError(
            f"artifact {str(path)!r} does not exist (give a .py, .zip or .whl file, or a package directory)"
        )
    if source.suffix not in ARTIFACT_SUFFIXES:
        raise BlobError(f"artifact {str(path)!r} is not a .py, .zip or .whl file")
    return source.name, source.read_bytes()
