"""Tideline's files are private to the account that runs it.

The data dir holds every memory, the owner's sessions (a session key opens the owner panel), the
secret key and the LLM key, so it is 0700 and each file in it 0600. The process umask is set once at
start so that everything created later (SQLite's -wal and -shm, caches, exports) is private
too; a system check warns when an existing file is wider (tideline.W001).
"""

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SUFFIXES = ("", "-wal", "-shm")


def private_umask_set() -> None:
    os.umask(PRIVATE_UMASK)


def private_dir_ensure(path: Path) -> Path:
    """Create the directory 0700 when it is missing; an existing one is left as it is (the
    system check names it when it is wider)."""
    if not path.exists():
        path.mkdir(parents=True, mode=DIR_MODE)
        path.chmod(DIR_MODE)
    return path


def private_file_write(path: Path, text: str) -> None:
    """Write a file that is 0600 from its first byte."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    path.chmod(FILE_MODE)


def private_paths_too_open(*, directories: list[Path], files: list[Path]) -> list[str]:
    """One line per existing path that group or others can read, write or enter."""
    problems = []
    for path, wanted in [(d, DIR_MODE) for d in directories] + [(f, FILE_MODE) for f in files]:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            problems.append(f"{path} is {mode:04o} (should be {wanted:04o})")
    return problems


def sqlite_files(database: str) -> list[Path]:
    return [Path(f"{database}{suffix}") for suffix in SQLITE_SUFFIXES]
