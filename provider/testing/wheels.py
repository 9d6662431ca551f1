"""Tiny pure-Python wheels made on the spot, and a directory of them to serve as `python.find-links`.

Tests and benches of per-job environments install these with real `uv` and no package index:
`make_wheel(directory, "sd_probe", "1.0")` writes `sd_probe-1.0-py3-none-any.whl` holding the
module `sd_probe` whose `VERSION` is `"1.0"`.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def make_wheel(directory: Path, name: str, version: str, *, module_source: str | None = None) -> Path:
    """Write a wheel of the one-module distribution `name` at `version` into `directory`; its path.

    The module is `name` itself, with `VERSION = "<version>"` unless `module_source` is given.
    The same arguments give the same bytes (so the same blob key).
    """
    source = module_source if module_source is not None else f"VERSION = {version!r}\n"
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": source.encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sparkdispatch.testing\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, data in files.items():
            info = zipfile.ZipInfo(member, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            wheel.writestr(info, data)
    return path


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
