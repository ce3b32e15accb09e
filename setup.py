"""Build hook (everything else is in pyproject.toml): the wheel carries the starter
project that ``python -m pytest_socialbias init`` writes (pytest_socialbias/starter.py).

The shipped suites, thresholds.yaml and CI pipelines live at the top of the checkout,
where the project's own runs and docs use them; building copies them into the package as
``pytest_socialbias/_shipped/`` with the same relative paths. An editable install reads
them from the checkout instead, so nothing is copied then.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# Keep in step with pytest_socialbias/starter.py SHIPPED (a test checks the built wheel).
SHIPPED = ("suites", "thresholds.yaml", "docs/ci/github-actions.yml", "docs/ci/gitlab-ci.yml")


class BuildPyWithStarter(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "pytest_socialbias" / "_shipped"
        for name in SHIPPED:
            source, destination = HERE / name, target / name
            if source.is_dir():
                shutil.copytree(source, destination, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "__snapshots__", ".*"))
            else:
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, destination)


setup(cmdclass={"build_py": BuildPyWithStarter})
