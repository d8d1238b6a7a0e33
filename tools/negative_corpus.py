"""Rebuild the negative corpus (captures of protocols other than Kafka) from its list.

The list, tests/negative_corpus.tsv, names each capture with the public repository, the commit
and the path it comes from, its licence and its sha256. This script reads each file out of a
local bare-git mirror of that repository, checks the sha256 and writes it under ``--out``:

    python tools/negative_corpus.py --mirrors ~/mirrors --out ~/.cache/kafkawire-sniff/negative-corpus

A repository ``owner/name`` is looked for under ``--mirrors`` as a directory named
``owner+name`` (or ``owner+name`` with a suffix), being a bare git dir or holding one
(e.g. ``owner+name/repo``). When the listed commit is not in the mirror the file is read at
the mirror's HEAD instead, and this is reported; the sha256 still decides.

Prints one summary line; exits 0 when every listed file was written, 1 otherwise, 2 on bad
input. Standard library only; needs ``git`` on PATH.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_LIST = Path(__file__).resolve().parent.parent / "tests" / "negative_corpus.tsv"
REQUIRED_COLUMNS = ("name", "repo", "commit", "path", "sha256")


class BadInput(Exception):
    """An argument or the list itself is unusable (exit 2)."""


@dataclass(frozen=True)
class Entry:
    name: str
    repo: str
    commit: str
    path: str
    sha256: str


def read_list(list_path: Path) -> list[Entry]:
    try:
        with list_path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise BadInput(f"{list_path}: header lacks column(s) {', '.join(missing)}")
            entries = []
            for lineno, row in enumerate(reader, start=2):
                values = {c: (row.get(c) or "").strip() for c in REQUIRED_COLUMNS}
                if not all(values.values()):
                    raise BadInput(f"{list_path}:{lineno}: empty field")
                if "/" in values["name"] or values["name"] in (".", ".."):
                    raise BadInput(f"{list_path}:{lineno}: name {values['name']!r} is not a plain file name")
                entries.append(Entry(**values))
    except OSError as e:
        raise BadInput(f"cannot read list {list_path}: {e.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise BadInput(f"{list_path}: not a readable TSV ({e})") from None
    return entries


def is_git_dir(d: Path) -> bool:
    return (d / "HEAD").is_file() and (d / "objects").is_dir()


def find_git_dirs(mirrors: Path, repo: str) -> list[Path]:
    """Bare git dirs that may mirror ``repo``: exact ``owner+name`` first, then suffixed names."""
    key = repo.replace("/", "+")
    try:
        names = sorted(p.name for p in mirrors.iterdir() if p.is_dir())
    except OSError:
        return []
    exact = [n for n in names if n == key or n == key + ".git"]
    suffixed = [n for n in names if n.startswith(key) and n not in exact and not n[len(key)].isalnum()]
    found: list[Path] = []
    for n in exact + suffixed:
        top = mirrors / n
        if is_git_dir(top):
            found.append(top)
            continue
        found.extend(sub for sub in sorted(top.iterdir()) if sub.is_dir() and is_git_dir(sub))
    return found


def git(git_dir: Path, *args: str) -> bytes | None:
    proc = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def has_commit(git_dir: Path, commit: str) -> bool:
    return git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}") is not None


def fetch_entry(git_dirs: list[Path], entry: Entry) -> tuple[bytes | None, bool]:
    """The file's bytes (None when absent) and whether HEAD was read instead of the listed commit."""
    for d in git_dirs:
        if has_commit(d, entry.commit):
            return git(d, "cat-file", "blob", f"{entry.commit}:{entry.path}"), False
    for d in git_dirs:
        data = git(d, "cat-file", "blob", f"HEAD:{entry.path}")
        if data is not None:
            return data, True
    return None, bool(git_dirs)


def rebuild(entries: list[Entry], mirrors: Path, out: Path) -> tuple[int, int, int]:
    written = missing = mismatched = 0
    dirs_by_repo: dict[str, list[Path]] = {}
    for entry in entries:
        if entry.repo not in dirs_by_repo:
            dirs_by_repo[entry.repo] = find_git_dirs(mirrors, entry.repo)
            if not dirs_by_repo[entry.repo]:
                print(f"no mirror of {entry.repo} under {mirrors}", file=sys.stderr)
        data, fell_back = fetch_entry(dirs_by_repo[entry.repo], entry)
        if fell_back:
            print(
                f"{entry.name}: commit {entry.commit[:12]} not in the mirror of {entry.repo}; read HEAD",
                file=sys.stderr,
            )
        if data is None:
            missing += 1
            print(f"{entry.name}: missing ({entry.repo}:{entry.path})", file=sys.stderr)
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.sha256.lower():
            mismatched += 1
            print(
                f"{entry.name}: sha256 {digest[:16]}... differs from the list's {entry.sha256[:16]}...",
                file=sys.stderr,
            )
            continue
        (out / entry.name).write_bytes(data)
        written += 1
    return written, missing, mismatched


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rebuild the negative (non-Kafka) capture corpus.")
    parser.add_argument("--mirrors", type=Path, required=True, help="directory holding the bare git mirrors")
    parser.add_argument("--out", type=Path, required=True, help="directory to write the captures into")
    parser.add_argument("--list", type=Path, default=DEFAULT_LIST, help="the corpus list (TSV)")
    args = parser.parse_args(argv)
    try:
        if not args.mirrors.is_dir():
            raise BadInput(f"no such directory: {args.mirrors}")
        entries = read_list(args.list)
        try:
            args.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"cannot create {args.out}: {e.strerror}") from None
    except BadInput as e:
        print(f"negative_corpus: {e}", file=sys.stderr)
        return 2
    written, missing, mismatched = rebuild(entries, args.mirrors, args.out)
    print(
        f"written {written}, missing {missing}, mismatched {mismatched} (of {len(entries)}) into {args.out}"
    )
    return 0 if written == len(entries) else 1


if __name__ == "__main__":
    sys.exit(main())
