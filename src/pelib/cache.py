"""A content-addressed cache of compiled artifacts that checks what it returns.

An entry is a folder `<root>/<name>-<key>/` holding the artifacts (e.g. `kernel.cubin`, `kernel.sass`)
and a `meta.json` with the sha256 and size of each artifact plus the builder's own metadata. The key
hashes every input the compiler read (each file's content, by the name it was included under), the
options and the tool's version: use `key()`.

- Every artifact is checked against its sha256 when read. A missing, truncated or edited artifact,
  or an unreadable `meta.json`, drops the entry and warns once, naming its path; the caller rebuilds.
- An unwritable cache (read-only mount, a file where the folder should be, no home directory) warns
  once and the build goes on uncached.
- The location is resolved at each use: `PELIB_CACHE`, else `$XDG_CACHE_HOME/pelib`, else
  `~/.cache/pelib`.
- The cache is capped (`PELIB_CACHE_MAX_MB`, default 1024): after each store the least recently used
  entries go until it fits (a hit refreshes an entry's `meta.json` time). Temporary folders that
  an interrupted store left behind (`.tmp-*`, older than an hour) are removed at the same time.

Builders whose dependencies are only known after compiling (a host compiler's `-MD` depfile) use
`lookup()`/`store()`: the entry records each dependency's path and sha256, and a lookup takes the
entry whose recorded files all still hash the same (`parse_depfile()` reads a make-style depfile).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

FORMAT = 2                      # bump when the entry layout changes (it is part of every key)
DEFAULT_MAX_MB = 1024
STALE_TMP_S = 3600.0            # a .tmp-* folder older than this is an interrupted store


class CacheWarning(UserWarning):
    """The cache dropped a bad entry or cannot be written; the build goes on."""


class CacheUnavailable(OSError):
    """No cache location can be determined (no PELIB_CACHE, XDG_CACHE_HOME or home directory)."""


def cache_dir() -> Path:
    """PELIB_CACHE, else $XDG_CACHE_HOME/pelib, else ~/.cache/pelib; resolved now, not at import."""
    if os.environ.get("PELIB_CACHE"):
        return Path(os.environ["PELIB_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "pelib"
    try:
        home = Path.home()
    except (RuntimeError, KeyError, OSError) as e:
        raise CacheUnavailable(f"no cache location: HOME is unset and the user has no home directory ({e}); "
                               "set PELIB_CACHE or XDG_CACHE_HOME") from None
    return home / ".cache" / "pelib"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key(*, files: Iterable = (), options: Mapping | None = None, tool: str = "", extra=None) -> str:
    """A 32-hex-digit key over files (paths, or (name, bytes) pairs), options, the tool's version and extra."""
    h = hashlib.sha256(f"pelib-cache-{FORMAT}\0{tool}\0".encode())
    for f in files:
        name, data = (f if isinstance(f, tuple) else (Path(f).name, Path(f).read_bytes()))
        h.update(f"{name}\0{len(data)}\0".encode() + data)
    h.update(json.dumps(options or {}, sort_keys=True, default=str).encode())
    h.update(json.dumps(extra, sort_keys=True, default=str).encode())
    return h.hexdigest()[:32]


_SAFE = re.compile(r"[^A-Za-z0-9_.+-]")


@dataclass
class Entry:
    """A verified cache entry: its folder, the builder's metadata and the artifacts' checksums."""

    path: Path
    meta: dict
    artifacts: dict                 # name -> {"sha256", "size"}
    cache: "Cache" = field(repr=False)
    _data: dict = field(default_factory=dict, repr=False)   # artifacts already read and checked

    def has(self, name: str) -> bool:
        return name in self.artifacts

    def read(self, name: str) -> bytes | None:
        """The artifact's bytes, checked against its sha256; None (and the entry dropped) if it fails."""
        return self.cache._read_artifact(self, name)

    def add(self, name: str, data: bytes) -> bool:
        """Store one more artifact in this entry (e.g. the SASS next to the cubin); False if it cannot."""
        return self.cache._add_artifact(self, name, data)


class Cache:
    """Entries under `root` (default: cache_dir() at each use), capped at max_mb megabytes."""

    def __init__(self, root: Path | str | None = None, *, max_mb: float | None = None):
        self._root = Path(root) if root is not None else None
        self._max_mb = max_mb
        self._warned: set = set()

    # -- where and how much ---------------------------------------------------------------------
    @property
    def root(self) -> Path:
        return self._root if self._root is not None else cache_dir()

    @property
    def max_bytes(self) -> int:
        mb = self._max_mb
        if mb is None:
            env = os.environ.get("PELIB_CACHE_MAX_MB", "")
            try:
                mb = float(env) if env else DEFAULT_MAX_MB
            except ValueError:
                self._warn_once(("max", env), f"PELIB_CACHE_MAX_MB={env!r} is not a number: "
                                f"using {DEFAULT_MAX_MB} MB")
                mb = DEFAULT_MAX_MB
        return int(mb * 2**20)

    def entry_path(self, name: str, key_: str) -> Path:
        return self.root / f"{_SAFE.sub('_', name)}-{key_}"

    def _warn_once(self, tag, message: str) -> None:
        if tag not in self._warned:
            self._warned.add(tag)
            warnings.warn(message, CacheWarning, stacklevel=4)

    # -- read -----------------------------------------------------------------------------------
    def get(self, name: str, key_: str, *, require: Iterable[str] = ()) -> Entry | None:
        """The entry for (name, key) with its `require`d artifacts present, or None (a miss or a dropped bad entry)."""
        try:
            path = self.entry_path(name, key_)
        except CacheUnavailable as e:
            self._warn_once("unavailable", f"pelib cache unavailable, building uncached: {e}")
            return None
        return self._open(path, require)

    def _open(self, path: Path, require=()) -> Entry | None:
        meta_file = path / "meta.json"
        if not meta_file.is_file():
            # Entries appear whole (a renamed temp folder), so anything else under this name is damage.
            return self._drop(path, "meta.json is missing") if os.path.lexists(path) else None
        try:
            doc = json.loads(meta_file.read_text())
            arts = doc["artifacts"]
            if doc.get("format") != FORMAT or not isinstance(arts, dict) or not all(
                    isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in arts.values()):
                raise ValueError("unexpected layout")
        except (OSError, ValueError, KeyError, TypeError) as e:
            return self._drop(path, f"meta.json is unreadable ({type(e).__name__}: {e})")
        missing = [r for r in require if r not in arts]
        if missing:
            return self._drop(path, f"meta.json lists no {', '.join(missing)}")
        entry = Entry(path, doc.get("meta", {}), arts, self)
        for r in require:   # check the required artifacts now, so a hit is a good hit
            if self._read_artifact(entry, r, keep=True) is None:
                return None
        try:
            os.utime(meta_file)   # least recently used = oldest meta.json time
        except OSError:
            pass                  # a read-only cache still serves its entries
        return entry

    def _read_artifact(self, entry: Entry, name: str, keep: bool = False) -> bytes | None:
        if name in entry._data:
            return entry._data[name]
        info = entry.artifacts.get(name)
        if info is None:
            return None
        try:
            data = (entry.path / name).read_bytes()
        except OSError as e:
            self._drop(entry.path, f"{name} is unreadable ({e.strerror or e})")
            return None
        if len(data) != info.get("size", len(data)) or sha256(data) != info["sha256"]:
            self._drop(entry.path, f"{name} does not match its sha256 ({len(data)} B, expected "
                                   f"{info.get('size', '?')} B): truncated or edited")
            return None
        if keep:
            entry._data[name] = data
        return data

    def drop(self, path: Path, why: str) -> None:
        """Remove a bad entry (one whose artifact a builder found unusable), warning once with its path and why."""
        self._drop(Path(path), why)

    def _drop(self, path: Path, why: str) -> None:
        self._warn_once(("bad", str(path)), f"pelib cache: dropped the bad entry {path} ({why}); rebuilding it")
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
        except OSError:
            pass   # a read-only cache: the warning still says where the bad entry is
        return None

    # -- write ----------------------------------------------------------------------------------
    def put(self, name: str, key_: str, artifacts: Mapping[str, bytes], meta: Mapping | None = None,
            *, deps: list | None = None) -> Entry | None:
        """Store an entry atomically (temp folder, then rename); None, with one warning, if the cache is unwritable."""
        try:
            root = self.root
            path = self.entry_path(name, key_)
            root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
        except (OSError, CacheUnavailable) as e:
            where = self._root if self._root is not None else "the pelib cache"
            self._warn_once("unwritable", f"{where} is not writable ({e}); building uncached. Set "
                            "PELIB_CACHE to a writable folder, or pass cache=False")
            return None
        doc = {"format": FORMAT, "name": name, "key": key_, "created": time.time(),
               "artifacts": {n: {"sha256": sha256(d), "size": len(d)} for n, d in artifacts.items()},
               "meta": dict(meta or {})}
        if deps is not None:
            doc["deps"] = deps
        try:
            for n, d in artifacts.items():
                (tmp / n).write_bytes(d)
            (tmp / "meta.json").write_text(json.dumps(doc))
            try:
                os.rename(tmp, path)
            except OSError:   # another process stored the same key first: keep its entry if it is good
                shutil.rmtree(tmp, ignore_errors=True)
                if self._open(path) is None:
                    return None
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            self._warn_once("unwritable", f"{root} is not writable ({e}); building uncached")
            return None
        self.evict()
        return Entry(path, doc["meta"], doc["artifacts"], self)

    def _add_artifact(self, entry: Entry, name: str, data: bytes) -> bool:
        meta_file = entry.path / "meta.json"
        try:
            fd, tmp = tempfile.mkstemp(dir=entry.path, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, entry.path / name)
            doc = json.loads(meta_file.read_text())
            doc["artifacts"][name] = {"sha256": sha256(data), "size": len(data)}
            fd, tmp = tempfile.mkstemp(dir=entry.path, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(doc))
            os.replace(tmp, meta_file)
        except (OSError, ValueError, KeyError):
            return False
        entry.artifacts[name] = doc["artifacts"][name]
        return True

    # -- housekeeping ---------------------------------------------------------------------------
    def entries(self) -> list[Path]:
        try:
            return [p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")]
        except (OSError, CacheUnavailable):
            return []

    def size(self) -> int:
        return sum(_tree_bytes(p) for p in self.entries())

    def evict(self, max_bytes: int | None = None) -> list[Path]:
        """Remove stale .tmp-* folders, then least recently used entries until the cache fits; returns the removed entries."""
        cap = self.max_bytes if max_bytes is None else max_bytes
        now = time.time()
        try:
            for tmp in self.root.glob(".tmp-*"):
                try:
                    if now - tmp.stat().st_mtime > STALE_TMP_S:
                        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink()
                except OSError:
                    pass
        except (OSError, CacheUnavailable):
            return []
        sized = []
        for p in self.entries():
            try:
                used = (p / "meta.json").stat().st_mtime
            except OSError:
                used = 0.0
            sized.append((used, _tree_bytes(p), p))
        total = sum(s for _, s, _ in sized)
        removed = []
        for _, s, p in sorted(sized):
            if total <= cap:
                break
            shutil.rmtree(p, ignore_errors=True)
            total -= s
            removed.append(p)
        return removed

    # -- builders whose inputs are known only after compiling (host compilers with -MD) ----------
    def lookup(self, name: str, base_key: str, *, require: Iterable[str] = ()) -> Entry | None:
        """The entry stored under (name, base_key) whose recorded dependencies all still hash the same."""
        try:
            cands = sorted(self.root.glob(f"{_SAFE.sub('_', name)}-{base_key}-*"))
        except (OSError, CacheUnavailable):
            return None
        for p in cands:
            try:
                deps = json.loads((p / "meta.json").read_text()).get("deps") or []
            except (OSError, ValueError):
                continue
            if all(_file_sha(Path(d)) == s for d, s in deps):
                e = self._open(p, require)
                if e is not None:
                    return e
        return None

    def store(self, name: str, base_key: str, deps: Iterable, artifacts: Mapping[str, bytes],
              meta: Mapping | None = None) -> Entry | None:
        """put() under (name, base_key + the dependencies' hashes), recording each dependency's path and sha256."""
        rec = [[str(Path(d).resolve()), _file_sha(Path(d))] for d in deps]
        dk = hashlib.sha256(json.dumps(rec).encode()).hexdigest()[:16]
        return self.put(name, f"{base_key}-{dk}", artifacts, meta, deps=rec)


def _file_sha(p: Path) -> str | None:
    try:
        return sha256(p.read_bytes())
    except OSError:
        return None


def _tree_bytes(p: Path) -> int:
    total = 0
    try:
        for f in p.iterdir():
            try:
                total += f.stat().st_size
            except OSError:
                pass
    except OSError:
        pass
    return total


def parse_depfile(text: str) -> list[Path]:
    """The prerequisites of a make-style depfile (`gcc -MD -MF x.d`): every file the compiler opened."""
    body = text.replace("\\\n", " ")
    out: list[Path] = []
    for line in body.splitlines():
        if ":" not in line:
            continue
        _, rhs = line.split(":", 1)
        for tok in re.findall(r"(?:\\ |[^\s])+", rhs):
            p = Path(tok.replace("\\ ", " "))
            if p not in out:
                out.append(p)
    return out


DEFAULT = Cache()
