"""The config file: where it lives, that it is private (0600), and that a broken one is one readable error."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from cli import config
from cli.errors import CliError


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_path_prefers_corral_config(config_file: Path) -> None:
    assert config.config_path() == config_file


def test_path_falls_back_to_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CORRAL_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config.config_path() == tmp_path / "xdg" / "corral" / "config.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert config.config_path() == tmp_path / "h" / ".config" / "corral" / "config.json"


def test_missing_file_means_defaults(config_file: Path) -> None:
    assert config.load() == config.Config(url="http://127.0.0.1:8000", token=None, username=None)


def test_save_is_private_and_round_trips(config_file: Path) -> None:
    saved = config.Config(url="https://corral.example.org", token="t0k", username="alice")
    assert config.save(saved) == config_file
    assert mode(config_file) == 0o600
    assert mode(config_file.parent) == 0o700
    assert config.load() == saved
    assert not list(config_file.parent.glob(".*.tmp"))  # the temporary file was renamed, not left behind


def test_save_tightens_a_world_readable_file(config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text("{}")
    config_file.chmod(0o644)
    config.save(config.Config(token="secret"))
    assert mode(config_file) == 0o600


def test_environment_overrides_the_file(config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config.save(config.Config(url="http://saved:8000", token="saved", username="alice"))
    monkeypatch.setenv("CORRAL_URL", "http://from-env:9000/")
    monkeypatch.setenv("CORRAL_TOKEN", "env-token")
    assert config.load() == config.Config(url="http://from-env:9000", token="env-token", username="alice")
    assert config.load_file().token == "saved"  # what logout edits: the file, never the environment


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON (line 1, column 2); fix it or delete it"),
        ("[1, 2]", "must hold a JSON object"),
        (json.dumps({"token": 42}), "'token' must be a string"),
        (json.dumps({"url": "corral.example.org"}), "'corral.example.org' must start with http:// or https://"),
    ],
)
def test_broken_file_is_one_clear_error(config_file: Path, content: str, message: str) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text(content)
    with pytest.raises(CliError) as caught:
        config.load()
    assert str(config_file) in caught.value.message
    assert message in caught.value.message


def test_url_is_normalized() -> None:
    assert config.normalize_url(" https://corral.example.org/ ") == "https://corral.example.org"
    with pytest.raises(CliError) as caught:
        config.normalize_url("localhost:8000")
    assert caught.value.exit_code == 2
