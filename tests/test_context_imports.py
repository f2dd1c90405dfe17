"""Imports as written (parse_imports) and the workspace files they refer to (resolve), table-driven per language."""
import pytest

from codecue_lsp.context.imports import go_package_name, parse_imports
from codecue_lsp.context.resolve import resolve
from codecue_lsp.context.types import ImportRef

PY_SOURCE = """\
from __future__ import annotations
import a.b
import a.b as c, d
from .x import y
from ..pkg.mod import y as z
from . import mod
from x import (a,
               b)
from m import *
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .types import T

def f():
    import os.path as osp
    return osp.join(a.b.name)
"""

JS_SOURCE = """\
import x from './a';
import {a as b, c} from '../b';
import * as ns from './c';
const {a2, b2: bb} = require('./d');
const m = require('./e');
export {x1, y1 as z1} from './f';
import './side';
import def, {q} from './g';
export * from './h';
const member = require('./i').part;
import fs from 'fs';
"""

GO_SOURCE = """\
package p

import "github.com/o/r/pkg"

import (
    "fmt"
    al "github.com/o/r/other"
    _ "x/y"
    "gopkg.in/yaml.v3"
    "github.com/o/r/v2"
)
"""

RUST_SOURCE = """\
use crate::a::b::C;
use super::x::{y, z as w};
use self::m::*;
mod foo;
mod inline { fn f() {} }
use std::collections::{HashMap, hash_map::Entry};
use crate::q::{self, r};
fn main() { use crate::inner::Thing; }
"""

JAVA_SOURCE = """\
package com.app;
import com.x.y.Z;
import static com.x.Y.m;
import com.x.*;
import static com.x.Y.*;
"""

C_SOURCE = '#include "a/b.h"\n#include <stdio.h>\n#include "../up.h"\nint main(void) { return 0; }\n'

PARSE_TABLE = [
    ("python", PY_SOURCE, [
        ("a.b", None, "a.b"), ("a.b", None, "c"), ("d", None, "d"), (".x", "y", "y"), ("..pkg.mod", "y", "z"),
        (".", "mod", "mod"), ("x", "a", "a"), ("x", "b", "b"), ("m", "*", "*"),
        ("typing", "TYPE_CHECKING", "TYPE_CHECKING"), (".types", "T", "T"), ("os.path", None, "osp")]),
    ("javascript", JS_SOURCE, [
        ("./a", "default", "x"), ("../b", "a", "b"), ("../b", "c", "c"), ("./c", None, "ns"), ("./d", "a2", "a2"),
        ("./d", "b2", "bb"), ("./e", None, "m"), ("./f", "x1", "x1"), ("./f", "y1", "z1"), ("./side", None, ""),
        ("./g", "default", "def"), ("./g", "q", "q"), ("./h", "*", "*"), ("./i", "part", "member"),
        ("fs", "default", "fs")]),
    ("typescript", "import type {T} from './t';\nimport r = require('./r');\nimport {u} from '../u.js';\n", [
        ("./t", "T", "T"), ("./r", None, "r"), ("../u.js", "u", "u")]),
    ("typescriptreact", "import React, {useState as us} from 'react';\nimport Btn from './Btn';\n", [
        ("react", "default", "React"), ("react", "useState", "us"), ("./Btn", "default", "Btn")]),
    ("javascriptreact", "const {h} = require('./h');\n", [("./h", "h", "h")]),
    ("go", GO_SOURCE, [
        ("github.com/o/r/pkg", None, "pkg"), ("fmt", None, "fmt"), ("github.com/o/r/other", None, "al"),
        ("x/y", None, "_"), ("gopkg.in/yaml.v3", None, "yaml"), ("github.com/o/r/v2", None, "r")]),
    ("rust", RUST_SOURCE, [
        ("crate::a::b", "C", "C"), ("super::x", "y", "y"), ("super::x", "z", "w"), ("self::m", "*", "*"),
        ("self::foo", None, "foo"), ("std::collections", "HashMap", "HashMap"),
        ("std::collections::hash_map", "Entry", "Entry"), ("crate", "q", "q"), ("crate::q", "r", "r"),
        ("crate::inner", "Thing", "Thing")]),
    ("java", JAVA_SOURCE, [
        ("com.x.y", "Z", "Z"), ("com.x.Y", "m", "m"), ("com.x", "*", "*"), ("com.x.Y", "*", "*")]),
    ("c", C_SOURCE, [("a/b.h", None, ""), ("../up.h", None, "")]),
    ("cpp", '#include "util/str.hpp"\n#include <vector>\n', [("util/str.hpp", None, "")]),
    ("plaintext", "import a.b\n", []),
]


@pytest.mark.parametrize("language, source, expected", PARSE_TABLE, ids=[row[0] for row in PARSE_TABLE])
def test_parse_imports(language, source, expected):
    refs = parse_imports(language, source)
    assert [(r.module, r.name, r.local) for r in refs] == expected
    assert {r.language_id for r in refs} <= {language}


def test_parse_imports_survives_broken_code():
    refs = parse_imports("python", "import c\nfrom .a import b\ndef broken(:\n    x = (\n")
    assert [(r.module, r.name, r.local) for r in refs] == [("c", None, "c"), (".a", "b", "b")]
    assert [r.module for r in parse_imports("python", "def f(:\n    pass\nimport c\n")] == ["c"]


@pytest.mark.parametrize("path, name", [("github.com/o/r/pkg", "pkg"), ("gopkg.in/yaml.v3", "yaml"),
                                        ("github.com/o/r/v2", "r"), ("fmt", "fmt")])
def test_go_package_name(path, name):
    assert go_package_name(path) == name


PY_PATHS = {
    "app/__init__.py", "app/main.py", "app/util.py", "app/models/__init__.py", "app/models/user.py",
    "app/sub/deep.py", "app/sub/__init__.py", "src/lib/__init__.py", "src/lib/core.py", "src/lib/core/extra.py",
    "backend/service/__init__.py", "backend/service/api.py", "tools/json.py", "tools/__init__.py",
    "setup.py", "a/b.py", "a/__init__.py",
}
JS_PATHS = {"web/src/a.ts", "web/src/b/index.tsx", "web/src/c.js", "web/lib/d.jsx", "web/src/e.mjs",
            "web/src/u.ts", "web/src/style.css"}
GO_PATHS = {"go.mod", "pkg/store/db.go", "pkg/store/db_test.go", "pkg/store/cache.go", "cmd/app/main.go",
            "internal/other/o.go", "vendor/x/other/v.go", "strings/s.go"}
RUST_PATHS = {"Cargo.toml", "src/lib.rs", "src/a.rs", "src/a/b.rs", "src/net/mod.rs", "src/net/tcp.rs",
              "src/net/foo.rs", "src/net/tcp/frame.rs", "src/m.rs", "src/config.rs"}
JAVA_PATHS = {"src/main/java/com/x/y/Z.java", "src/main/java/com/x/Y.java", "src/main/java/com/x/W.java",
              "src/test/java/com/x/YTest.java", "src/main/java/com/x/readme.txt"}
C_PATHS = {"src/main.c", "src/a/b.h", "include/a/b.h", "include/up.h", "lib/util/str.hpp", "up.h"}


def ref(language, module, name=None, local=""):
    return ImportRef(language, module, name, local)


RESOLVE_TABLE = [
    # Python: relative levels
    ("py .x name", ref("python", ".util", "helper"), "app/main.py", PY_PATHS, ["app/util.py"]),
    ("py . submodule", ref("python", ".", "util"), "app/main.py", PY_PATHS, ["app/util.py", "app/__init__.py"]),
    ("py . package member", ref("python", ".", "VERSION"), "app/main.py", PY_PATHS, ["app/__init__.py"]),
    ("py .. up", ref("python", "..util", "helper"), "app/sub/deep.py", PY_PATHS, ["app/util.py"]),
    ("py ..pkg.mod", ref("python", "..models.user", "User"), "app/sub/deep.py", PY_PATHS, ["app/models/user.py"]),
    ("py .models package", ref("python", ".models", "User"), "app/main.py", PY_PATHS, ["app/models/__init__.py"]),
    ("py .models submodule", ref("python", ".models", "user"), "app/main.py", PY_PATHS,
     ["app/models/user.py", "app/models/__init__.py"]),
    ("py star", ref("python", ".util", "*"), "app/main.py", PY_PATHS, ["app/util.py"]),
    ("py too many dots", ref("python", "....x", "y"), "app/main.py", PY_PATHS, []),
    # Python: absolute from the root, src/, a folder holding the top package
    ("py import a.b", ref("python", "a.b", None, "a.b"), "app/main.py", PY_PATHS, ["a/b.py"]),
    ("py from root pkg", ref("python", "app.models.user", "User"), "setup.py", PY_PATHS, ["app/models/user.py"]),
    ("py from pkg import submodule", ref("python", "app.models", "user"), "app/main.py", PY_PATHS,
     ["app/models/user.py", "app/models/__init__.py"]),
    ("py src layout", ref("python", "lib.core", "run"), "tests/test_core.py", PY_PATHS, ["src/lib/core.py"]),
    ("py src layout nested", ref("python", "lib.core.extra", None, "lib.core.extra"), "x.py", PY_PATHS,
     ["src/lib/core/extra.py"]),
    ("py nested root", ref("python", "service.api", "route"), "backend/main.py", PY_PATHS,
     ["backend/service/api.py"]),
    ("py stdlib", ref("python", "os.path", "join"), "app/main.py", PY_PATHS, []),
    ("py stdlib named like a package member", ref("python", "json", None, "json"), "app/main.py", PY_PATHS, []),
    ("py third party", ref("python", "numpy", None, "np"), "app/main.py", PY_PATHS, []),
    # JavaScript / TypeScript
    ("ts extension probe", ref("typescript", "./a", "x"), "web/src/main.ts", JS_PATHS, ["web/src/a.ts"]),
    ("tsx index", ref("typescriptreact", "./b", "B"), "web/src/main.tsx", JS_PATHS, ["web/src/b/index.tsx"]),
    ("js exact", ref("javascript", "./c.js"), "web/src/main.js", JS_PATHS, ["web/src/c.js"]),
    ("js parent", ref("javascriptreact", "../lib/d", "D"), "web/src/main.jsx", JS_PATHS, ["web/lib/d.jsx"]),
    ("js mjs", ref("javascript", "./e"), "web/src/main.js", JS_PATHS, ["web/src/e.mjs"]),
    ("ts .js means .ts", ref("typescript", "./u.js", "u"), "web/src/main.ts", JS_PATHS, ["web/src/u.ts"]),
    ("js package", ref("javascript", "react", "default"), "web/src/main.js", JS_PATHS, []),
    ("js missing", ref("javascript", "./nope"), "web/src/main.js", JS_PATHS, []),
    ("js outside workspace", ref("javascript", "../../../x"), "web/src/main.js", JS_PATHS, []),
    # Go
    ("go module path", ref("go", "github.com/o/r/pkg/store", None, "store"), "cmd/app/main.go", GO_PATHS,
     ["pkg/store/cache.go", "pkg/store/db.go"]),
    ("go longest match wins", ref("go", "github.com/o/r/internal/other"), "cmd/app/main.go", GO_PATHS,
     ["internal/other/o.go"]),
    ("go stdlib", ref("go", "strings", None, "strings"), "cmd/app/main.go", GO_PATHS, []),
    ("go third party", ref("go", "github.com/other/lib"), "cmd/app/main.go", GO_PATHS, []),
    # Rust
    ("rust crate item", ref("rust", "crate::a::b", "C", "C"), "src/net/tcp.rs", RUST_PATHS, ["src/a/b.rs"]),
    ("rust crate module", ref("rust", "crate::net", "tcp", "tcp"), "src/a.rs", RUST_PATHS, ["src/net/tcp.rs"]),
    ("rust crate root item", ref("rust", "crate", "Config", "Config"), "src/a.rs", RUST_PATHS, ["src/lib.rs"]),
    ("rust self from mod.rs", ref("rust", "self::tcp", "Stream"), "src/net/mod.rs", RUST_PATHS,
     ["src/net/tcp.rs"]),
    ("rust self from file", ref("rust", "self::frame", "Frame"), "src/net/tcp.rs", RUST_PATHS,
     ["src/net/tcp/frame.rs"]),
    ("rust super", ref("rust", "super", "foo", "foo"), "src/net/tcp.rs", RUST_PATHS, ["src/net/foo.rs"]),
    ("rust super item", ref("rust", "super", "listen", "listen"), "src/net/tcp.rs", RUST_PATHS,
     ["src/net/mod.rs"]),
    ("rust mod decl", ref("rust", "self::m", None, "m"), "src/lib.rs", RUST_PATHS, ["src/m.rs"]),
    ("rust mod decl folder", ref("rust", "self::net", None, "net"), "src/lib.rs", RUST_PATHS, ["src/net/mod.rs"]),
    ("rust local module", ref("rust", "config", "Settings"), "src/lib.rs", RUST_PATHS, ["src/config.rs"]),
    ("rust std", ref("rust", "std::collections", "HashMap"), "src/lib.rs", RUST_PATHS, []),
    # Java
    ("java class", ref("java", "com.x.y", "Z", "Z"), "src/main/java/com/app/App.java", JAVA_PATHS,
     ["src/main/java/com/x/y/Z.java"]),
    ("java static member", ref("java", "com.x.Y", "m", "m"), "src/main/java/com/app/App.java", JAVA_PATHS,
     ["src/main/java/com/x/Y.java"]),
    ("java star", ref("java", "com.x", "*", "*"), "src/main/java/com/app/App.java", JAVA_PATHS,
     ["src/main/java/com/x/W.java", "src/main/java/com/x/Y.java", "src/test/java/com/x/YTest.java"]),
    ("java static star", ref("java", "com.x.Y", "*", "*"), "src/main/java/com/app/App.java", JAVA_PATHS,
     ["src/main/java/com/x/Y.java"]),
    ("java jdk", ref("java", "java.util", "List", "List"), "src/main/java/com/app/App.java", JAVA_PATHS, []),
    # C / C++
    ("c beside the file", ref("c", "a/b.h"), "src/main.c", C_PATHS, ["src/a/b.h", "include/a/b.h"]),
    ("c include dir", ref("c", "up.h"), "src/main.c", C_PATHS, ["up.h", "include/up.h"]),
    ("c parent folder", ref("c", "../up.h"), "src/main.c", C_PATHS, ["up.h", "include/up.h"]),
    ("cpp suffix", ref("cpp", "util/str.hpp"), "src/x.cpp", C_PATHS, ["lib/util/str.hpp"]),
    ("c missing", ref("c", "nope.h"), "src/main.c", C_PATHS, []),
    ("no grammar", ref("plaintext", "a.b"), "x.txt", PY_PATHS, []),
]


@pytest.mark.parametrize("case, import_ref, from_path, paths, expected", RESOLVE_TABLE,
                         ids=[row[0] for row in RESOLVE_TABLE])
def test_resolve(case, import_ref, from_path, paths, expected):
    assert resolve(import_ref, from_path, paths) == expected
    assert resolve(import_ref, from_path, frozenset(paths)) == expected  # the cached index answers the same


def test_parsed_imports_resolve_end_to_end():
    source = "from .util import helper\nimport app.models.user\nfrom ..app import util\nimport os\n"
    refs = parse_imports("python", source)
    paths = frozenset(PY_PATHS)
    assert [resolve(r, "app/main.py", paths) for r in refs] == [
        ["app/util.py"], ["app/models/user.py"], ["app/util.py", "app/__init__.py"], []]
    assert [resolve(r, "app/sub/deep.py", paths) for r in refs] == [[], ["app/models/user.py"], [], []]
