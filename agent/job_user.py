"""The account a job runs as: looked up by name when the agent runs as root (``--run-as``), and the
:class:`subprocess.Popen` arguments that switch to it."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from typing import TypedDict


@dataclass(frozen=True, slots=True)
class JobUser:
    """The account jobs run as when the agent runs as root (``--run-as``)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    @classmethod
    def lookup(cls, name: str) -> JobUser:
        """Resolve a user name; ``KeyError`` if there is no such user."""
        entry = pwd.getpwnam(name)
        return cls(
            name=entry.pw_name,
            uid=entry.pw_uid,
            gid=entry.pw_gid,
            groups=tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)),
            home=entry.pw_dir,
        )


def job_user(run_as: str | None) -> JobUser | None:
    """The account to switch to, or None when jobs run as the agent's own user (``run_as`` None, or naming it).
    ``LookupError`` (a sentence) for an account that does not exist."""
    if run_as is None:
        return None
    try:
        user = JobUser.lookup(run_as)
    except KeyError:
        raise LookupError(f"no such user {run_as!r}") from None
    return None if user.uid == os.geteuid() else user


class Identity(TypedDict, total=False):
    """The :class:`subprocess.Popen` keyword arguments that :func:`identity` may set (typed for the call)."""

    user: int
    group: int
    extra_groups: list[int]


def identity(user: JobUser | None) -> Identity:
    """Popen arguments that drop root: user, primary group and *only* that user's supplementary groups (root's
    own supplementary groups would otherwise survive the switch)."""
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups)}


def own_home() -> str:
    """The agent's own home directory, the ``HOME`` of jobs that run as the agent's user."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        return os.environ.get("HOME", "/")
