"""Where the ``corral`` client keeps the portal URL and the API token between runs.

The file is ``$CORRAL_CONFIG`` if set, else ``$XDG_CONFIG_HOME/corral/config.json`` (``~/.config/...`` by default).
It holds a bearer token, so it is written with mode 0600 inside a 0700 directory, and replaced atomically so a
crash mid-write never leaves half a file. ``CORRAL_URL`` and ``CORRAL_TOKEN`` override the file, which lets CI jobs
and containers use the client without writing anything to disk.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from cli.errors import CliError

DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True, slots=True)
class Config:
    """What the client needs to talk to a portal. ``token`` is ``None`` until ``corral login`` succeeds."""

    url: str = DEFAULT_URL
    token: str | None = None
    username: str | None = None


def config_path() -> Path:
    """The config file's path, read from the environment at call time so tests and users can redirect it."""
    explicit = os.environ.get("CORRAL_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "corral" / "config.json"


def normalize_url(url: str) -> str:
    """Strip whitespace and trailing slashes and insist on a scheme, so API paths can be appended blindly."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise CliError(f"portal URL {url!r} must start with http:// or https://", exit_code=2)
    return url


def load_file(path: Path | None = None) -> Config:
    """Read the config file alone (no environment overrides); a missing file means defaults, a broken one an error."""
    path = path or config_path()
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise CliError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"config file {path} is not valid JSON (line {exc.lineno}, column {exc.colno}); fix it or delete it"
        ) from exc
    if not isinstance(data, dict):
        raise CliError(f"config file {path} must hold a JSON object; fix it or delete it")
    for key in ("url", "token", "username"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise CliError(f"config file {path}: {key!r} must be a string; fix it or delete it")
    try:
        url = normalize_url(data["url"]) if data.get("url") else DEFAULT_URL
    except CliError as exc:
        raise CliError(f"config file {path}: {exc.message}; fix it or delete it") from exc
    return Config(
        url=url,
        token=data.get("token") or None,
        username=data.get("username") or None,
    )


def load() -> Config:
    """The effective config: the file, then ``CORRAL_URL`` / ``CORRAL_TOKEN`` on top."""
    config = load_file()
    if url := os.environ.get("CORRAL_URL"):
        config = replace(config, url=normalize_url(url))
    if token := os.environ.get("CORRAL_TOKEN"):
        config = replace(config, token=token)
    return config


def save(config: Config, path: Path | None = None) -> Path:
    """Write ``config`` to the file with mode 0600, atomically, and return where it went.

    The temporary file is created 0600 from the start (never chmod-ed down after the token is already in it), and
    ``os.replace`` swaps it in so a reader sees either the old file or the new one.
    """
    path = path or config_path()
    data = {"url": config.url, "token": config.token, "username": config.username}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)  # O_CREAT leaves the mode of a pre-existing file as it was
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CliError(f"cannot write config file {path}: {exc.strerror or exc}") from exc
    return path
