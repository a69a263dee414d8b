"""setup.cfg holds the configuration; only the package list is computed here.  The code packages
are found (a new subpackage ships without editing anything); the shipped logs are the data package
tc_autotune.tuning_logs, which setup.cfg maps to the checkout's tuning_logs/ folder and which no
finder can see (it is not under tc_autotune/ and has no __init__.py)."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["tc_autotune", "tc_autotune.*"]) + ["tc_autotune.tuning_logs"])
