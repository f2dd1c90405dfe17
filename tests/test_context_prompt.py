"""Project context in the prompt: the workspace index's snippets through build_prompt (context/select.py,
context/project.py), with a cursor marker █ in the current file."""
from __future__ import annotations

from pathlib import Path

import pytest

from codecue_lsp.context.index import WorkspaceIndex
from codecue_lsp.context.project import ProjectContext
from codecue_lsp.context.select import similar_code
from codecue_lsp.prompt import OpenDocument, PromptBudget, SyntaxCache, build_prompt
from engine.store.config import FimTemplate

FIM = FimTemplate(prefix="<|fim_prefix|>", suffix="<|fim_suffix|>", middle="<|fim_middle|>",
                  file_sep="<|file_sep|>", repo_name="<|repo_name|>")
BUDGET = PromptBudget(total=1536, suffix=128, context=512)
SECRET = "sk-live-0123456789abcdef"

PROJECT = {
    "pkg/__init__.py": "",
    "pkg/errors.py": 'class QuotaExceeded(Exception):\n    """Raised when a tenant spends past its quota."""\n'
                     "    def __init__(self, tenant: str, limit: int):\n        self.tenant = tenant\n",
    "pkg/limits.py": "DEFAULT_LIMIT = 1000\n\n\ndef remaining_quota(tenant: str, used: int) -> int:\n"
                     '    """Requests the tenant may still make."""\n    return DEFAULT_LIMIT - used\n',
    "pkg/store/__init__.py": "",
    "pkg/store/backend.py": "def load_usage(tenant):\n    return 0\n\n\ndef save_usage(tenant, used):\n    pass\n",
    "web/api.ts": "export function fetchUser(id: string): Promise<User> {\n  return get(`/users/${id}`);\n}\n",
    ".env": f"API_KEY={SECRET}\n",
    ".gitignore": "private/\n",
    "private/keys.py": f"def private_key():\n    return '{SECRET}'\n",
    "config/secrets.py": f"def token():\n    return '{SECRET}'\n",
}


def write_project(root: Path) -> None:
    for rel, text in PROJECT.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "shop"
    write_project(root)
    index = WorkspaceIndex([str(root)])
    index.build()
    return root, ProjectContext(index)


def count(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def build(root: Path, rel: str, marked: str, project, language: str = "python", previous=None, others=()):
    text = marked.replace("█", "")
    before = marked[:marked.index("█")]
    line, character = before.count("\n"), len(before) - (before.rfind("\n") + 1)
    doc = OpenDocument((root / rel).as_uri(), language, text)
    return build_prompt(doc, line, character, FIM, count, other_docs=others, budget=BUDGET, syntax=SyntaxCache(),
                        previous=previous, project=project)


# (case, current file, marked text, text the prompt must show from other files)
IMPORTED = [
    ("from-import of a class raised near the cursor", "pkg/service.py",
     "from .errors import QuotaExceeded\n\n\ndef charge(tenant, used, limit):\n    if used > limit:\n        raise █\n",
     ["<|file_sep|>pkg/errors.py\n", "class QuotaExceeded(Exception):", "def __init__(self, tenant: str, limit: int)"]),
    ("from-import of a function called near the cursor, with its docstring line", "pkg/service.py",
     "from pkg.limits import remaining_quota\n\n\ndef left(tenant, used):\n    n = remaining_quota(█\n",
     ["<|file_sep|>pkg/limits.py\n", "def remaining_quota(tenant: str, used: int) -> int:",
      "Requests the tenant may still make."]),
    ("a module imported as a name: mod.function near the cursor", "pkg/service.py",
     "from .store import backend as store\n\n\ndef usage(tenant):\n    return store.load_usage(█\n",
     ["<|file_sep|>pkg/store/backend.py\n", "def load_usage(tenant):"]),
    ("relative import two levels up", "pkg/store/cache.py",
     "from ..limits import DEFAULT_LIMIT\n\n\ndef cap(x):\n    return min(x, DEFAULT_LIMIT█)\n",
     ["<|file_sep|>pkg/limits.py\n", "DEFAULT_LIMIT = 1000"]),
    ("typescript import", "web/page.ts",
     "import { fetchUser } from './api';\n\nexport async function show(id: string) {\n  const user = await fetchUser(█\n}\n",
     ["<|file_sep|>web/api.ts\n", "function fetchUser(id: string): Promise<User>"]),
]


@pytest.mark.parametrize("case, rel, marked, shown", IMPORTED, ids=[c[0] for c in IMPORTED])
def test_definitions_of_imported_names_reach_the_prompt(project, case, rel, marked, shown):
    root, context = project
    language = "typescript" if rel.endswith(".ts") else "python"
    prompt = build(root, rel, marked, context, language)
    display = prompt.display
    for text in shown:
        assert text in display, f"{case}: {text!r} missing from\n{display}"
    # The model's repository format: the repository, other files, then this file's header and the FIM part.
    assert display.startswith("<|repo_name|>shop\n<|file_sep|>")
    assert f"<|file_sep|>{rel}\n<|fim_prefix|>" in display
    assert display.index("<|file_sep|>" + shown[0].split("|>")[1]) < display.index(f"<|file_sep|>{rel}\n")


def test_without_project_no_other_file_is_shown(project):
    root, _ = project
    prompt = build(root, "pkg/service.py", IMPORTED[0][2], None)
    assert "QuotaExceeded(Exception)" not in prompt.display
    assert "<|repo_name|>" not in prompt.display


def test_secrets_and_ignored_files_never_reach_a_prompt(project):
    root, context = project
    # Even open in the editor: the .env, a .gitignore'd file and a secret-looking file.
    others = [OpenDocument((root / ".env").as_uri(), "python", PROJECT[".env"]),
              OpenDocument((root / "private/keys.py").as_uri(), "python", PROJECT["private/keys.py"]),
              OpenDocument((root / "config/secrets.py").as_uri(), "python", PROJECT["config/secrets.py"])]
    marked = ("from private.keys import private_key\nfrom config.secrets import token\n\n\n"
              "def headers():\n    key = private_key()\n    t = token()\n    api_key = █\n")
    prompt = build(root, "pkg/client.py", marked, context, others=others)
    assert SECRET not in prompt.display
    assert "private_key():" not in prompt.display.split("<|fim_prefix|>")[0]
    assert not any(path.startswith(("private/", "config/", ".env")) for path, _ in prompt.context_items)


def test_the_context_stays_the_same_while_typing_in_one_line(project):
    root, context = project
    marked = "from .errors import QuotaExceeded\n\n\ndef charge(tenant, used, limit):\n    if used > limit:\n        █\n"
    first = build(root, "pkg/service.py", marked, context)
    stable = first.display.split("<|fim_prefix|>")[0]
    previous = first.layout
    for typed in "raise Quota":
        marked = marked.replace("█", typed + "█")
        prompt = build(root, "pkg/service.py", marked, context, previous=previous)
        assert prompt.kept, f"the layout was chosen afresh after typing {typed!r}"
        assert prompt.display.split("<|fim_prefix|>")[0] == stable
        previous = prompt.layout


def test_enter_keeps_the_context(project):
    root, context = project
    marked = "from .errors import QuotaExceeded\n\n\ndef charge(tenant, used, limit):\n    x = 1█\n"
    first = build(root, "pkg/service.py", marked, context)
    after_enter = build(root, "pkg/service.py", marked.replace("█", "\n    █"), context, previous=first.layout)
    assert after_enter.kept
    assert after_enter.display.split("<|fim_prefix|>")[0] == first.display.split("<|fim_prefix|>")[0]


def test_later_uses_beyond_the_suffix_are_shown(project):
    root, context = project
    filler = "".join(f"    step_{i} = compute_{i}(value)\n" for i in range(120))
    marked = ("def report(tenant):\n    summary_builder = █\n" + filler
              + "    summary_builder.add_section('usage', tenant)\n    return summary_builder.render()\n")
    prompt = build(root, "pkg/report.py", marked, context)
    assert "summary_builder.add_section('usage', tenant)" not in prompt.suffix  # beyond the suffix budget
    assert "summary_builder.add_section('usage', tenant)" in prompt.display.split("<|fim_suffix|>")[0]


def test_context_tokens_bound_what_other_files_take(project):
    root, context = project
    marked = IMPORTED[0][2]
    small = PromptBudget(total=1536, suffix=128, context=8)
    text = marked.replace("█", "")
    before = marked[:marked.index("█")]
    doc = OpenDocument((root / "pkg/service.py").as_uri(), "python", text)
    prompt = build_prompt(doc, before.count("\n"), len(before) - before.rfind("\n") - 1, FIM, count,
                          budget=small, syntax=SyntaxCache(), project=context)
    assert "QuotaExceeded(Exception)" not in prompt.display


def test_a_dotted_module_import_finds_the_member_used(project):
    root, context = project
    marked = "import pkg.limits\n\n\ndef left(tenant, used):\n    return pkg.limits.remaining_quota(█\n"
    prompt = build(root, "pkg/service.py", marked, context)
    assert "<|file_sep|>pkg/limits.py\n" in prompt.display
    assert "def remaining_quota(tenant: str, used: int) -> int:" in prompt.display


SESSION = ("def open_session(engine_url, pool_size):\n    pool = make_pool(engine_url, pool_size)\n"
           "    return Session(pool)\n")


def test_similar_code_shows_the_chunks_lines_read_from_their_file(tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "session.py").write_text(SESSION)
    (tmp_path / "web.py").write_text("def index(request):\n    return render_template('index.html')\n")
    index = WorkspaceIndex([str(tmp_path)])
    index.build()
    text = "session = open_session(engine_url, pool_size=5)\n"
    [snippet] = similar_code(index, "app.py", text, len(text), recent=())
    assert (snippet.path, snippet.kind, snippet.start_line, snippet.end_line) == ("db/session.py", "similar", 0, 4)
    assert snippet.text == SESSION.rstrip("\n")
    assert similar_code(index, "db/session.py", SESSION, len(SESSION), recent=()) == []  # never the current file


def test_similar_code_skips_a_chunk_whose_file_is_gone(tmp_path):
    (tmp_path / "session.py").write_text(SESSION)
    index = WorkspaceIndex([str(tmp_path)])
    index.build()
    (tmp_path / "session.py").unlink()  # not re-indexed yet: the chunk is still found, its lines are not
    text = "session = open_session(engine_url, pool_size=5)\n"
    assert [chunk.path for _, chunk in index.similar(text, 3)] == ["session.py"]
    assert similar_code(index, "app.py", text, len(text), recent=()) == []



def test_an_imported_name_not_used_near_the_cursor_is_left_out(project):
    # Ranking every import in completed fewer cross-file lines than the names used near the cursor alone.
    root, context = project
    filler = "".join(f"\n\ndef step_{i}(value):\n    return value + {i}\n" for i in range(12))
    marked = "from .limits import remaining_quota\n" + filler + "\n\ndef left(account, spent):\n    █\n"
    prompt = build(root, "pkg/service.py", marked, context)
    assert "def remaining_quota(" not in prompt.display.split("<|fim_prefix|>")[0]
