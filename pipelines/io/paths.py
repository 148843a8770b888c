"""Checks of the folders a job will use, made before Spark starts and before anything is written.

A lake root that is a file or read-only, or a source folder that is missing or unreadable,
would otherwise surface minutes later as a Java stack trace, after empty tables and a
checkpoint were created.
"""
from __future__ import annotations

import os

from msglake.errors import InputError, LakeError


def check_lake_root(root: str, write: bool = True) -> None:
    """The lake root is a folder msglake can use: readable, and writable when ``write`` (then it is
    created if it does not exist yet and its nearest existing parent is writable).

    >>> check_lake_root("/proc/version")
    Traceback (most recent call last):
    msglake.errors.LakeError: lake root /proc/version is a file, not a folder: set lake.root to a folder
    """
    path = os.path.abspath(root)
    if os.path.exists(path) and not os.path.isdir(path):
        raise LakeError(f"lake root {path} is a file, not a folder: set lake.root to a folder")
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK):
        raise LakeError(f"lake root {path} is not readable (permission denied)")
    if write and not os.access(existing, os.W_OK | os.X_OK):
        what = "is read-only" if existing == path else f"cannot be created: {existing} is read-only"
        raise LakeError(f"lake root {path} {what}: this command writes to the lake (use a writable lake.root)")
    if write:
        # Made now, so Spark's log of this very run lands in <root>/_logs (the session looks for it).
        os.makedirs(path, exist_ok=True)


def check_source_folder(name: str, path: str) -> None:
    """The source folder exists and can be listed and read.

    >>> check_source_folder("demo", "/nonexistent/nsq")
    Traceback (most recent call last):
    msglake.errors.InputError: source demo: /nonexistent/nsq does not exist (sources[].path)
    """
    full = os.path.abspath(path)
    if not os.path.exists(full):
        raise InputError(f"source {name}: {full} does not exist (sources[].path)")
    if not os.path.isdir(full):
        raise InputError(f"source {name}: {full} is not a folder (sources[].path)")
    if not os.access(full, os.R_OK | os.X_OK):
        raise InputError(f"source {name}: {full} is not readable (permission denied)")
