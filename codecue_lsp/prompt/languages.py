"""Which tree-sitter grammar serves which LSP languageId, and the few per-language facts the prompt rules need."""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    module: str                 # grammar wheel module
    function: str = "language"  # its function returning the grammar pointer
    comment: str = "//"
    braces: bool = True         # blocks are delimited by { } (else by indentation, as in Python)
    imports: frozenset[str] = frozenset()
    # Definitions whose header (text before the body) is a useful signature.
    definitions: frozenset[str] = frozenset()
    # Definitions whose body members get their own signatures (classes, impls, interfaces).
    containers: frozenset[str] = frozenset()
    wrappers: frozenset[str] = field(default=frozenset())  # decorated_definition, export_statement, ...
    # Nodes that belong to the sibling after them (Rust's outer attributes): a unit starts at the first of them and
    # never ends after one.
    attached: frozenset[str] = field(default=frozenset())


_JS_DEFS = frozenset({"function_declaration", "generator_function_declaration", "class_declaration",
                      "method_definition", "abstract_class_declaration", "interface_declaration",
                      "type_alias_declaration", "enum_declaration", "abstract_method_signature"})

SPECS: dict[str, LanguageSpec] = {
    "python": LanguageSpec(
        "python", "tree_sitter_python", comment="#", braces=False,
        imports=frozenset({"import_statement", "import_from_statement", "future_import_statement"}),
        definitions=frozenset({"function_definition", "class_definition"}),
        containers=frozenset({"class_definition"}), wrappers=frozenset({"decorated_definition"})),
    "javascript": LanguageSpec(
        "javascript", "tree_sitter_javascript", imports=frozenset({"import_statement"}),
        definitions=_JS_DEFS, containers=frozenset({"class_declaration"}),
        wrappers=frozenset({"export_statement"})),
    "typescript": LanguageSpec(
        "typescript", "tree_sitter_typescript", "language_typescript", imports=frozenset({"import_statement"}),
        definitions=_JS_DEFS, containers=frozenset({"class_declaration", "abstract_class_declaration"}),
        wrappers=frozenset({"export_statement"})),
    "tsx": LanguageSpec(
        "tsx", "tree_sitter_typescript", "language_tsx", imports=frozenset({"import_statement"}),
        definitions=_JS_DEFS, containers=frozenset({"class_declaration", "abstract_class_declaration"}),
        wrappers=frozenset({"export_statement"})),
    "go": LanguageSpec(
        "go", "tree_sitter_go", imports=frozenset({"import_declaration"}),
        definitions=frozenset({"function_declaration", "method_declaration", "type_declaration"})),
    "rust": LanguageSpec(
        "rust", "tree_sitter_rust", imports=frozenset({"use_declaration"}),
        definitions=frozenset({"function_item", "struct_item", "enum_item", "trait_item", "impl_item",
                               "function_signature_item"}),
        containers=frozenset({"impl_item", "trait_item"}), attached=frozenset({"attribute_item"})),
    "java": LanguageSpec(
        "java", "tree_sitter_java", imports=frozenset({"import_declaration"}),
        definitions=frozenset({"class_declaration", "interface_declaration", "enum_declaration",
                               "method_declaration", "constructor_declaration", "record_declaration"}),
        containers=frozenset({"class_declaration", "interface_declaration", "enum_declaration",
                              "record_declaration"})),
    "c": LanguageSpec(
        "c", "tree_sitter_c", imports=frozenset({"preproc_include"}),
        definitions=frozenset({"function_definition", "struct_specifier"})),
    "cpp": LanguageSpec(
        "cpp", "tree_sitter_cpp", imports=frozenset({"preproc_include", "using_declaration"}),
        definitions=frozenset({"function_definition", "class_specifier", "struct_specifier"}),
        containers=frozenset({"class_specifier", "struct_specifier", "namespace_definition"})),
}

LSP_LANGUAGE_IDS = {
    "python": "python", "javascript": "javascript", "javascriptreact": "javascript",
    "typescript": "typescript", "typescriptreact": "tsx", "go": "go", "rust": "rust", "java": "java",
    "c": "c", "cpp": "cpp",
}

# Line-comment prefixes for languages without a grammar (used only to label other files).
_FALLBACK_COMMENTS = {"ruby": "#", "shellscript": "#", "perl": "#", "r": "#", "yaml": "#", "toml": "#",
                      "lua": "--", "sql": "--", "haskell": "--"}


def spec_for(language_id: str) -> LanguageSpec | None:
    """The grammar spec for an LSP languageId, or None (line-based fallback) when there is none."""
    name = LSP_LANGUAGE_IDS.get((language_id or "").lower())
    return SPECS.get(name) if name else None


def comment_prefix(language_id: str) -> str:
    spec = spec_for(language_id)
    if spec:
        return spec.comment
    return _FALLBACK_COMMENTS.get((language_id or "").lower(), "//")


def line_comment(language_id: str) -> str | None:
    """The language's line-comment marker; None for a language not known here (plain text has none)."""
    spec = spec_for(language_id)
    if spec:
        return spec.comment
    return _FALLBACK_COMMENTS.get((language_id or "").lower())


def uses_braces(language_id: str) -> bool:
    spec = spec_for(language_id)
    return spec.braces if spec else (language_id or "").lower() != "python"


@functools.lru_cache(maxsize=None)
def load_language(name: str):
    """The tree_sitter.Language for a spec name; None when its wheel is missing (then: line-based logic)."""
    from tree_sitter import Language

    spec = SPECS[name]
    try:
        module = importlib.import_module(spec.module)
        return Language(getattr(module, spec.function)())
    except Exception:  # a missing or broken grammar wheel must not break completions
        return None
