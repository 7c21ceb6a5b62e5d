"""Pure helpers of the client: how a command line becomes a job's command and name, ``--env`` parsing, and how a
DRF error body becomes the one line a user reads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cli.api import field_errors
from cli.errors import CliError
from cli.job_spec import command_string, derive_name, parse_env


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["python", "train.py", "--lr", "3e-4"], "train"),
        (["python", "-u", "scripts/finetune_llama.py"], "finetune_llama"),
        (["python", "-m", "pkg.evaluate", "--split", "test"], "evaluate"),
        (["torchrun", "--nproc-per-node", "8", "train_ddp.py"], "train_ddp"),
        (["bash", "run all.sh"], "run-all"),
        (["/usr/bin/nvidia-smi"], "nvidia-smi"),
        (["CUDA_LAUNCH_BLOCKING=1 python train.py && echo done"], "train"),
        (["sleep", "60"], "sleep"),
        (["'unbalanced"], "unbalanced"),
    ],
)
def test_derive_name(argv: list[str], name: str) -> None:
    assert derive_name(argv) == name


def test_command_string_quotes_several_words_and_keeps_one_verbatim() -> None:
    assert command_string(["python", "-c", "print('a b')"]) == "python -c 'print('\"'\"'a b'\"'\"')'"
    assert command_string(["python a.py && python b.py"]) == "python a.py && python b.py"


def test_parse_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_PROJECT", "corral")
    assert parse_env(["A=1", "B=x=y", "EMPTY=", "WANDB_PROJECT"]) == {
        "A": "1",
        "B": "x=y",
        "EMPTY": "",
        "WANDB_PROJECT": "corral",
    }


@pytest.mark.parametrize(("pair", "message"), [("1A=x", "KEY=VALUE"), ("=x", "KEY=VALUE"), ("NOPE_UNSET", "not set")])
def test_parse_env_refuses(monkeypatch: pytest.MonkeyPatch, pair: str, message: str) -> None:
    monkeypatch.delenv("NOPE_UNSET", raising=False)
    with pytest.raises(CliError) as caught:
        parse_env([pair])
    assert message in caught.value.message
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (
            {"gpus": ["Ensure this value is greater than or equal to 1."]},
            "gpus: Ensure this value is greater than or equal to 1.",
        ),
        (
            {"non_field_errors": ["Unable to log in with provided credentials."]},
            "Unable to log in with provided credentials.",
        ),
        ({"detail": "job 5 has already succeeded"}, "job 5 has already succeeded"),
        (
            {"name": ["This field is required."], "command": ["This field is required."]},
            "name: This field is required.; command: This field is required.",
        ),
        ({"env": {"FOO BAR": ["not a valid name"]}}, "env.FOO BAR: not a valid name"),
        ("plain text", "plain text"),
        ({}, ""),
    ],
)
def test_field_errors_flatten_to_one_line(body: object, line: str) -> None:
    assert field_errors(body) == line


def test_the_client_imports_nothing_of_the_server() -> None:
    """``corral`` runs on laptops that have no portal settings: importing its commands must not pull in Django,
    Celery or the scheduler (and stays fast: ``corral jobs`` should answer at once)."""
    code = (
        "import sys, cli.client_commands; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'rest_framework', 'celery', 'portal', "
        "'scheduling', 'numpy'}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert result.stdout.strip() == "[]"
