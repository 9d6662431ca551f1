"""Package discovery for the folders mapped into `sparkdispatch`; everything else is in setup.cfg.

setup.cfg's `find:` names packages after the folders it searches, one tree at a time, while
here three folders (setup.cfg's `package_dir`) become one import root. So each mapped folder is
searched and its subpackages are named under that folder's import name: a new subpackage
reaches the wheel without being listed.
"""

from configparser import ConfigParser
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def mapped_folders() -> dict[str, str]:
    """setup.cfg's `package_dir`: import name -> folder."""
    config = ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    lines = config["options"]["package_dir"].strip().splitlines()
    return {name.strip(): folder.strip() for name, folder in (line.split("=", 1) for line in lines)}


def mapped_packages() -> list[str]:
    """Every package under the mapped folders, by its import name."""
    return sorted(
        f"{name}.{sub}" if sub else name
        for name, folder in mapped_folders().items()
        for sub in ["", *find_packages(str(ROOT / folder))]
    )


setup(packages=mapped_packages())
