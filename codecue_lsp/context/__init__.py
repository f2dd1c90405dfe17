"""Project context: a workspace index (files, tree-sitter definitions, retrieval chunks) and the per-request
choice of what other files' code goes into the prompt. See docs/architecture.md, "Project context"."""
