"""Build hook only (the project is configured in pyproject.toml): the presets in profiles/ (the
source of truth, at the top level) are copied into the wheel as the package data tui/presets/,
so a wheel or `pipx install` lists them. An editable install reads profiles/ directly."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PRESETS = Path(__file__).resolve().parent / "profiles"


class BuildPyWithPresets(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the repo's profiles/ is found through the source tree
        dest = Path(self.build_lib) / "tui" / "presets"
        dest.mkdir(parents=True, exist_ok=True)
        for src in sorted(PRESETS.glob("*.yaml")):
            self.copy_file(str(src), str(dest / src.name))


setup(cmdclass={"build_py": BuildPyWithPresets})
