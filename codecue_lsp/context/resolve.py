"""The workspace files an import refers to: `resolve` maps one ImportRef (imports.py) to workspace paths by the
language's lookup rules, from the set of paths alone (it reads no file), so that an imported name can be looked up
among the definitions of the files it comes from.
"""
from __future__ import annotations

import functools
import posixpath
from typing import AbstractSet

from ..prompt.languages import spec_for
from .types import ImportRef

JS_EXTENSIONS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts", ".d.ts")

_GO_STDLIB = frozenset("""archive bufio builtin bytes cmp compress container context crypto database debug embed
encoding errors expvar flag fmt go hash html image index internal io iter log maps math mime net os path plugin
reflect regexp runtime slices sort strconv strings structs sync syscall testing text time unicode unique unsafe
weak""".split())


class _Layout:
    """The workspace paths indexed by file name and by folder."""

    def __init__(self, paths: AbstractSet[str]) -> None:
        self.paths = paths
        self.by_name: dict[str, list[str]] = {}
        self.folders: dict[str, list[str]] = {}
        for path in sorted(paths):
            folder, _, name = path.rpartition("/")
            self.by_name.setdefault(name, []).append(path)
            self.folders.setdefault(folder, []).append(path)


@functools.lru_cache(maxsize=4)
def _cached_layout(paths: frozenset) -> _Layout:
    return _Layout(paths)


def _layout(paths: AbstractSet[str]) -> _Layout:
    """Cached for a frozenset (its hash is computed once), built afresh for a mutable set."""
    return _cached_layout(paths) if isinstance(paths, frozenset) else _Layout(paths)


def _join(folder: str, relative: str) -> str | None:
    """folder/relative normalized; None when it leaves the workspace."""
    joined = posixpath.normpath(posixpath.join(folder, relative)) if relative else folder
    if joined == "." or joined == "":
        return ""
    return None if joined == ".." or joined.startswith("../") or joined.startswith("/") else joined


def _child(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _closeness(from_path: str):
    """Sort key: paths sharing more leading folders with from_path first, then shorter, then by name."""
    here = posixpath.dirname(from_path).split("/")

    def key(path: str):
        parts = path.split("/")[:-1]
        common = 0
        while common < min(len(parts), len(here)) and parts[common] == here[common]:
            common += 1
        return -common, len(parts), path
    return key


def _ending_with(layout: _Layout, suffix: str) -> list[str]:
    """Paths equal to `suffix` or ending with "/" + suffix."""
    name = suffix.rpartition("/")[2]
    return [p for p in layout.by_name.get(name, ()) if p == suffix or p.endswith("/" + suffix)]


def _existing(paths: AbstractSet[str], candidates) -> list[str]:
    return [c for c in candidates if c is not None and c in paths]


def _dedupe(paths: list[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def _py_files(parts: list[str]) -> list[str]:
    stem = "/".join(parts)
    return [f"{stem}.py", f"{stem}/__init__.py"] if stem else ["__init__.py"]


def _py_absolute(layout: _Layout, parts: list[str], from_path: str) -> list[str]:
    """A dotted module under any source root: the workspace root, src/, or any folder that is not a package."""
    found = []
    for suffix in _py_files(parts):
        for path in _ending_with(layout, suffix):
            root = path[:len(path) - len(suffix)].rstrip("/")
            if _child(root, "__init__.py") not in layout.paths:  # a package's member is not a top-level module
                found.append((root, path))
    rank = {"": 0, "src": 1}
    close = _closeness(from_path)
    return [p for _, p in sorted(found, key=lambda rp: (rank.get(rp[0], 2), close(rp[1])))]


def _resolve_python(ref: ImportRef, from_path: str, paths: AbstractSet[str]) -> list[str]:
    module = ref.module
    level = len(module) - len(module.lstrip("."))
    parts = [p for p in module[level:].split(".") if p]
    member = ref.name if ref.name not in (None, "*") else None
    if level:
        folder = posixpath.dirname(from_path)
        base = _join(folder, "/".join([".."] * (level - 1))) if level > 1 else folder
        if base is None:
            return []
        found = []
        if member:
            found += _existing(paths, (_child(base, f) for f in _py_files(parts + [member])))
        return found + _existing(paths, (_child(base, f) for f in _py_files(parts)))
    layout = _layout(paths)
    found = _py_absolute(layout, parts + [member], from_path) if member else []
    return found + _py_absolute(layout, parts, from_path)


def _resolve_js(ref: ImportRef, from_path: str, paths: AbstractSet[str]) -> list[str]:
    spec = ref.module
    if not spec.startswith("."):  # a package (or a path alias, not followed)
        return []
    base = _join(posixpath.dirname(from_path), spec)
    if base is None:
        return []
    stems = [base]
    for ext in (".js", ".jsx", ".mjs", ".cjs"):  # ESM TypeScript imports './a.js' meaning './a.ts'
        if base.endswith(ext):
            stems.append(base[:-len(ext)])
    candidates = [base] + [s + ext for s in stems for ext in JS_EXTENSIONS]
    candidates += [_child(base, "index" + ext) for ext in JS_EXTENSIONS]
    return _existing(paths, candidates)


def _resolve_go(ref: ImportRef, from_path: str, paths: AbstractSet[str]) -> list[str]:
    parts = [p for p in ref.module.split("/") if p]
    if not parts or ("." not in parts[0] and parts[0] in _GO_STDLIB):
        return []
    layout = _layout(paths)
    best, folders = 0, []
    for folder in layout.folders:
        names = folder.split("/") if folder else []
        matched = 0
        while matched < min(len(names), len(parts)) and names[-1 - matched] == parts[-1 - matched]:
            matched += 1
        if matched and matched >= best:
            if matched > best:
                best, folders = matched, []
            folders.append(folder)
    found = []
    close = _closeness(from_path)
    for folder in sorted(folders, key=lambda f: close(_child(f, "x"))):
        found += [p for p in layout.folders[folder] if p.endswith(".go") and not p.endswith("_test.go")]
    return found


def _rust_crate_root(from_path: str, paths: AbstractSet[str]) -> str:
    """The folder of the crate's lib.rs/main.rs above from_path (else the nearest src/, else its own folder)."""
    folder = posixpath.dirname(from_path)
    probe = folder
    while True:
        if _child(probe, "lib.rs") in paths or _child(probe, "main.rs") in paths:
            return probe
        if not probe:
            break
        probe = posixpath.dirname(probe)
    parts = folder.split("/")
    return "/".join(parts[:len(parts) - parts[::-1].index("src")]) if "src" in parts else folder


def _rust_module_folder(from_path: str) -> str:
    """Where the file's child modules live: beside mod.rs/lib.rs/main.rs, else in a folder named after it."""
    folder, _, name = from_path.rpartition("/")
    stem = name[:-3] if name.endswith(".rs") else name
    return folder if stem in ("mod", "lib", "main") else _child(folder, stem)


def _rust_module_file(paths: AbstractSet[str], folder: str) -> list[str]:
    candidates = [folder + ".rs" if folder else None] + [_child(folder, f) for f in ("mod.rs", "lib.rs", "main.rs")]
    return _existing(paths, candidates)[:1]


def _resolve_rust(ref: ImportRef, from_path: str, paths: AbstractSet[str]) -> list[str]:
    segments = ref.module.split("::") + ([ref.name] if ref.name and ref.name != "*" else [])
    segments = [s for s in segments if s]
    if not segments:
        return []
    anchored = segments[0] in ("crate", "self", "super")
    if segments[0] == "crate":
        base, segments = _rust_crate_root(from_path, paths), segments[1:]
    else:
        base = _rust_module_folder(from_path)
        if segments[0] == "self":
            segments = segments[1:]
        while segments and segments[0] == "super":
            base, segments = posixpath.dirname(base), segments[1:]
    for length in range(len(segments), 0, -1):  # the longest module path that is a file; the rest are items
        folder = _child(base, "/".join(segments[:length]))
        found = _existing(paths, [folder + ".rs", _child(folder, "mod.rs")])
        if found:
            return found[:1]
    return _rust_module_file(paths, base) if anchored else []


def _resolve_java(ref: ImportRef, from_path: str, paths: AbstractSet[str]) -> list[str]:
    layout = _layout(paths)
    folder = ref.module.replace(".", "/")
    close = _closeness(from_path)
    if ref.name and ref.name != "*":
        found = _ending_with(layout, f"{folder}/{ref.name}.java")  # a class
        return sorted(found or _ending_with(layout, folder + ".java"), key=close)  # else a static member's class
    found = _ending_with(layout, folder + ".java")  # import static a.B.*
    if found:
        return sorted(found, key=close)
    folders = [f for f in layout.folders if f == folder or f.endswith("/" + folder)]
    return [p for f in sorted(folders, key=lambda f: close(_child(f, "x")))
            for p in layout.folders[f] if p.endswith(".java")]


def _resolve_c(ref: ImportRef, from_path: str, paths: AbstractSet[str]) -> list[str]:
    found = _existing(paths, [_join(posixpath.dirname(from_path), ref.module)])
    suffix = posixpath.normpath(ref.module)
    while suffix.startswith("../"):
        suffix = suffix[3:]
    return found + sorted(_ending_with(_layout(paths), suffix), key=_closeness(from_path))


_RESOLVERS = {"python": _resolve_python, "javascript": _resolve_js, "typescript": _resolve_js, "tsx": _resolve_js,
              "go": _resolve_go, "rust": _resolve_rust, "java": _resolve_java, "c": _resolve_c, "cpp": _resolve_c}


def resolve(ref: ImportRef, from_path: str, paths: AbstractSet[str]) -> list[str]:
    """The workspace-relative files (from `paths`) that `ref`, imported by `from_path`, refers to, best first;
    [] when it is not in the project (standard library, third-party packages). Pass a frozenset to reuse its index."""
    spec = spec_for(ref.language_id)
    resolver = _RESOLVERS.get(spec.name) if spec else None
    return _dedupe(resolver(ref, from_path, paths)) if resolver and ref.module else []
