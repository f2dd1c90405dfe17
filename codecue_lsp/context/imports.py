"""A file's imports as written (tree-sitter): `parse_imports` reads import statements anywhere in the file (inside
functions and `if TYPE_CHECKING:` blocks too). resolve.py maps each one to workspace files.
"""
from __future__ import annotations

import functools

from ..prompt.languages import load_language, spec_for
from ..prompt.syntax import parse_document
from .types import ImportRef

# The nodes holding imports, per grammar (spec name); captured as @i.
_QUERIES = {
    "python": "[(import_statement) (import_from_statement)] @i",
    "javascript": """[(import_statement) (export_statement source: (_))] @i
        ((call_expression function: (identifier) @f arguments: (arguments . (string))) @i (#eq? @f "require"))""",
    "go": "(import_spec) @i",
    "rust": "[(use_declaration) (mod_item)] @i",
    "java": "(import_declaration) @i",
    "c": "(preproc_include) @i",
}
_QUERIES.update(typescript=_QUERIES["javascript"], tsx=_QUERIES["javascript"], cpp=_QUERIES["c"])

# Go's standard library: an import path whose first element is one of these is never a workspace folder.


@functools.lru_cache(maxsize=None)
def _query(spec_name: str):
    from tree_sitter import Query

    language = load_language(spec_name)
    return Query(language, _QUERIES[spec_name]) if language is not None else None


def parse_imports(language_id: str, text: str) -> list[ImportRef]:
    """Every import of `text` in document order; [] for a language without a grammar or on a parser problem."""
    spec = spec_for(language_id)
    query = _query(spec.name) if spec and spec.name in _QUERIES else None
    view = parse_document(language_id, text) if query is not None else None
    if view is None:
        return []
    from tree_sitter import QueryCursor

    nodes = sorted(QueryCursor(query).captures(view.tree.root_node).get("i", []), key=lambda n: n.start_byte)
    reader = _READERS[spec.name]
    return [ImportRef(language_id, module, name, local)
            for node in nodes for module, name, local in reader(view, node)]


def _string_content(view, node) -> str:
    """A string literal's text without its quotes."""
    return view.node_text(node)[1:-1] if node is not None else ""


def _python(view, node):
    if node.type == "import_statement":
        for child in node.children_by_field_name("name"):
            if child.type == "aliased_import":
                yield view.node_text(child.child_by_field_name("name")), None, view.node_text(
                    child.child_by_field_name("alias"))
            else:  # `import a.b` binds `a`, and the code says `a.b.name`: the dotted name is what it refers by
                yield view.node_text(child), None, view.node_text(child)
        return
    module = "".join(view.node_text(node.child_by_field_name("module_name")).split())
    if any(child.type == "wildcard_import" for child in node.children):
        yield module, "*", "*"
    for child in node.children_by_field_name("name"):
        if child.type == "aliased_import":
            yield module, view.node_text(child.child_by_field_name("name")), view.node_text(
                child.child_by_field_name("alias"))
        else:
            yield module, view.node_text(child), view.node_text(child)


def _js_clause(view, clause):
    """(name, local) pairs of an import clause: default, namespace and named imports."""
    for child in clause.named_children:
        if child.type == "identifier":
            yield "default", view.node_text(child)
        elif child.type == "namespace_import":
            ident = child.named_children[-1] if child.named_children else None
            yield None, view.node_text(ident) if ident is not None else ""
        elif child.type == "named_imports":
            for spec in child.named_children:
                if spec.type == "import_specifier":
                    name = view.node_text(spec.child_by_field_name("name"))
                    alias = spec.child_by_field_name("alias")
                    yield name, view.node_text(alias) if alias is not None else name


def _js_require(view, node):
    module = _string_content(view, node.child_by_field_name("arguments").named_children[0])
    parent, member = node.parent, None
    if parent is not None and parent.type == "member_expression":  # require('./a').b
        member = view.node_text(parent.child_by_field_name("property"))
        parent = parent.parent
    target = parent.child_by_field_name("name") if parent is not None and parent.type == "variable_declarator" \
        else None
    if target is None:
        yield module, member, ""
    elif target.type == "identifier":
        yield module, member, view.node_text(target)
    elif target.type == "object_pattern" and member is None:
        for part in target.named_children:
            if part.type == "shorthand_property_identifier_pattern":
                yield module, view.node_text(part), view.node_text(part)
            elif part.type == "pair_pattern":
                yield module, view.node_text(part.child_by_field_name("key")), view.node_text(
                    part.child_by_field_name("value"))
    else:
        yield module, member, ""


def _javascript(view, node):
    if node.type == "call_expression":
        yield from _js_require(view, node)
        return
    module = _string_content(view, node.child_by_field_name("source"))
    pairs = []
    for child in node.named_children:
        if child.type == "import_clause":
            pairs += _js_clause(view, child)
        elif child.type == "import_require_clause":  # TypeScript: import x = require('./r')
            module = _string_content(view, child.child_by_field_name("source"))
            pairs.append((None, view.node_text(child.named_children[0])))
        elif child.type == "export_clause":
            for spec in child.named_children:
                name = view.node_text(spec.child_by_field_name("name"))
                alias = spec.child_by_field_name("alias")
                pairs.append((name, view.node_text(alias) if alias is not None else name))
        elif child.type == "namespace_export":  # export * as ns from './x'
            pairs.append((None, view.node_text(child.named_children[-1])))
    if node.type == "export_statement" and not pairs:
        pairs.append(("*", "*"))
    for name, local in pairs or [(None, "")]:  # a bare `import './x'` still depends on the module
        yield module, name, local


def go_package_name(path: str) -> str:
    """The name an import path binds by default: its last element, less a /vN or .vN version suffix."""
    parts = [p for p in path.split("/") if p]
    if len(parts) > 1 and parts[-1][:1] == "v" and parts[-1][1:].isdigit():
        parts.pop()
    last = parts[-1] if parts else ""
    stem, _, version = last.rpartition(".v")
    return stem if stem and version.isdigit() else last


def _go(view, node):
    path_node = node.child_by_field_name("path")
    module = _string_content(view, path_node)
    alias = node.child_by_field_name("name")
    yield module, None, view.node_text(alias) if alias is not None else go_package_name(module)


def _rust_path(view, node) -> list[str]:
    return [s for s in "".join(view.node_text(node).split()).split("::") if s] if node is not None else []


def _rust_tree(view, node, prefix: list[str]):
    """(module segments, name, local) of a use tree under `prefix`."""
    kind = node.type
    if kind == "scoped_use_list":
        inner = prefix + _rust_path(view, node.child_by_field_name("path"))
        yield from _rust_tree(view, node.child_by_field_name("list"), inner)
    elif kind == "use_list":
        for child in node.named_children:
            yield from _rust_tree(view, child, prefix)
    elif kind == "use_wildcard":
        inner = prefix + (_rust_path(view, node.named_children[0]) if node.named_children else [])
        yield inner, "*", "*"
    elif kind == "use_as_clause":
        alias = view.node_text(node.child_by_field_name("alias"))
        for module, name, _ in _rust_tree(view, node.child_by_field_name("path"), prefix):
            yield module, name, alias
    elif kind in ("identifier", "scoped_identifier", "self", "crate", "super"):
        full = prefix + _rust_path(view, node)
        if full[-1] == "self" and len(full) > 1:  # use a::{self}: the module itself
            yield full[:-2], full[-2], full[-2]
        else:
            yield full[:-1], full[-1], full[-1]


def _rust(view, node):
    if node.type == "mod_item":  # `mod foo;` loads the child module's file; `mod foo { ... }` is inline
        if node.child_by_field_name("body") is None:
            name = view.node_text(node.child_by_field_name("name"))
            yield "self::" + name, None, name
        return
    argument = node.child_by_field_name("argument")
    for module, name, local in (_rust_tree(view, argument, []) if argument is not None else ()):
        if module:
            yield "::".join(module), name, local
        else:  # `use serde;`: a whole crate or module
            yield name, None, local


def _java(view, node):
    path = next((c for c in node.named_children if c.type in ("scoped_identifier", "identifier")), None)
    parts = view.node_text(path).split(".") if path is not None else []
    if any(c.type == "asterisk" for c in node.named_children):
        yield ".".join(parts), "*", "*"
    elif parts:
        yield ".".join(parts[:-1]), parts[-1], parts[-1]


def _c(view, node):
    path = node.child_by_field_name("path")
    if path is not None and path.type == "string_literal":  # not <system> headers
        yield _string_content(view, path), None, ""


_READERS = {"python": _python, "javascript": _javascript, "typescript": _javascript, "tsx": _javascript,
            "go": _go, "rust": _rust, "java": _java, "c": _c, "cpp": _c}
