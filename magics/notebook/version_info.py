"""`%workers --version`: nbworkers' version, and the line a bug report needs, read from package metadata.

Nothing here imports TensorFlow, Keras or Ray: their versions are their installed distributions' (the kernel's
environment, which is the workers' unless ``%%worker --python`` names another interpreter).
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version

from nbworkers.version import installed_version

# the distributions a bug report names, each under the first of its spellings that is installed
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly")
KERAS_DISTRIBUTIONS = ("keras", "tf-keras")


def installed(distribution: str) -> str | None:
    """The installed version of that distribution, None when it is not installed."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _first_installed(distributions: tuple[str, ...]) -> str | None:
    for distribution in distributions:
        found = installed(distribution)
        if found:
            return found
    return None


def bug_report_line() -> str:
    """One line to paste into a bug report: nbworkers, Python, the platform, TensorFlow, Keras, Ray."""
    parts = [f"nbworkers {installed_version()}",
             f"Python {platform.python_version()}",
             f"{platform.system()} {platform.machine()}"]
    tensorflow = _first_installed(TENSORFLOW_DISTRIBUTIONS)
    parts.append(f"TensorFlow {tensorflow} (the kernel's environment; workers started with --python use theirs)"
                 if tensorflow else "TensorFlow: not in the kernel's environment (the workers' --python has it)")
    keras = [f"{name} {found}" for name in KERAS_DISTRIBUTIONS if (found := installed(name))]
    parts.extend(keras)
    ray = installed("ray")
    parts.append(f"ray {ray}" if ray else "ray: not installed")
    return ", ".join(parts)


def version_text() -> str:
    """What `%workers --version` prints: the version, then the bug-report line and where it came from."""
    return (f"nbworkers {installed_version()}\n"
            f"For a bug report, paste this line:\n"
            f"  {bug_report_line()}\n"
            f"(Python: {sys.executable})")


def listing_footer() -> str:
    """The last line of the `%workers` listing."""
    return f"nbworkers {installed_version()} (`%workers --version`: the line a bug report needs)"
