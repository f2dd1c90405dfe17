"""Holes for `codecue-bench context`: lines of real multi-file projects, cut where the code uses a name another
file of the project defines (cross-file) or none (in-file), CrossCodeEval-style.

The projects are pure-Python wheels released in 2025, after the model's training data was collected, pinned by
version and sha256 and fetched with pip at bench time (no project code lives in this repository). A wheel's files
unzipped (its .dist-info left out) are the project root: the workspace folder the editor opens. Imports are read
with `ast` and resolved to the project's own files, through re-exports (`from .types import X` in an __init__.py).
"""
from __future__ import annotations

import ast
import hashlib
import io
import random
import shutil
import subprocess
import sys
import tempfile
import tokenize
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Project:
    name: str       # the PyPI name
    version: str
    released: str   # the wheel's upload date on PyPI
    sha256: str     # of the wheel


PROJECTS = (
    Project("mcp", "1.15.0", "2025-09-25", "314614c8addc67b663d6c3e4054db0a5c3dedc416c24ef8ce954e203fdc2333d"),
    Project("fastmcp", "2.12.4", "2025-09-26", "56188fbbc1a9df58c537063f25958c57b5c4d715f73e395c41b51550b247d140"),
    Project("smolagents", "1.22.0", "2025-09-25",
            "5334adb4e7e5814cd814f1d9ad7efa806ef57f53db40635a29d2bd727774c5f5"),
    Project("openai-agents", "0.3.3", "2025-09-30",
            "aa2c74e010b923c09f166e63a51fae8c850c62df8581b84bafcbe5bd208d1505"),
    Project("pydantic-ai-slim", "1.0.11", "2025-09-30",
            "e5a84464b4557739058db89db2e287a4820dac7677ce5ae9599ea5937ef94f10"),
    Project("markitdown", "0.1.3", "2025-08-26",
            "08d9a25770979d78f60dcc0afcb868de6799608e4db65342b2e03304fb091251"),
)

CROSS, IN_FILE = "cross-file", "in-file"
PER_FILE = 8            # most holes cut from one file
MIN_CHARS, MAX_CHARS = 10, 120
CROSS_PER_PROJECT = 30  # 6 projects: 180 cross-file holes
IN_FILE_PER_PROJECT = 10


@dataclass(frozen=True)
class Hole:
    project: str
    version: str
    path: str          # relative to the project root, "/" separators
    line: int          # 0-based
    indent: str        # what the editor's auto-indent leaves on the line
    expected: str      # the whole line as written (no newline)
    names: tuple[str, ...] = ()   # project-imported names the line uses ("Tool", "types.Tool")
    files: tuple[str, ...] = ()   # the files that define them: the "open tabs"
    kind: str = CROSS


# --- fetching ------------------------------------------------------------------------------------------------------

def fetch_project(project: Project, cache: Path) -> Path:
    """The project's root under `cache` (downloaded with pip, checked, unzipped once)."""
    root = Path(cache) / f"{project.name}-{project.version}"
    if root.is_dir():
        return root
    Path(cache).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--dest",
                        tmp, f"{project.name}=={project.version}"], check=True, stdout=subprocess.DEVNULL)
        wheel = next(Path(tmp).glob("*.whl"))
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != project.sha256:
            raise RuntimeError(f"{wheel.name}: sha256 {digest}, expected {project.sha256}")
        unpacked = Path(tmp) / "root"
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                if ".dist-info/" not in member and ".data/" not in member:
                    zf.extract(member, unpacked)
        shutil.move(str(unpacked), root)  # whole or not at all: a half-unzipped root is never left behind
    return root


def python_files(root: Path) -> dict[str, str]:
    """Relative path -> text of every .py file. Files with \\r are left out: LSP and `ast` would count their lines
    differently."""
    out = {}
    for path in sorted(Path(root).rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "\r" not in text:
            out[path.relative_to(root).as_posix()] = text
    return out


# --- imports -------------------------------------------------------------------------------------------------------

def module_name(path: str) -> tuple[str, str]:
    """(module, package) of a file: "a/b/c.py" -> ("a.b.c", "a.b"); "a/b/__init__.py" -> ("a.b", "a.b")."""
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def module_index(files) -> dict[str, str]:
    """Dotted module name -> its file, for every file of the project."""
    return {module_name(path)[0]: path for path in files}


def absolute(path: str, node: ast.ImportFrom) -> str:
    """The module an ImportFrom names, made absolute from the importing file's package."""
    if not node.level:
        return node.module or ""
    package = module_name(path)[1].split(".") if module_name(path)[1] else []
    base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(base + ([node.module] if node.module else []))


class Resolver:
    """Where a project's imported names are defined, following re-exports from module to module."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files, self.modules, self.trees = files, module_index(files), {}

    def tree(self, path: str) -> ast.Module | None:
        if path not in self.trees:
            try:
                self.trees[path] = ast.parse(self.files[path])
            except (SyntaxError, ValueError):
                self.trees[path] = None
        return self.trees[path]

    def defining_file(self, module: str, name: str, depth: int = 0) -> str:
        """The file that defines `name` of `module`: the module's own file unless it imports the name from another
        project module (then that one's, recursively)."""
        path = self.modules[module]
        tree = self.tree(path)
        if tree is None or depth > 5:
            return path
        for node in top_level(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return path
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        source = absolute(path, node)
                        if f"{source}.{alias.name}" in self.modules:
                            return self.modules[f"{source}.{alias.name}"]
                        if source in self.modules:
                            return self.defining_file(source, alias.name, depth + 1)
        return path

    def bindings(self, path: str) -> tuple[dict[str, str], dict[str, str]]:
        """The file's project imports, anywhere in it: (name -> defining file, local module alias -> module)."""
        names, aliases = {}, {}
        tree = self.tree(path)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.ImportFrom):
                source = absolute(path, node)
                for alias in node.names:
                    local = alias.asname or alias.name
                    if f"{source}.{alias.name}" in self.modules:
                        aliases[local] = f"{source}.{alias.name}"
                    elif source in self.modules and alias.name != "*":
                        names[local] = self.defining_file(source, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in self.modules or any(m.startswith(alias.name + ".") for m in self.modules):
                        local = alias.asname or alias.name.split(".")[0]
                        aliases[local] = alias.name if alias.asname else local
        return names, aliases

    def attribute_file(self, dotted: list[str]) -> str | None:
        """`m.sub.Attr` (a module alias expanded): the file defining Attr of the longest module prefix."""
        for end in range(len(dotted) - 1, 0, -1):
            module = ".".join(dotted[:end])
            if module in self.modules:
                return self.defining_file(module, dotted[end])
        return None


def top_level(tree: ast.Module):
    """The module's statements, and those one `if`/`try` down (TYPE_CHECKING imports, optional dependencies)."""
    for node in tree.body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            yield from node.body
            yield from getattr(node, "orelse", ())
            for handler in getattr(node, "handlers", ()):
                yield from handler.body


# --- holes ---------------------------------------------------------------------------------------------------------

SKIPPED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)


def comment_lines(text: str) -> set[int]:
    """1-based lines that hold a comment."""
    lines = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                lines.add(tok.start[0])
    except (tokenize.TokenError, SyntaxError):
        pass
    return lines


def body_statements(tree: ast.Module) -> dict[int, list[ast.stmt]]:
    """1-based line -> the statements starting on it, for every statement inside a function body."""
    out: dict[int, list[ast.stmt]] = {}
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, ast.stmt) and node is not func:
                    group = out.setdefault(node.lineno, [])
                    if node not in group:
                        group.append(node)
    return out


def whole_line(stmt: ast.stmt, code: str) -> bool:
    """The line is a whole statement, or a compound statement's whole header (`if x:`): a single-line completion
    can write it as written, not only as the opening of a call that goes on below."""
    if hasattr(stmt, "body"):  # if, for, while, with, try, match
        return code.rstrip().endswith(":")
    return stmt.end_lineno == stmt.lineno


def line_uses(stmts: list[ast.stmt], line: int, names: dict[str, str], aliases: dict[str, str],
              resolver: Resolver) -> dict[str, str]:
    """Project-imported names used on `line` (1-based) -> the file defining each."""
    used = {}
    for stmt in stmts:
        parents = {child: node for node in ast.walk(stmt) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(stmt):
            if not (isinstance(node, ast.Name) and node.lineno == line):
                continue
            if node.id in names:
                used[node.id] = names[node.id]
            elif node.id in aliases:
                dotted, at = aliases[node.id].split("."), node
                shown = [node.id]
                while isinstance(parents.get(at), ast.Attribute) and parents[at].value is at:
                    at = parents[at]
                    dotted.append(at.attr)
                    shown.append(at.attr)
                found = resolver.attribute_file(dotted)
                if found is not None:
                    used[".".join(shown[:2])] = found
    return used


def file_candidates(project: str, version: str, path: str, resolver: Resolver) -> list[Hole]:
    """Every line of `path` that may be a hole, cross-file or in-file."""
    text, tree = resolver.files[path], resolver.tree(path)
    if tree is None:
        return []
    lines = text.split("\n")
    names, aliases = resolver.bindings(path)
    commented = comment_lines(text)
    out = []
    for line, stmts in sorted(body_statements(tree).items()):
        code = lines[line - 1]
        indent = code[:len(code) - len(code.lstrip())]
        if (line in commented or any(isinstance(s, SKIPPED) for s in stmts)
                or any(isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) for s in stmts)
                or stmts[0].col_offset != len(indent) or not MIN_CHARS <= len(code.strip()) <= MAX_CHARS
                or not whole_line(stmts[-1], code)):
            continue
        found = line_uses(stmts, line, names, aliases, resolver)
        used = {name: file for name, file in found.items() if file != path}
        if found and not used:
            continue  # uses only names of its own file through an import: neither set
        kind = CROSS if used else IN_FILE
        out.append(Hole(project, version, path, line - 1, indent, code.rstrip(), tuple(sorted(used)),
                        tuple(sorted(set(used.values()))), kind))
    return out


def select_holes(project: str, version: str, root: Path, kind: str, count: int, seed: int = 0,
                 per_file: int = PER_FILE) -> list[Hole]:
    """`count` holes of one kind, chosen with `seed` (at most `per_file` from a file), in file and line order."""
    resolver = Resolver(python_files(root))
    rng = random.Random(f"{seed}:{project}:{kind}")
    pool = []
    for path in sorted(resolver.files):
        found = [h for h in file_candidates(project, version, path, resolver) if h.kind == kind]
        pool.extend(rng.sample(found, per_file) if len(found) > per_file else found)
    rng.shuffle(pool)
    return sorted(pool[:count], key=lambda h: (h.path, h.line))


def blanked(text: str, line: int) -> str:
    """The file as saved before the user typed the line: the line empty."""
    lines = text.split("\n")
    lines[line] = ""
    return "\n".join(lines)


def typed(text: str, line: int, indent: str) -> str:
    """The document in the editor: the line holds its indentation only, the cursor after it."""
    lines = text.split("\n")
    lines[line] = indent
    return "\n".join(lines)
