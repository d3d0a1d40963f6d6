"""Only what pyproject.toml cannot say: configs/ ships in the wheel as the package ``opteval_configs``
(a folder mapped to a package name), so an installed opteval runs without its checkout."""
from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["evalcore*", "sweepcore*", "cluster*", "jobs*"]), "opteval_configs"],
    package_dir={"opteval_configs": "configs"},
)
